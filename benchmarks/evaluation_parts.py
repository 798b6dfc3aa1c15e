"""Where a batched SMTGP evaluation's time goes, part by part, against the same run's DGEMM (#31 item 2).

One evaluation of ``B`` points of ``bench.make_problem(N)`` (dy = 16) by
:func:`fastsm._kernels.objectives.evaluate_rows` in one thread (a prediction's threads each evaluate
their own points, :func:`fastsm._threads.run_chunks`), then each of its parts alone on the same data
and thread: the kernel rows, the two forward triangular products (``W_Y k``, ``W_XY k``), the
per-row work between them, the two backward products and the O(N dy) value and gradient.  Each
part's share is of the ideal time, ``4 N^2 B`` flops at the same run's one-thread DGEMM rate
(:func:`fastsm.cli.bench.dgemm_gflops`); the products' own rate is quoted as GFLOP/s of their
``2 N^2 B`` flops.  A single-thread DTRMM against DGEMM on up to 256 rows shows what the BLAS
reaches on a triangular product.  Best of repeats and the median of 30 calls,
JIT excluded.  Everything runs inside :func:`fastsm._threads.thread_limits`, as a prediction does:
BLAS at one thread.

Run: ``python benchmarks/evaluation_parts.py --sizes 1000 2000 --batches 200 1000``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit
from scipy.linalg import blas
from threadpoolctl import threadpool_limits

from fastsm._kernels import objectives as O
from fastsm._kernels.objectives import Evaluations, Points, Products, ops2, workspace
from fastsm._kernels.rbf import kernel_row
from fastsm._kernels.tri_rows import run_products
from fastsm._threads import thread_limits
from fastsm.cli.bench import best_of, dgemm_gflops, make_problem
from fastsm.tgp import prediction as api
from fastsm.tgp import views


@njit
def _kernel_rows(obj, Yt, work, m):
    Zt = np.ascontiguousarray(obj.Z.T)
    for r in range(m):
        kernel_row(Yt[r], Zt, obj.gamma, work[O.K_ROW, r], work[O.R1_ROW, r], work[O.R2_ROW, r])


@njit
def _middle_rows(obj, pts, idx, work, out, m):
    for r in range(m):
        O._middle(obj, pts, r, idx, work, out)


@njit
def _value_rows(obj, pts, idx, Yt, work, out, m):
    for r in range(m):
        O._row_value_grad(obj, pts, r, idx, Yt, work, out)


def median_of(fn, calls: int = 30) -> float:
    """Median wall time of ``calls`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def parts(n: int, b: int) -> dict:
    model, X, Y = make_problem(n, dy=16, n_test=b)
    with thread_limits(None):
        r = _parts(model, X, Y, n, b)
    r["dgemm"] = dgemm_gflops(n, b, 1)
    return r


def _parts(model, X, Y, n: int, b: int) -> dict:
    F, eta_x, _, _ = api.prepare_points(model, X, "sm")
    obj = views.objective_view(model, "sm", 1.0)
    plan = views.products_plan(model)
    work = workspace(b, n)
    pts, idx, Yt = Points(F, eta_x, np.full(b, -1)), np.arange(b), np.ascontiguousarray(Y)
    out = Evaluations(np.empty(b), np.empty(Y.shape), np.empty(b), np.empty(b), np.zeros(b, dtype=np.int64))
    prod = Products(work, plan)
    fwd = ops2(O.K_ROW, 0, 1, O.Z1_ROW, O.K_ROW, 1, 1, O.Z2_ROW)
    bwd = ops2(O.Z1_ROW, 0, 0, O.R1_ROW, O.Z2_ROW, 1, 0, O.R2_ROW)
    calls = {"whole evaluation": lambda: O.evaluate_batch(obj, pts, idx, Yt, out, prod, None),
             "kernel rows": lambda: _kernel_rows(obj, Yt, work, b),
             "forward products": lambda: run_products(work, obj.W1, obj.W2, fwd, b, plan),
             "per-row work": lambda: _middle_rows(obj, pts, idx, work, out, b),
             "backward products": lambda: run_products(work, obj.W1, obj.W2, bwd, b, plan),
             "value and gradient": lambda: _value_rows(obj, pts, idx, Yt, work, out, b)}
    t = {name: best_of(fn, 5, 1.0) for name, fn in calls.items()}
    med = {name: median_of(fn) for name, fn in calls.items()}
    return {"t": t, "median": med, "tile": int(min(256, b))}


def trmm_ceiling(n: int, h: int) -> tuple[float, float]:
    """Single-thread GFLOP/s of a DTRMM (``h × n`` rows times a lower-triangular ``n × n``, n^2 h
    flops) and of a DGEMM with the full ``n × n`` matrix (2 n^2 h flops)."""
    rng = np.random.default_rng(0)
    W = np.asfortranarray(np.tril(rng.standard_normal((n, n))))
    X = np.asfortranarray(rng.standard_normal((h, n)))
    with threadpool_limits(1, user_api="blas"):
        t_trmm = best_of(lambda: blas.dtrmm(1.0, W, X, side=1, lower=1, trans_a=1), 5, 1.0)
        t_gemm = best_of(lambda: blas.dgemm(1.0, X, W, trans_b=1), 5, 1.0)
    return n * n * h / t_trmm / 1e9, 2.0 * n * n * h / t_gemm / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--batches", type=int, nargs="+", default=[200, 1000])
    args = ap.parse_args()
    print("one thread; shares of the ideal time 4 N^2 B / DGEMM rate; best of repeats "
          "(median of 30 calls in brackets)")
    for n in args.sizes:
        for b in args.batches:
            r = parts(n, b)
            ideal = 4.0 * n * n * b / r["dgemm"] / 1e9
            print(f"N = {n}, B = {b}: DGEMM {r['dgemm']:.1f} GFLOP/s, ideal {ideal * 1e3:.2f} ms")
            for name, sec in r["t"].items():
                rate = ""
                if "products" in name:
                    g = 2.0 * n * n * b / sec / 1e9
                    rate = f"  {g:6.1f} GFLOP/s ({g / r['dgemm']:.0%} of DGEMM)"
                elif name == "whole evaluation":
                    rate = f"  {4.0 * n * n * b / sec / 1e9:6.1f} GFLOP/s ({ideal / sec:.0%} of DGEMM)"
                print(f"  {name:20s} {sec * 1e3:8.3f} ms ({r['median'][name] * 1e3:8.3f}) {sec / ideal:6.1%}{rate}")
            trmm, gemm = trmm_ceiling(n, r["tile"])
            print(f"  one thread, {r['tile']}-row tile: DTRMM {trmm:.1f} GFLOP/s, DGEMM {gemm:.1f} GFLOP/s "
                  f"(DTRMM {trmm / gemm:.0%} of DGEMM)")


if __name__ == "__main__":
    main()
