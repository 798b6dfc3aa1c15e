"""The fully-corrective Newton polish of KLIEP (beyond [CS]; docs/math.md §5)."""

from __future__ import annotations

import numpy as np

from fastsm._kernels.kliep_problem import (
    STOP_GAP,
    STOP_INTERRUPTED,
    STOP_LINE_SEARCH,
    STOP_MAX_ITER,
    armijo_max,
    center_row,
    combine,
    fw_gap,
    gradient,
    log_sum,
)
from fastsm._kernels.linalg import cholesky, cholesky_solve
from fastsm.config import kernel


@kernel(internal=True)
def _support(mu, S):
    k = 0
    for l in range(mu.shape[0]):
        if mu[l] > 0.0:
            S[k] = l
            k += 1
    return k


#: Atoms with the largest positive gaps added to the support per polish round.
N_ADD = 8



@kernel(internal=True)
def _add_candidates(gt, mg, mu, S, k, n_add):
    """Add up to ``n_add`` atoms outside the support with the largest ``gt_l > mu^T gt``, best first."""
    best = np.full(n_add, -1, dtype=np.int64)
    m = 0
    for l in range(gt.shape[0]):
        if mu[l] != 0.0 or not gt[l] > mg:
            continue
        if m < n_add:
            m += 1
        elif gt[l] <= gt[best[m - 1]]:
            continue
        q = m - 1
        while q > 0 and gt[best[q - 1]] < gt[l]:
            best[q] = best[q - 1]
            q -= 1
        best[q] = l
    for q in range(m):
        S[k] = best[q]
        k += 1
    return k



@kernel(inline=True)
def _newton(p, mu, S, k, r, buf):
    """The Newton step on the support's face: ``(E, delta, dec, ok)``.

    ``E`` holds the support's columns of ``A / b`` (as rows), ``delta`` the step in ``mu[S]``
    (``sum delta = 0``, the constraint eliminated through its multiplier) and
    ``dec`` the predicted increase ``g . delta``; ``ok`` is False when the
    Hessian is not numerically positive definite.
    """
    n = r.shape[0]
    E = np.empty((k, n))
    if p.stored:  # the support's columns of A, gathered row by row (A is stored by test point)
        for j in range(n):
            row = p.A[j]
            for q in range(k):
                E[q, j] = row[S[q]]
    else:
        for q in range(k):
            E[q] = center_row(p, S[q], buf)
    Er = np.empty((k, n))
    g = np.zeros(k)
    for q in range(k):
        for j in range(n):
            Er[q, j] = E[q, j] * r[j]
            g[q] += Er[q, j]
    gm = 0.0  # centre g: the multiplier absorbs a constant, and g . delta loses no digits to it
    for q in range(k):
        gm += mu[S[q]] * g[q]
    for q in range(k):
        g[q] -= gm
    H = np.dot(Er, Er.T)
    dmax = 0.0
    for q in range(k):
        dmax = max(dmax, H[q, q])
    for q in range(k):
        H[q, q] += 1e-13 * dmax + 1e-300
    L = np.zeros((k, k))
    ok, _ = cholesky(H, L)
    if not ok:
        return E, g, 0.0, False
    x1 = cholesky_solve(L, g)
    x2 = cholesky_solve(L, np.ones(k))
    nu = np.sum(x1) / np.sum(x2)
    delta = x1 - nu * x2
    dec = 0.0
    for q in range(k):
        dec += g[q] * delta[q]
    return E, delta, dec, True


@kernel(inline=True)
def _noise(z):
    """The rounding level of ``F = sum log z`` (a Newton decrement below it is converged)."""
    noise = 0.0
    for j in range(z.shape[0]):
        noise += abs(np.log(z[j])) + 1.0
    return noise * 8.0 * 2.220446049250313e-16


@kernel(inline=True)
def _ratio_test(mu, S, k, delta):
    """The largest step before an atom of the face reaches zero, and that atom: ``(t_max, q_hit)``."""
    t_max = np.inf
    q_hit = -1
    for q in range(k):
        if delta[q] < 0.0:
            t = mu[S[q]] / -delta[q]
            if t < t_max:
                t_max = t
                q_hit = q
    return t_max, q_hit


