"""SMTGP's evaluations, converged share and minima per point on a panel of problems, and a comparison of
two such runs (two versions of fastsm: which one found the lower minimum where they differ).

Run it once per version (a worktree of the other commit on ``PYTHONPATH``, each with its own
``NUMBA_CACHE_DIR``), then compare::

    python benchmarks/sm_minima.py run new.npz
    PYTHONPATH=../old NUMBA_CACHE_DIR=/tmp/nc_old python benchmarks/sm_minima.py run old.npz
    python benchmarks/sm_minima.py compare old.npz new.npz

The panel: ``benchmarks/determinism.py``'s problem (dy = 4, 333 points), the tests' ``bench_like``
problems (dy = 4, 16, 32; 60 points), ``bench.make_problem(1000, dy, n_test=200)`` (dy = 2, 16, 32),
nine smooth-manifold problems (1000 training points, 200 test points, median-distance widths,
lambda = 1e-3, alpha = 0.6) and the digits reconstruction (dy = 16, 300 test points); SMTGP with the
default options.  ``compare`` counts, per problem, the points whose criterion is lower by more than
1e-8 relative in each run.
"""

from __future__ import annotations

import argparse

import numpy as np


def panel():
    """``(name, model, X)`` of every problem."""
    from fastsm import datasets, tgp
    from fastsm.cli.bench import make_problem

    X, Xt, Y, _ = datasets.random_structured(7, n_train=700, n_test=333, dx=6, dy=4)
    params = tgp.TGPParams(gamma_x=1.0 / 6, gamma_y=0.25, lambda_x=1e-3, lambda_y=1e-3, alpha=0.7, beta=1.5)
    yield "determinism dy=4", tgp.fit(X, Y, params), Xt
    for dy in (4, 16, 32):
        Xtr, Xte, Ytr, _ = datasets.random_structured(0, n_train=400, n_test=60, dx=8, dy=dy)
        params = tgp.TGPParams(gamma_x=1.0 / 8, gamma_y=1.0 / dy, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)
        yield f"bench_like dy={dy}", tgp.fit(Xtr, Ytr, params), Xte
    for dy in (2, 16, 32):
        model, X, _ = make_problem(1000, dy, n_test=200)
        yield f"bench dy={dy}", model, X
    for seed, latent, dy in ((7, 3, 16), (11, 5, 16), (13, 4, 32), (17, 3, 8), (1, 3, 16), (2, 3, 16), (3, 3, 16),
                             (4, 3, 16), (5, 3, 16)):
        Xtr, Xte, Ytr, _ = datasets.smooth_manifold(seed, n_train=1000, n_test=200, dx=10, dy=dy, latent=latent)
        yield f"manifold{seed} dy={dy}", median_model(Xtr, Ytr), Xte
    Xtr, Xte, Ytr, _ = datasets.digits_reconstruction(4)[:4]
    yield f"digits dy={Ytr.shape[1]}", median_model(Xtr, Ytr), Xte[:300]


def median_model(Xtr, Ytr):
    from fastsm import tgp

    params = tgp.TGPParams(gamma_x=1.0 / tgp.median_sq_distance(Xtr), gamma_y=1.0 / tgp.median_sq_distance(Ytr),
                           lambda_x=1e-3, lambda_y=1e-3, alpha=0.6, beta=1.5)
    return tgp.fit(Xtr, Ytr, params, methods=("sm",))


def run(out: str) -> None:
    from fastsm import tgp

    saved = {}
    print(f"{'problem':20} {'ev/pt':>6} {'conv.':>7}")
    for name, model, X in panel():
        p = tgp.predict(model, X, method="sm")
        saved[f"{name}|criterion"] = p.criterion
        saved[f"{name}|n_eval"] = p.n_eval
        saved[f"{name}|converged"] = p.converged
        print(f"{name:20} {p.n_eval.mean():6.2f} {p.converged.mean():7.1%}")
    np.savez(out, **saved)


def compare(a: str, b: str) -> None:
    A, B = np.load(a), np.load(b)
    names = [k.split("|")[0] for k in A.files if k.endswith("|criterion")]
    print(f"{'problem':20} {'ev/pt':>15} {'converged':>17} {'lower in A':>11} {'lower in B':>11} {'largest gap':>12}")
    for name in names:
        fa, fb = A[f"{name}|criterion"], B[f"{name}|criterion"]
        tol = 1e-8 * np.maximum(np.abs(fa), np.abs(fb))
        ev = f"{A[name + '|n_eval'].mean():6.2f} -> {B[name + '|n_eval'].mean():6.2f}"
        cv = f"{A[name + '|converged'].mean():6.1%} -> {B[name + '|converged'].mean():6.1%}"
        print(f"{name:20} {ev:>15} {cv:>17} {(fa < fb - tol).sum():11d} {(fb < fa - tol).sum():11d} "
              f"{np.abs(fa - fb).max():12.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run").add_argument("out")
    cmp = sub.add_parser("compare")
    cmp.add_argument("a")
    cmp.add_argument("b")
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.out)
    else:
        compare(args.a, args.b)


if __name__ == "__main__":
    main()
