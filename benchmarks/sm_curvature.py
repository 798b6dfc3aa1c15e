"""SMTGP with exact curvature (#31): BFGS seeded by the exact Hessian against BFGS alone.

``python benchmarks/sm_curvature.py`` prints, for ``bench.make_problem(1000, dy, n_test=200)``
(dy = 1, 2, 4, 16, 32, 60) and Toy 1 / Toy 2 (``TOY1_PARAMS``), with the default start (five KLTGP
iterations): SMTGP's evaluations per point (an exact Hessian counts as the dy/2 evaluations its
products cost), the converged share, the share of points within 1e-8 |f*| of the best known minimum
(the lowest of two tight runs, ``tol=1e-13, max_iter=2000``, one from each variant's result, and the
variants themselves), and the whole ``tgp.predict(model, X, method="sm")`` time (median of five
calls per variant, the variants alternating, JIT excluded).  ``config.SM_HESSIAN_MAX_DY`` is set to 0
for "BFGS alone" and to 10**6 for "seeded"; the default (32) picks the seeded variant up to dy = 32.
"""

from __future__ import annotations

import time

import numpy as np

from fastsm import config, datasets, tgp
from fastsm.cli.bench import make_problem

VARIANTS = {"BFGS alone": 0, "seeded": 10**6}


def compare(model, X, label: str) -> None:
    tgp.predict(model, X[:4], method="sm")  # JIT / cache load, not timed
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    preds = {}
    for _ in range(5):
        for name, limit in VARIANTS.items():
            config.SM_HESSIAN_MAX_DY = limit
            t0 = time.perf_counter()
            preds[name] = tgp.predict(model, X, method="sm")
            times[name].append(time.perf_counter() - t0)
    config.SM_HESSIAN_MAX_DY = VARIANTS["seeded"]
    tight = [tgp.predict(model, X, method="sm", init=p.y, tol=1e-13, max_iter=2000) for p in preds.values()]
    fbest = np.minimum.reduce([t.criterion for t in tight] + [p.criterion for p in preds.values()])
    for name, p in preds.items():
        within = np.mean(p.criterion - fbest <= 1e-8 * np.abs(fbest))
        print(f"{label:13} {name:11} {p.n_eval.mean():6.1f} {p.n_iter.mean():6.1f} {p.converged.mean():7.1%} "
              f"{within:8.1%} {np.median(times[name]):8.3f}")


def main() -> None:
    print(f"{'problem':13} {'variant':11} {'ev/pt':>6} {'it/pt':>6} {'conv.':>7} {'within':>8} {'time s':>8}")
    for dy in (1, 2, 4, 16, 32, 60):
        model, X, _ = make_problem(1000, dy, n_test=200)
        compare(model, X, f"bench dy={dy}")
    for name, toy in (("Toy 1", datasets.toy1), ("Toy 2", datasets.toy2)):
        Xtr, Xte, Ytr, _ = toy(0)
        compare(tgp.fit(Xtr, Ytr, tgp.TOY1_PARAMS), Xte, name)
    config.SM_HESSIAN_MAX_DY = 32


if __name__ == "__main__":
    main()
