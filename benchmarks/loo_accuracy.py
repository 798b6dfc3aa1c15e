"""Leave-one-out evaluations against long double, beside a refit's (#55).

On the near-duplicate set of ``benchmarks/conditioning.py`` (Toy 1, 200 rows plus 100 of them
repeated 1e-7 apart) at ``lambda = 1e-6`` and ``1e-8``: for 6 left-out rows and 4 outputs near each
row's own, the leave-one-out objective (SMTGP, KLTGP, IKLTGP) and SMTGP gradient of the full model
(:func:`fastsm.tgp.views.leave_one_out`'s projections) and of a refit without the row, both
against ``tests/longdouble.py`` in 80-bit long double of the refit; and the largest difference of
the exact SMTGP Hessians of the two, relative to the refit's largest entry::

    python benchmarks/loo_accuracy.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from entries import hessian_rows  # noqa: E402
from longdouble import Reference  # noqa: E402

from fastsm import tgp  # noqa: E402
from fastsm._kernels import objectives as obj  # noqa: E402
from fastsm._threads import thread_limits  # noqa: E402
from fastsm.tgp import prediction as api  # noqa: E402
from fastsm.tgp import views  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conditioning import near_duplicates  # noqa: E402

LD = np.longdouble
ROWS = (203, 249, 274, 61, 165, 10)


def evaluate(model, X, Y, method, held=None):
    """Value, gradient and (SMTGP) Hessian at rows ``Y`` of the inputs ``X``; ``held``: left out."""
    m, dy = Y.shape
    loo = None if held is None else views.leave_one_out(model)
    F, eta_x, _, _ = api.prepare_points(model, X, method, held, loo)
    beta = 1.0 if method == "sm" else model.params.beta
    plan = views.products_plan(model, method)
    out = obj.Evaluations(np.empty(m), np.empty((m, dy)), np.empty(m), np.empty(m), np.zeros(m, dtype=np.int64))
    H = np.full((m, dy, dy), np.nan)
    rows = np.arange(m)
    hb = views.held_rows(held, m, loo)
    with thread_limits(1):
        o = views.objective_view(model, method, beta, loo)
        prod = obj.Products(obj.workspace(m, model.n_train), plan)
        obj.evaluate_batch(o, obj.Points(F, eta_x, hb), rows, np.ascontiguousarray(Y), out, prod, None)
        if method == "sm":
            jprod = obj.Products(obj.workspace(m * dy, model.n_train), plan)
            hessian_rows(o, rows, np.ascontiguousarray(Y), out, prod.work, H, jprod, hb)
    return out.value, out.grad, H


def main() -> None:
    print("  lam quantity           leave-one-out  refit")
    for lam in (1e-6, 1e-8):
        X, Y, _, p = near_duplicates(lam)
        model = tgp.fit(X, Y, p)
        rng = np.random.default_rng(1)
        err = {}
        for h in ROWS:
            keep = np.delete(np.arange(len(X)), h)
            ref = Reference(X[keep], Y[keep], p, LD)
            refit = tgp.fit(X[keep], Y[keep], p)
            Yq = Y[h:h + 1] + 0.05 * model.y_spread * rng.standard_normal((4, Y.shape[1]))
            Xq = np.repeat(X[h:h + 1], 4, axis=0)
            for method in ("sm", "kl", "ikl"):
                ours = evaluate(model, Xq, Yq, method, held=np.full(4, h))
                theirs = evaluate(refit, Xq, Yq, method)
                e = err.setdefault(method, np.zeros(2))
                for k in range(4):
                    y = Yq[k].astype(LD)
                    r = ref.value(X[h], y, method, beta=1.0 if method == "sm" else None)
                    scale = abs(r) if method == "sm" else ref.terms(X[h], y, method)
                    e[:] = np.maximum(e, [float(abs(v[k] - r) / scale) for v in (ours[0], theirs[0])])
                if method == "sm":
                    g = err.setdefault("sm gradient", np.zeros(2))
                    for k in range(4):
                        _, gl = ref.sm_criterion_grad(X[h].astype(LD), Yq[k].astype(LD))
                        s = float(abs(gl).max())
                        g[:] = np.maximum(g, [float(abs(v[k] - gl).max()) / s for v in (ours[1], theirs[1])])
                    hd = err.setdefault("sm Hessian vs refit", np.zeros(2))
                    hd[0] = max(hd[0], float(abs(ours[2] - theirs[2]).max() / abs(theirs[2]).max()))
        for name, e in err.items():
            refit = "" if name.endswith("refit") else f"{e[1]:.1e}"
            print(f"{lam:5.0e} {name:20s} {e[0]:.1e}       {refit}")


if __name__ == "__main__":
    main()
