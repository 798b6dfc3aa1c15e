"""Fit, whole-prediction and leave-one-out times of the current checkout, as JSON (an A/B of two
commits runs it in each checkout, alternately; #55 compared the factor forms so)::

    python benchmarks/fit_predict_times.py

random_structured data (dx = 4), lambda = 1e-3, alpha = 0.9, beta = 1.5; the minimum of three runs
after a warm-up call (JIT compilation is never timed).
"""

from __future__ import annotations

import json
import time

import numpy as np

from fastsm import datasets, tgp


def best(f, runs: int = 3) -> float:
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main() -> None:
    out = {}
    p = tgp.TGPParams(gamma_x="scale", gamma_y="scale", lambda_x=1e-3, lambda_y=1e-3, alpha=0.9, beta=1.5)
    for N, B, dy, methods in ((1000, 1000, 2, ("kl", "sm", "ikl")), (1000, 200, 16, ("sm",)), (2000, 1000, 2, ("sm",))):
        X, Xt, Y, _ = datasets.random_structured(0, n_train=N, n_test=B, dx=4, dy=dy)
        tgp.fit(X[:50], Y[:50], p)
        out[f"fit N={N} dy={dy}"] = best(lambda: tgp.fit(X, Y, p))  # noqa: B023
        m = tgp.fit(X, Y, p)
        for meth in methods:
            tgp.predict(m, Xt[:8], method=meth)
            out[f"predict {meth} N={N} B={B} dy={dy}"] = best(lambda: tgp.predict(m, Xt, method=meth))  # noqa: B023
    X, _, Y, _ = datasets.random_structured(0, n_train=600, n_test=10, dx=4, dy=2)
    m = tgp.fit(X, Y, p)
    tgp.loo_predict(m, method="sm", rows=np.arange(5))
    out["loo_predict sm N=600"] = best(lambda: tgp.loo_predict(m, method="sm"))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
