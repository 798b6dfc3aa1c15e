"""Dask scaling: fastsm.dask.predict on LocalCluster with 1 and 2 worker processes vs in-process.

Run: ``python benchmarks/dask_scaling.py [--n-train 2000] [--n-test 2000]``.  SMTGP, dx = 5, dy = 4.
Each worker has one task slot; ``threads`` is the Numba threads per task.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from distributed import Client, LocalCluster

from fastsm import dask as fdask
from fastsm import datasets, tgp

PARAMS = tgp.TGPParams(gamma_x=0.1, gamma_y=0.1, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=2000)
    ap.add_argument("--n-test", type=int, default=2000)
    args = ap.parse_args()
    X, Xt, Y, _ = datasets.random_structured(0, n_train=args.n_train, n_test=args.n_test, dx=5, dy=4)
    model = tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))
    tgp.predict(model, Xt[:8])
    cores = os.cpu_count()
    t0 = time.perf_counter()
    ref = tgp.predict(model, Xt)
    t_ref = time.perf_counter() - t0
    print(f"N = {args.n_train}, {args.n_test} test points, {cores} cores")
    print(f"{'run':34} {'time [s]':>9} {'points/s':>9} {'max |y - y_in-process|':>23}")
    print(f"{'in-process, all threads':34} {t_ref:9.2f} {args.n_test / t_ref:9.1f} {0.0:23.1e}")
    for workers, threads in ((1, cores), (2, max(1, cores // 2))):
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
                Client(c) as client:
            fdask.predict(model, Xt[:8], client=client, threads=threads)  # workers load the kernels
            t0 = time.perf_counter()
            got = fdask.predict(model, Xt, client=client, threads=threads)
            dt = time.perf_counter() - t0
        name = f"dask, {workers} worker(s) × {threads} thread(s)"
        print(f"{name:34} {dt:9.2f} {args.n_test / dt:9.1f} {np.abs(got.y - ref.y).max():23.1e}", flush=True)


if __name__ == "__main__":
    main()
