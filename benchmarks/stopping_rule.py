"""Evaluations per point with and without the objective stop (``ftol``), and what each returns.

``bench.make_problem(N)`` (dx = 8, dy = 16), SMTGP from the KLTGP start,
``max_iter`` 50 ([SM] §5.2).  "step rule only" is ``ftol = 0`` (the rule
before the objective stop); quality is the share of points within
``1e-8 |f*|`` and ``1e-10 |f*|`` of ``f*`` from a tight run::

    python benchmarks/stopping_rule.py --n 1000 --b 200
"""

import argparse

import numpy as np

from fastsm import tgp
from fastsm.cli import bench

EDGES = [0, 10, 15, 20, 25, 30, 40, 50, 10**9]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--b", type=int, default=200)
    args = ap.parse_args()
    model, X, _ = bench.make_problem(args.n, n_test=args.b)
    Y0 = tgp.predict(model, X, method="kl").y
    runs = {"step rule only (ftol=0)": tgp.predict(model, X, init=Y0, method="sm", ftol=0.0),
            "default (ftol=1e-12)": tgp.predict(model, X, init=Y0, method="sm")}
    f_star = tgp.predict(model, X, init=Y0, method="sm", max_iter=2000, tol=1e-13, ftol=0.0).criterion
    labels = [f"{lo + 1}-{hi}" if hi < 10**9 else f">{lo}" for lo, hi in zip(EDGES[:-1], EDGES[1:], strict=True)]
    print(f"N = {args.n}, B = {args.b}: points by evaluations used")
    print(f"{'':26}" + "".join(f"{s:>7}" for s in labels) + f"{'ev/pt':>7}{'conv.':>7}{'1e-8':>7}{'1e-10':>7}")
    for name, p in runs.items():
        counts = np.histogram(p.n_eval, bins=np.array(EDGES) + 0.5)[0]
        gap = (p.criterion - f_star) / np.abs(f_star)
        print(f"{name:26}" + "".join(f"{c:7d}" for c in counts) + f"{p.n_eval.mean():7.1f}"
              f"{p.converged.mean():7.1%}{np.mean(gap <= 1e-8):7.1%}{np.mean(gap <= 1e-10):7.1%}")
    a, b = runs.values()
    worse = b.criterion > a.criterion + 1e-10 * np.abs(a.criterion)
    print(f"default worse than the step rule by > 1e-10 relative on {worse.sum()} of {len(worse)} points")


if __name__ == "__main__":
    main()
