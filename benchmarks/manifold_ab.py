"""Whole SMTGP predictions of two source trees, A/B in alternating processes, under OpenBLAS kernel families.

The cases (``datasets.smooth_manifold(7, dx=10, latent=3)``, median-distance widths, lambda = 1e-3,
alpha = 0.6, beta = 1.5, the default options): N = 1000 with B = 200 test points at dy = 16 and 60,
N = 1500 with B = 250 at dy = 2.  One process times each case as the best of 3 ``predict`` calls
(JIT excluded).  ``--pairs`` processes a side, old then new, per kernel family; each tree gets its
own Numba cache.  Prints each side's median seconds, their ratio (old / new: above 1, new is
faster), the pairs' own ratios, evaluations a point and the converged share::

    git worktree add ../old 977cd67
    python benchmarks/manifold_ab.py --old ../old --new . --pairs 3
    python benchmarks/manifold_ab.py --one n1000_dy16      # one process, one JSON line (what a pair runs)

``--new-tol T`` predicts the new side with ``tol=T`` (the old side keeps its defaults): an A/B at the
old code's accuracy rather than at each code's default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {"n1000_dy16": (1000, 16, 200), "n1000_dy60": (1000, 60, 200), "n1500_dy2": (1500, 2, 250)}


def one(names: list[str], tol: float | None = None) -> dict:
    import numpy as np

    from fastsm import datasets, tgp

    res = {}
    for name in names:
        n, dy, b = CASES[name]
        Xtr, Xte, Ytr, _ = datasets.smooth_manifold(7, n_train=n, n_test=b, dx=10, dy=dy, latent=3)
        params = tgp.TGPParams(gamma_x=1.0 / tgp.median_sq_distance(Xtr), gamma_y=1.0 / tgp.median_sq_distance(Ytr),
                               lambda_x=1e-3, lambda_y=1e-3, alpha=0.6, beta=1.5)
        model = tgp.fit(Xtr, Ytr, params, methods=("sm",))
        kw = {} if tol is None else {"tol": tol}
        tgp.predict(model, Xte[:4], method="sm", **kw)
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            p = tgp.predict(model, Xte, method="sm", **kw)
            best = min(best, time.perf_counter() - t0)
        res[name] = {"t": best, "ev": float(p.n_eval.mean()), "cv": float(p.converged.mean())}
    return res


def side(tree: str, cache: str, family: str, names: list[str], tol: float | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), NUMBA_CACHE_DIR=cache, OPENBLAS_CORETYPE=family)
    extra = [] if tol is None else ["--tol", repr(tol)]
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", *names, *extra], env=env, check=True,
                         capture_output=True, text=True, cwd=tempfile.gettempdir()).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", nargs="+", choices=list(CASES), help="time these cases in this process")
    ap.add_argument("--old", help="source tree A (its fastsm/ is imported)")
    ap.add_argument("--new", help="source tree B")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--families", nargs="+", default=["Haswell", "SkylakeX"])
    ap.add_argument("--tol", type=float, help="with --one: predict with this tol")
    ap.add_argument("--new-tol", type=float, help="predict the new side with this tol")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.tol)))
        return
    if not (args.old and args.new):
        ap.error("--old and --new are required (or --one)")
    with tempfile.TemporaryDirectory() as tmp:
        caches = {"old": os.path.join(tmp, "old"), "new": os.path.join(tmp, "new")}
        tols = {"old": None, "new": args.new_tol}
        for who, tree in (("old", args.old), ("new", args.new)):  # compile once, untimed
            side(tree, caches[who], args.families[0], args.cases, tols[who])
        runs: dict = {(f, w): [] for f in args.families for w in ("old", "new")}
        for _ in range(args.pairs):
            for fam in args.families:
                for who, tree in (("old", args.old), ("new", args.new)):
                    runs[(fam, who)].append(side(tree, caches[who], fam, args.cases, tols[who]))
    for fam in args.families:
        for case in args.cases:
            o = [r[case] for r in runs[(fam, "old")]]
            n = [r[case] for r in runs[(fam, "new")]]
            to, tn = statistics.median(x["t"] for x in o), statistics.median(x["t"] for x in n)
            pairs = " ".join(f"{a['t'] / b['t']:.2f}" for a, b in zip(o, n, strict=True))
            print(f"{fam:9s} {case:11s} old {to:.3f} s  new {tn:.3f} s  ratio {to / tn:.2f}  (pairs {pairs})  "
                  f"evaluations {o[0]['ev']:.1f} -> {n[0]['ev']:.1f}  converged {o[0]['cv']:.1%} -> {n[0]['cv']:.1%}")


if __name__ == "__main__":
    main()
