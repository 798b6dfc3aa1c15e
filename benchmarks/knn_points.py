"""Per-point KNN models (``share="none"``) at large N: milliseconds a point, and the KD-tree queries
in random and in tree order (:func:`fastsm.tgp.neighbours.tree_order`).

#32's data set (a smooth 4-D manifold seen through ``dx = 12`` inputs and ``dy = 10`` outputs),
SMTGP, ``K = 200``, the widths of ``tests``' manifold runs.  JIT compilation is excluded (a small
model is predicted first).  Prints the prediction's time per point, evaluations per point and
MAE, then the queries' times per point (best of three)::

    python benchmarks/knn_points.py --n-train 1000000 --n-test 10000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastsm import datasets, tgp
from fastsm.tgp import neighbours
from fastsm.tgp.regions import nearest

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-train", type=int, default=100_000)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args(argv)
    X, Xt, Y, Yt = datasets.smooth_manifold(0, n_train=a.n_train, n_test=a.n_test, dx=12, dy=10, latent=4)
    warm = tgp.fit_local(X[:300], Y[:300], PARAMS, n_neighbors=50, share="none")
    tgp.predict(warm, Xt[:4], method="sm", threads=a.threads)
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=a.k, share="none")
    t0 = time.perf_counter()
    p = tgp.predict(model, Xt, method="sm", threads=a.threads)
    dt = time.perf_counter() - t0
    print(f"N = {a.n_train}, {a.n_test} test points, K = {a.k}: {dt / a.n_test * 1e3:.3f} ms a point, "
          f"{p.n_eval.mean():.2f} evaluations a point, MAE {np.abs(p.y - Yt).mean():.8f}")
    workers = a.threads or -1
    best = {"random": np.inf, "tree order": np.inf, "1-NN (the order)": np.inf}
    for _ in range(3):
        t0 = time.perf_counter()
        order = neighbours.tree_order(model, Xt, workers)
        best["1-NN (the order)"] = min(best["1-NN (the order)"], time.perf_counter() - t0)
        for name, Q in (("random", Xt), ("tree order", Xt[order])):
            t0 = time.perf_counter()
            nearest(model.tree, Q, model.X, a.k, workers)
            best[name] = min(best[name], time.perf_counter() - t0)
    print("queries of K neighbours, ms a point: " + ", ".join(f"{k} {v / a.n_test * 1e3:.3f}" for k, v in best.items()))


if __name__ == "__main__":
    main()
