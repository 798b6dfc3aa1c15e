"""Divergences between Gaussians, one pair per ``prange`` iteration (docs/math.md §4).

The Cholesky factorisation (:func:`fastsm._kernels.linalg.cholesky`) returns a status instead of
raising: an exception raised by ``np.linalg.cholesky`` inside ``prange`` is silently lost (checked
with Numba 0.68), so a non-SPD input would go unnoticed.  Status codes:
0 ok, 1 ``S_p`` not SPD, 2 ``S_q`` not SPD, 3 the mixed matrix not SPD.

With ``Delta = mu_p - mu_q`` and ``S = a S_q + (1-a) S_p``::

    log rho_a = 1/2 [(1-a) log|S_p| + a log|S_q| - log|S|] - a(1-a)/2 Delta^T S^-1 Delta

is ``log ∫ p^a q^(1-a)`` ([SM] Lemma 3.1 and Eq. 18 corrected).  The
Nielsen–Nock form ([SM] Eq. 3 with its missing inverse restored) computes
the same number through ``S_p^-1``, ``S_q^-1`` and
``M = a S_p^-1 + (1-a) S_q^-1``.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from fastsm._kernels.linalg import backward_solve, cholesky, forward_solve
from fastsm.config import kernel

FORM_CHOLESKY = 0
FORM_NIELSEN = 1


@kernel(internal=True)
def spd_inverse_from_cholesky(L):
    """``A^-1 = L^-T L^-1`` by triangular solves and one GEMM."""
    n = L.shape[0]
    Linv = np.zeros((n, n))
    e = np.zeros(n)
    x = np.empty(n)
    for c in range(n):
        e[c] = 1.0
        forward_solve(L, e, x)
        e[c] = 0.0
        for r in range(n):
            Linv[r, c] = x[r]
    return np.dot(Linv.T, Linv)


@kernel(internal=True)
def _factor_pair(Sp, Sq):
    """Cholesky factors and log-determinants of both covariances, with the status code."""
    d = Sp.shape[0]
    Lp = np.empty((d, d))
    Lq = np.empty((d, d))
    ok, ldp = cholesky(Sp, Lp)
    if not ok:
        return 1, Lp, 0.0, Lq, 0.0
    ok, ldq = cholesky(Sq, Lq)
    if not ok:
        return 2, Lp, ldp, Lq, 0.0
    return 0, Lp, ldp, Lq, ldq


@kernel(internal=True)
def log_rho_pair(mp, Sp, mq, Sq, a, form):
    """``(status, log rho_a)`` for one pair (see module docstring)."""
    d = mp.shape[0]
    status, Lp, ldp, Lq, ldq = _factor_pair(Sp, Sq)
    if status != 0:
        return status, np.nan
    delta = mp - mq
    z = np.empty(d)
    if form == FORM_CHOLESKY:
        S = a * Sq + (1.0 - a) * Sp
        Ls = np.empty((d, d))
        ok, lds = cholesky(S, Ls)
        if not ok:
            return 3, np.nan
        forward_solve(Ls, delta, z)
        m2 = 0.0
        for i in range(d):
            m2 += z[i] * z[i]
        return 0, 0.5 * ((1.0 - a) * ldp + a * ldq - lds) - 0.5 * a * (1.0 - a) * m2
    # Nielsen–Nock: inverses, then M = a Sp^-1 + (1-a) Sq^-1;
    # S^-1 = Sq^-1 M^-1 Sp^-1 for the mean term
    Pi = spd_inverse_from_cholesky(Lp)
    Qi = spd_inverse_from_cholesky(Lq)
    M = a * Pi + (1.0 - a) * Qi
    Lm = np.empty((d, d))
    ok, ldm = cholesky(M, Lm)
    if not ok:
        return 3, np.nan
    v = np.dot(Pi, delta)
    w = np.empty(d)
    forward_solve(Lm, v, z)
    backward_solve(Lm, z, w)
    m2 = np.dot(delta, np.dot(Qi, w))
    return 0, -0.5 * (a * ldp + (1.0 - a) * ldq + ldm) - 0.5 * a * (1.0 - a) * m2


@kernel(internal=True)
def kl_from_factors(mp, Lp, ldp, mq, Lq, ldq):
    """``KL(p || q)`` from Cholesky factors and log-determinants (docs/math.md §4).

    ``1/2 [||Lq^-1 Lp||_F^2 + ||Lq^-1 (mp - mq)||^2 - d + log|Sq| - log|Sp|]``
    """
    d = mp.shape[0]
    tr = 0.0
    b = np.empty(d)
    x = np.empty(d)
    for c in range(d):
        for r in range(d):
            b[r] = Lp[r, c]
        forward_solve(Lq, b, x)
        for r in range(c, d):  # x[r] = 0 above the diagonal of Lq^-1 Lp
            tr += x[r] * x[r]
    for r in range(d):
        b[r] = mp[r] - mq[r]
    forward_solve(Lq, b, x)
    m2 = 0.0
    for r in range(d):
        m2 += x[r] * x[r]
    return 0.5 * (tr + m2 - d + ldq - ldp)


@kernel(internal=True)
def kl_pair(mp, Sp, mq, Sq):
    """``(status, KL(p || q))`` from the covariances."""
    status, Lp, ldp, Lq, ldq = _factor_pair(Sp, Sq)
    if status != 0:
        return status, np.nan
    return 0, kl_from_factors(mp, Lp, ldp, mq, Lq, ldq)


@kernel(parallel=True)
def log_rho_batch(MP, SP, MQ, SQ, a, form, out, status):
    """``log rho_a`` for every pair of a stack."""
    for i in prange(MP.shape[0]):
        s, v = log_rho_pair(MP[i], SP[i], MQ[i], SQ[i], a, form)
        status[i] = s
        out[i] = v


@kernel(parallel=True)
def kl_batch(MP, SP, MQ, SQ, out, status):
    """``KL(p_i || q_i)`` for every pair of a stack."""
    for i in prange(MP.shape[0]):
        s, v = kl_pair(MP[i], SP[i], MQ[i], SQ[i])
        status[i] = s
        out[i] = v