@kernel(inline=True)
def _move(mu, S, k, delta, rho, t_max, q_hit):
    """``mu[S] += rho delta``, dropping the atom that hit zero, renormalised; returns the new ``k``."""
    for q in range(k):
        mu[S[q]] += rho * delta[q]
    if rho == t_max:
        mu[S[q_hit]] = -1.0  # reached the face's boundary: dropped below
    kk = 0
    for q in range(k):  # drop the atom that hit zero (and any rounded below it)
        if mu[S[q]] >= 0.0:
            S[kk] = S[q]
            kk += 1
        else:
            mu[S[q]] = 0.0
    total = 0.0
    for q in range(kk):
        total += mu[S[q]]
    for q in range(kk):
        mu[S[q]] /= total
    return kk


@kernel()
def polish(p, mu, tol, max_outer, max_inner, tau, gaps, stop):
    """Fully-corrective Newton polish (beyond [CS]; docs/math.md §5), from ``mu`` (in place).

    Outer loop: one gradient ``(A / b)^T (1/z)``, the duality gap (the certificate),
    then the FW vertex and up to ``N_ADD - 1`` further atoms with positive
    gaps join the support and ``F`` is maximised over the
    support's face of the simplex by Newton steps with the equality
    constraint ``sum mu = 1`` eliminated through its multiplier; a step that
    reaches the face's boundary drops that atom (ratio test), so the support
    only holds atoms with ``mu > 0``.  Each Newton step costs
    O(n_te k^2) for a support of k atoms.  ``gaps[o]`` records the gap
    before outer iteration ``o``.  A round in which Newton cannot move
    ``mu`` (e.g. a Hessian that is not numerically positive definite)
    ends the polish with ``STOP_LINE_SEARCH``: the next round would repeat it.

    Returns ``(n_outer, stop_reason)``.
    """
    n_c = mu.shape[0]
    n = p.Xte.shape[0]
    buf = np.empty(n)
    z = np.empty(n)
    r = np.empty(n)
    gt = np.empty(n_c)
    dz = np.empty(n)
    S = np.empty(n_c, dtype=np.int64)
    k = _support(mu, S)
    for o in range(max_outer + 1):
        combine(p, mu, z, buf)
        for j in range(n):
            r[j] = 1.0 / z[j]
        gradient(p, r, gt)
        l_fw, gmax, mg = fw_gap(gt, mu)
        gaps[o] = gmax - mg
        if gmax - mg <= tol:
            return o, STOP_GAP
        if o == max_outer:
            return o, STOP_MAX_ITER
        if stop[0] != 0:
            return o, STOP_INTERRUPTED
        # the support afresh: atoms added last round that Newton never moved (mu = 0) are not kept,
        # so an atom is never in S twice and k <= n_c
        k = _support(mu, S)
        k = _add_candidates(gt, mg, mu, S, k, N_ADD)
        f = log_sum(z)
        moved = False
        for _ in range(max_inner):
            if stop[0] != 0:  # a Newton step costs O(n_te k^2): poll each one
                return o, STOP_INTERRUPTED
            E, delta, dec, ok = _newton(p, mu, S, k, r, buf)
            noise = _noise(z)
            if not ok or not dec > 1e-10 * noise:  # singular, or converged far below F's rounding level
                break
            kk = 0  # added atoms (mu = 0) that Newton wants negative leave the face before any step
            for q in range(k):
                if mu[S[q]] == 0.0 and delta[q] < 0.0:
                    continue
                S[kk] = S[q]
                kk += 1
            if kk < k:
                k = kk
                continue
            t_max, q_hit = _ratio_test(mu, S, k, delta)
            for j in range(n):
                s = 0.0
                for q in range(k):
                    s += delta[q] * E[q, j]
                dz[j] = s
            rho, f_new, ok = armijo_max(z, dz, f, dec, min(1.0, t_max), tau, noise)
            if not ok:
                break
            k = _move(mu, S, k, delta, rho, t_max, q_hit)
            moved = True
            combine(p, mu, z, buf)
            for j in range(n):
                r[j] = 1.0 / z[j]
            f = log_sum(z)
        if not moved:
            # mu, hence the gradient and the candidates, are what they were: another round repeats this one
            gaps[o + 1] = gaps[o]
            return o + 1, STOP_LINE_SEARCH
    return max_outer, STOP_MAX_ITER
