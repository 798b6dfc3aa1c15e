"""Leave-one-out by downdates vs refitting, appends vs refitting, and what beta changes.

Run: ``python benchmarks/model_selection.py [--loo 500 1000 2000] [--update 1000 2000 4000]``.
One run on this machine; times exclude JIT compilation (every path is warmed first).

* ``loo``: ``tgp.loo_predict`` of all N points (SMTGP with its KLTGP start) vs
  refit-and-predict; the refit cost is measured on ``--refits`` points and
  multiplied by N (N refits at N = 2000 would take hours).
* ``update``: ``tgp.partial_fit`` of one point vs ``tgp.fit`` on N + 1 points.
* ``beta``: SMTGP predictions when the optimiser minimises the beta-dependent
  objective ``exp(c s)/(beta - 1)`` (the paper's) instead of fastsm's beta-free
  form: same argmin (Lemma 4.2), different paths.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
from shift_peers import timed  # best-of-k timer shared by the benchmark scripts

from fastsm import config, datasets, tgp

PARAMS = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4, alpha=0.85, beta=1.5)


def loo(sizes, refits):
    print(f"{'N':>6} {'LOO by downdate [s]':>20} {'refit+predict / pt [s]':>23} {'x N = refit LOO [s]':>20} "
          f"{'speed-up':>9} {'max |dy|':>9}")
    X0, _, Y0, _ = datasets.toy1(0, n_train=40, n_test=2)
    tgp.loo_predict(tgp.fit(X0, Y0, PARAMS))  # warm-up
    for n in sizes:
        X, _, Y, _ = datasets.toy1(0, n_train=n, n_test=2)
        t_loo, res = timed(lambda X=X, Y=Y: tgp.loo_predict(tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))), 1)
        idx = np.linspace(0, n - 1, refits).astype(int)
        t0 = time.perf_counter()
        dmax = 0.0
        for i in idx:
            keep = np.arange(n) != i
            m = tgp.fit(X[keep], Y[keep], PARAMS, methods=("kl", "sm"))
            y = tgp.predict(m, X[i:i + 1]).y[0]
            dmax = max(dmax, float(np.abs(y - res.y[i]).max()))
        per = (time.perf_counter() - t0) / refits
        print(f"{n:6d} {t_loo:20.3f} {per:23.4f} {per * n:20.1f} {per * n / t_loo:9.0f} {dmax:9.1e}", flush=True)


def update(sizes):
    print(f"{'N':>6} {'partial_fit 1 pt [s]':>21} {'fit N+1 [s]':>12} {'speed-up':>9} {'max rel |dK^-1|':>16}")
    X0, _, Y0, _ = datasets.toy1(0, n_train=40, n_test=2)
    tgp.partial_fit(tgp.fit(X0[:-1], Y0[:-1]), X0[-1:], Y0[-1:])
    for n in sizes:
        X, _, Y, _ = datasets.random_structured(0, n_train=n + 1, n_test=1, dx=8, dy=16)
        p = tgp.TGPParams(gamma_x=0.05, gamma_y=0.05, lambda_x=1e-2, lambda_y=1e-2, alpha=0.5)
        base = tgp.fit(X[:n], Y[:n], p)
        t_up, up = timed(lambda b=base, X=X, Y=Y, n=n: tgp.partial_fit(b, X[n:], Y[n:]), 3)
        t_fit, ref = timed(lambda X=X, Y=Y, p=p: tgp.fit(X, Y, p), 3)
        err = max(float(np.abs(getattr(up, k) - getattr(ref, k)).max() / np.abs(getattr(ref, k)).max())
                  for k in ("Kx_inv", "Ky_inv", "Kxy_inv", "C"))
        print(f"{n:6d} {t_up:21.4f} {t_fit:12.3f} {t_fit / t_up:9.1f} {err:16.1e}", flush=True)


def beta_paths():
    from fastsm._kernels.objectives import Points
    from fastsm._kernels.optimize import minimize_batch
    from fastsm._kernels.quasi_newton import Options, plain_start, stop_rule
    from fastsm._threads import thread_limits
    from fastsm.tgp import prediction as api
    from fastsm.tgp import views

    print(f"{'data':5} {'beta':>5} {'evals/pt':>9} {'conv.':>6} {'max |y - y_free|':>17} {'median':>9}")
    for name, make, alpha in (("toy1", datasets.toy1, 0.9), ("toy2", datasets.toy2, 0.6)):
        X, Xt, Y, _ = make(0)
        model = tgp.fit(X, Y, dataclasses.replace(PARAMS, alpha=alpha, beta=1.5))
        free = tgp.predict(model, Xt, method="sm")
        start = tgp.predict(model, Xt, method="kl").y
        print(f"{name:5} {'free':>5} {free.n_eval.mean():9.1f} {free.converged.mean():6.1%} {0.0:17.1e} {0.0:9.1e}")
        F, eta_x, _, _ = api.prepare_points(model, Xt, "sm")
        n = len(Xt)
        for beta in (0.5, 0.99, 1.5):
            opts = Options(stop_rule(50, np.full(n, 1e-8 * model.y_spread), config.DEFAULT_FTOL),
                           np.full(n, 0.25 * model.y_spread), True, config.DEFAULT_WINDOW, False)
            with thread_limits(None):
                Yb, _, _, ev, cv, *_ = minimize_batch(
                    views.objective_view(model, "sm", beta), Points(F, eta_x, np.full(n, -1)), plain_start(start),
                    opts, np.zeros(1, dtype=np.int64), None, views.products_plan(model, "sm"))
            d = np.abs(Yb - free.y).max(axis=1)
            print(f"{name:5} {beta:5.2f} {ev.mean():9.1f} {cv.mean():6.1%} {d.max():17.1e} {np.median(d):9.1e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loo", type=int, nargs="*", default=[500, 1000, 2000])
    ap.add_argument("--refits", type=int, default=10)
    ap.add_argument("--update", type=int, nargs="*", default=[1000, 2000, 4000])
    ap.add_argument("--no-beta", action="store_true")
    args = ap.parse_args()
    if args.loo:
        loo(args.loo, args.refits)
    if args.update:
        update(args.update)
    if not args.no_beta:
        beta_paths()


if __name__ == "__main__":
    main()
