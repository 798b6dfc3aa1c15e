"""Triangular products by fastsm's row loops against OpenBLAS's DTRMM/DTRSM (#55).

For each order ``n`` and number of rows ``m``, one forward (``x -> M x``) and one backward
(``x -> M^T x``) product of ``m`` rows with a lower-triangular ``n × n`` factor, by the row loops
of :mod:`fastsm._kernels.tri_rows` as the objective's kernel runs them
(:func:`fastsm._kernels.tri_rows.run_products`, one thread, factor in symmetric storage) and by
DTRMM calls of at most 256 rows (SciPy's BLAS, one thread; the rows in place, as fastsm's DTRMM
tiles ran before #55).  With ``--solve`` the factor is a Cholesky factor ``L`` and the products are
the substitutions ``L^-1 x`` and ``L^-T x`` (DTRSM).  Best of ``--repeat`` calls, JIT excluded.

Run: ``python benchmarks/tri_rows.py [--sizes 50 200 1000 2000] [--rows 1 2 16 64 256] [--solve]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.linalg import blas

from fastsm._kernels.tri_rows import MULTIPLY_PLAN, SOLVE_PLAN, run_products, symmetric_storage
from fastsm._threads import thread_limits

TILE = 256


def best_of(fn, repeat: int) -> float:
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def blas_rows(X: np.ndarray, M: np.ndarray, forward: bool, solve: bool) -> None:
    """Each row of the C-ordered ``X`` times ``M`` (or solved), in place, by calls of at most
    :data:`TILE` rows: in column-major terms the rows are the columns of ``B`` and ``M`` is the
    upper-triangular ``M^T``."""
    call = blas.dtrsm if solve else blas.dtrmm
    for r in range(0, X.shape[0], TILE):
        B = X[r:r + TILE].T  # Fortran-ordered view
        call(1.0, M.T, B, lower=0, trans_a=1 if forward else 0, overwrite_b=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000, 2000])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 16, 64, 256])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--solve", action="store_true", help="substitutions with a Cholesky factor")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'n':>5} {'rows':>5} {'direction':>9} {'row loops [us]':>15} {'BLAS [us]':>11} {'BLAS / rows':>12}")
    with thread_limits(1):
        for n in args.sizes:
            if args.solve:
                A = rng.standard_normal((n, n))
                M = np.linalg.cholesky(A @ A.T / n + np.eye(n))
            else:
                M = np.tril(rng.standard_normal((n, n)))
            S = symmetric_storage(M)
            plan = SOLVE_PLAN if args.solve else MULTIPLY_PLAN
            for m in args.rows:
                repeat = max(5, args.repeat * 200 // max(n, 200) // max(1, m // 8))
                for fwd, name in ((1, "forward"), (0, "backward")):
                    ops = np.array([[0, 0, fwd, 1]], dtype=np.int64)
                    work = np.zeros((2, m, n))
                    work[0] = rng.standard_normal((m, n))
                    X = work[0].copy()

                    def rows(work=work, ops=ops, m=m, S=S, plan=plan):
                        run_products(work, S, S, ops, m, plan)

                    def tiles(X=X, fwd=fwd, M=M):
                        blas_rows(X, M, fwd == 1, args.solve)

                    rows()
                    tiles()
                    t_rows, t_blas = best_of(rows, repeat), best_of(tiles, repeat)
                    print(f"{n:5d} {m:5d} {name:>9} {t_rows * 1e6:15.1f} {t_blas * 1e6:11.1f} "
                          f"{t_blas / t_rows:12.2f}", flush=True)


if __name__ == "__main__":
    main()
