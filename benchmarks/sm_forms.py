"""[SM] App. 3: Lemma 3.1 form vs the Nielsen–Nock form of the SM divergence.

The paper claims the Lemma 3.1 form costs N^3 flops against 5N^3/3 for the
inverse-based form (1.67x), and 4N^3/3 against 2N^3 (1.5x) when the means
differ.  Two measurements, both single-threaded so the ratio reflects flops:

* ``fastsm``: the public ``fastsm.divergences.sm`` with ``form="cholesky"``
  and ``form="nielsen"`` (Numba kernels; our own status-returning Cholesky);
* ``LAPACK``: the flop-optimal sequences the paper counts — Lemma 3.1: three
  ``dpotrf``; Nielsen: ``dpotrf`` + ``dpotri`` for each covariance, then
  ``dpotrf`` of ``M = a S_p^-1 + (1-a) S_q^-1`` (plus ``dpotrs`` and GEMVs for
  the mean term).

Run: ``python benchmarks/sm_forms.py [--sizes 200 1000 2000]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.linalg import lapack

from fastsm import divergences
from fastsm._threads import thread_limits
from fastsm.cli.bench import best_of


def lapack_lemma(mp, Sp, mq, Sq, a):
    Lp, _ = lapack.dpotrf(Sp, lower=1)
    Lq, _ = lapack.dpotrf(Sq, lower=1)
    Ls, _ = lapack.dpotrf(a * Sq + (1 - a) * Sp, lower=1)
    ld = [2 * np.log(np.diag(L)).sum() for L in (Lp, Lq, Ls)]
    delta = mp - mq
    m2 = 0.0
    if np.any(delta):
        z, _ = lapack.dpotrs(Ls, delta, lower=1)
        m2 = delta @ z
    return 0.5 * ((1 - a) * ld[0] + a * ld[1] - ld[2]) - 0.5 * a * (1 - a) * m2


def lapack_nielsen(mp, Sp, mq, Sq, a):
    Lp, _ = lapack.dpotrf(Sp, lower=1)
    Lq, _ = lapack.dpotrf(Sq, lower=1)
    Pi, _ = lapack.dpotri(Lp, lower=1)
    Qi, _ = lapack.dpotri(Lq, lower=1)
    M = a * Pi + (1 - a) * Qi  # lower triangles are what dpotrf reads
    Lm, _ = lapack.dpotrf(M, lower=1)
    ld = [2 * np.log(np.diag(L)).sum() for L in (Lp, Lq, Lm)]
    delta = mp - mq
    m2 = 0.0
    if np.any(delta):
        Pi = np.tril(Pi) + np.tril(Pi, -1).T
        Qi = np.tril(Qi) + np.tril(Qi, -1).T
        w, _ = lapack.dpotrs(Lm, Pi @ delta, lower=1)
        m2 = delta @ (Qi @ w)
    return -0.5 * (a * ld[0] + (1 - a) * ld[1] + ld[2]) - 0.5 * a * (1 - a) * m2


def main(sizes=(200, 1000, 2000)):
    rng = np.random.default_rng(0)
    a = 0.5
    print("single thread; times in ms (best of 3); ratio = Nielsen / Lemma 3.1 (paper: 1.67 with equal means, "
          "1.50 otherwise)")
    print(f"{'N':>5} {'means':>6} | {'fastsm L3.1':>11} {'fastsm Niel':>11} {'ratio':>6} | "
          f"{'LAPACK L3.1':>11} {'LAPACK Niel':>11} {'ratio':>6} | {'agree':>8}")
    with thread_limits(1):
        for n in sizes:
            A, B = rng.normal(size=(2, n, n))
            Sp, Sq = A @ A.T / n + np.eye(n), B @ B.T / n + np.eye(n)
            for label, mq in (("equal", np.zeros(n)), ("diff", rng.normal(size=n) * 0.1)):
                mp = np.zeros(n)
                tl = best_of(lambda mp=mp, mq=mq, Sp=Sp, Sq=Sq: divergences.log_chernoff(mp, Sp, mq, Sq, a))
                tn = best_of(lambda mp=mp, mq=mq, Sp=Sp, Sq=Sq: divergences.log_chernoff(
                    mp, Sp, mq, Sq, a, form="nielsen"))
                ll = best_of(lambda mp=mp, mq=mq, Sp=Sp, Sq=Sq: lapack_lemma(mp, Sp, mq, Sq, a))
                ln = best_of(lambda mp=mp, mq=mq, Sp=Sp, Sq=Sq: lapack_nielsen(mp, Sp, mq, Sq, a))
                vals = [divergences.log_chernoff(mp, Sp, mq, Sq, a),
                        divergences.log_chernoff(mp, Sp, mq, Sq, a, form="nielsen"),
                        lapack_lemma(mp, Sp, mq, Sq, a), lapack_nielsen(mp, Sp, mq, Sq, a)]
                agree = max(vals) - min(vals)
                print(f"{n:5d} {label:>6} | {tl * 1e3:11.1f} {tn * 1e3:11.1f} {tn / tl:6.2f} | "
                      f"{ll * 1e3:11.1f} {ln * 1e3:11.1f} {ln / ll:6.2f} | {agree:8.1e}", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 1000, 2000])
    main(p.parse_args().sizes)
