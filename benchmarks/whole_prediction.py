"""Whole SMTGP prediction time per point (for A/B comparisons between commits).

``bench.make_problem(N)`` (dx = 8, dy = 16, N test points), SMTGP from a
converged KLTGP start to ``tol = 1e-10``; best of 3, JIT excluded::

    python benchmarks/whole_prediction.py --n 250 1000
"""

import argparse
import time

from fastsm import tgp
from fastsm.cli import bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[250, 1000])
    for n in ap.parse_args().n:
        model, X, _ = bench.make_problem(n, n_test=n)
        Y0 = tgp.predict(model, X, method="kl", max_iter=500, tol=1e-10).y
        kw = dict(method="sm", max_iter=500, tol=1e-10)
        tgp.predict(model, X[:8], init=Y0[:8], **kw)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            p = tgp.predict(model, X, init=Y0, **kw)
            times.append(time.perf_counter() - t0)
        print(f"N = {n:5d}: {min(times) / n * 1e3:.3f} ms per point, {p.n_eval.mean():.1f} evaluations per point")


if __name__ == "__main__":
    main()
