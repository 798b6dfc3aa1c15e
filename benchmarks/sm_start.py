"""SMTGP's start (#31): a KLTGP run stopped after ``config.SM_START_ITER`` iterations against a converged one.

``python benchmarks/sm_start.py`` prints, for ``bench.make_problem(1000, dy, n_test=200)`` (dy = 1,
2, 16, 60) and Toy 1 / Toy 2 (``TOY1_PARAMS``): evaluations per point of the start and of SMTGP, SMTGP's
converged share, and the share of points within 1e-8 |f*| of the best known minimum (the lower of two
tight runs, ``tol=1e-13, max_iter=2000``, one from each start).

``python benchmarks/sm_start.py --time`` times what a user waits for, ``tgp.predict(model, X,
method="sm")`` with its default start (dy = 16; N / B = 1000 / 200 … 2000 / 1000; best of three calls,
JIT excluded) and prints one JSON line: run it alternately in checkouts of two commits (``PYTHONPATH``)
for an A/B (docs/performance.md, "SMTGP's start").
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fastsm import config, datasets, tgp
from fastsm.cli.bench import make_problem


def compare(model, X, label: str) -> None:
    kl_full = tgp.predict(model, X, method="kl")
    kl_loose = tgp.predict(model, X, method="kl", max_iter=config.SM_START_ITER)
    old = tgp.predict(model, X, method="sm", init=kl_full.y)
    new = tgp.predict(model, X, method="sm")
    tight = [tgp.predict(model, X, method="sm", init=s, tol=1e-13, max_iter=2000) for s in (kl_full.y, kl_loose.y)]
    fbest = np.minimum(tight[0].objective, tight[1].objective)

    def within(p):
        return np.mean(p.objective - fbest <= 1e-8 * np.abs(fbest))

    for name, kl, sm in (("converged KLTGP", kl_full, old), (f"KLTGP, {config.SM_START_ITER} it.", kl_loose, new)):
        print(f"{label:14} {name:16} {kl.n_eval.mean():5.1f} + {sm.n_eval.mean():5.1f} = "
              f"{kl.n_eval.mean() + sm.n_eval.mean():5.1f}   {sm.converged.mean():6.1%}   {within(sm):6.1%}")
    higher = int(np.sum(new.objective > old.objective + 1e-8 * np.abs(old.objective)))
    lower = int(np.sum(old.objective > new.objective + 1e-8 * np.abs(new.objective)))
    print(f"{'':14} the {config.SM_START_ITER}-iteration start ends higher on {higher}, lower on {lower} of {len(X)}")


def quality() -> None:
    print(f"{'problem':14} {'start':16} start + SMTGP ev/pt   conv.   within 1e-8")
    for dy in (1, 2, 16, 60):
        model, X, _ = make_problem(1000, dy, n_test=200)
        compare(model, X, f"bench dy={dy}")
    for name, toy in (("Toy 1", datasets.toy1), ("Toy 2", datasets.toy2)):
        Xtr, Xte, Ytr, _ = toy(0)
        compare(tgp.fit(Xtr, Ytr, tgp.TOY1_PARAMS), Xte, name)


def timing() -> None:
    out = {}
    for n, b in ((1000, 200), (1000, 1000), (2000, 200), (2000, 1000)):
        model, X, _ = make_problem(n, n_test=b)
        tgp.predict(model, X[:4], method="sm")  # JIT / cache load, not timed
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            p = tgp.predict(model, X, method="sm")
            best = min(best, time.perf_counter() - t0)
        out[f"{n}/{b}"] = (best, float(p.n_eval.mean()), float(p.converged.mean()))
    print(json.dumps(out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", action="store_true", help="time the user's call (one JSON line)")
    timing() if ap.parse_args().time else quality()
