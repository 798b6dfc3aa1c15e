"""Triangular products by row loops against DTRMM tiles (``config.ROW_PRODUCTS_MAX_N``).

For each order ``n`` and number of rows ``m``, one forward (``x -> W x``) and one backward
(``x -> W^T x``) product of ``m`` rows with a lower-triangular ``n × n`` factor, as the
objective's kernel runs them (:func:`fastsm._kernels.gemm.tri_products`, one thread): by the row
loops of :mod:`fastsm._kernels.tri_rows` (factor in symmetric storage) and by DTRMM tiles of the
checked menu.  With ``--solve`` the factor is a Cholesky factor ``L`` and the products are the
substitutions ``L^-1 x`` and ``L^-T x`` (DTRSM tiles).  Best of ``--repeat`` calls, JIT excluded.

Run: ``python benchmarks/tri_rows.py [--sizes 100 200 400 800 1000] [--rows 1 2 16 200] [--solve]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastsm._kernels.gemm import TilePlan, padded_rows, tri_products
from fastsm._kernels.tri_rows import symmetric_storage
from fastsm._products import ROW_PLAN, ROW_SOLVE_PLAN, Probe, choose
from fastsm._threads import thread_limits


def best_of(fn, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400, 800, 1000])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 16, 200])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--solve", action="store_true", help="substitutions with a Cholesky factor")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'n':>5} {'rows':>5} {'direction':>9} {'row loops [us]':>15} {'BLAS tiles [us]':>17} {'ratio':>6}")
    with thread_limits(1):
        for n in args.sizes:
            if args.solve:
                A = rng.standard_normal((n, n))
                W = np.linalg.cholesky(A @ A.T / n + np.eye(n))
            else:
                W = np.tril(rng.standard_normal((n, n)))
            heights, unit = choose(Probe(n))
            solve = 3 if args.solve else 0
            plans = {"rows": (ROW_SOLVE_PLAN if args.solve else ROW_PLAN, symmetric_storage(W)),
                     "tiles": (TilePlan(np.array(heights, dtype=np.int64), unit, False, solve), W)}
            for m in args.rows:
                for fwd, name in ((1, "forward"), (0, "backward")):
                    ops = np.array([[0, 0, fwd, 1]], dtype=np.int64)
                    times = {}
                    for kind, (plan, M) in plans.items():
                        work = np.zeros((2, padded_rows(m, plan), n))
                        work[0, :m] = rng.standard_normal((m, n))
                        def call(work=work, M=M, plan=plan, ops=ops, m=m):
                            tri_products(work, M, M, ops, m, plan)

                        call()
                        times[kind] = best_of(call, max(5, args.repeat // max(1, m // 8)))
                    print(f"{n:5d} {m:5d} {name:>9} {times['rows'] * 1e6:15.1f} {times['tiles'] * 1e6:17.1f} "
                          f"{times['tiles'] / times['rows']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
