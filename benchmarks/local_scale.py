"""KNN-local TGP throughput vs the global model ([SM] §5.1.4), and the memory of a large batch prediction.

Run: ``python benchmarks/local_scale.py [--n-train 5000] [--n-test 1000] [--ks 200 800]``
     ``python benchmarks/local_scale.py --memory 100000`` (peak RSS of a global prediction of that many points)

Data: ``datasets.random_structured`` (dx = 5, dy = 4), SMTGP.  Times exclude JIT compilation.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastsm import datasets, tgp
from fastsm.tgp.neighbours import neighbour_groups

PARAMS = tgp.TGPParams(gamma_x=0.1, gamma_y=0.1, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)


def throughput(n_train, n_test, ks, threads):
    X, Xt, Y, Yt = datasets.random_structured(0, n_train=n_train, n_test=n_test, dx=5, dy=4)
    tgp.predict(tgp.fit_local(X[:200], Y[:200], PARAMS, n_neighbors=50), Xt[:8])  # warm-up
    t0 = time.perf_counter()
    g = tgp.predict(tgp.fit(X, Y, PARAMS, methods=("kl", "sm")), Xt, threads=threads)
    t_global = time.perf_counter() - t0
    err_g = np.abs(g.y - Yt).mean()
    print(f"global model N = {n_train}: fit + predict {n_test} points {t_global:.1f} s "
          f"({n_test / t_global:.1f} points/s), test MAE {err_g:.4f}")
    print(f"{'K':>5} {'share':>8} {'models':>7} {'mean size':>10} {'time [s]':>9} {'points/s':>9} "
          f"{'MAE':>7} {'|y - y_global| mean':>20} {'max':>9}")
    for k in ks:
        for share in ("none", "exact", "cluster"):
            m = tgp.fit_local(X, Y, PARAMS, n_neighbors=k, share=share, group_size=32)
            groups = neighbour_groups(m, Xt)
            t0 = time.perf_counter()
            p = tgp.predict(m, Xt, threads=threads)
            dt = time.perf_counter() - t0
            d = np.abs(p.y - g.y).max(axis=1)
            print(f"{k:5d} {share:>8} {len(groups):7d} {np.mean([len(mb) for _, mb in groups]):10.0f} {dt:9.2f} "
                  f"{n_test / dt:9.1f} {np.abs(p.y - Yt).mean():7.4f} {d.mean():20.2e} {d.max():9.2e}", flush=True)


def _vm(field: str) -> float:
    """A ``/proc/self/status`` size in MiB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory(n_train, n_test, batch_size, max_iter):
    X, Xt, Y, _ = datasets.random_structured(0, n_train=n_train, n_test=n_test, dx=5, dy=4)
    model = tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))
    tgp.predict(model, Xt[:4], max_iter=1)
    del X, Y
    rss0 = _vm("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:  # resets the peak (VmHWM) to the current RSS
        f.write("5")
    t0 = time.perf_counter()
    p = tgp.predict(model, Xt, method="kl", max_iter=max_iter, batch_size=batch_size)
    dt = time.perf_counter() - t0
    peak = _vm("VmHWM")
    stored = 8 * n_train**2 * 4 / 2**20
    per_batch = 8 * (8 * batch_size * n_train) / 2**20
    print(f"N = {n_train}, {n_test} test points, batch_size {batch_size}, KLTGP, max_iter {max_iter}: {dt:.0f} s, "
          f"mean evaluations {p.n_eval.mean():.1f}")
    print(f"RSS before predict {rss0:.0f} MiB (model: 4 N×N arrays = {stored:.0f} MiB, test inputs "
          f"{Xt.nbytes / 2**20:.0f} MiB); peak during predict {peak:.0f} MiB = +{peak - rss0:.0f} MiB; formula "
          f"8 × batch_size × N doubles = {per_batch:.0f} MiB per batch + outputs {8 * n_test * 9 / 2**20:.0f} MiB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=5000)
    ap.add_argument("--n-test", type=int, default=1000)
    ap.add_argument("--ks", type=int, nargs="+", default=[200, 800])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--memory", type=int, default=0, help="test points of the memory run (0: skip)")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--max-iter", type=int, default=2)
    args = ap.parse_args()
    if args.memory:
        memory(args.n_train, args.memory, args.batch_size, args.max_iter)
    else:
        throughput(args.n_train, args.n_test, args.ks, args.threads)


if __name__ == "__main__":
    main()
