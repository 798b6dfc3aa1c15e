"""Sparse MAXDET neighbour weights of GMM-NPE ([GMM] §4.1, the final problem).

For one representative ``i`` with neighbour matrices ``Q_j = P_i^-1/2 P_j P_i^-1/2``
and costs ``c_j = tr(Q_j) + lambda``::

    minimise   c^T w - log det G(w),   G(w) = sum_j w_j Q_j
    subject to w >= 0,  G(w) <= I

solved by a log-barrier interior-point method: damped Newton steps on
``t (c^T w - log det G) - sum_j log w_j - log det(I - G)``, ``t`` multiplied by
100 until the duality gap is below ``tol``: that of the dual feasible point Vandenberghe, Boyd and
Wu build from a Newton step (:func:`duality_gap`; ``(m + n) / t`` on the central path), so that a
centering that ended early (line search or ``max_newton``) is never taken for convergence.  Gradients
and Hessians come from the whitened matrices ``A_j = L_G^-1 Q_j L_G^-T`` and
``B_j = L_R^-1 Q_j L_R^-T`` (``R = I - G``):
``d/dw_j = t (c_j - tr A_j) - 1/w_j + tr B_j``,
``H_jk = t <A_j, A_k> + <B_j, B_k> + delta_jk / w_j^2``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from fastsm._kernels.linalg import backward_solve, cholesky, forward_solve
from fastsm.config import kernel

BARRIER_FACTOR = 100.0

#: Centering stops at half the squared Newton decrement below this.  Tighter
#: stops (1e-12) only add Newton steps that backtrack at the rounding floor:
#: on 5 random problems (n = 16, 10 neighbours) 1e-7 gave 87 Newton steps and
#: weights within 2e-9 of a tight Clarabel solution, 1e-12 gave 288 steps.
NEWTON_DECREMENT_TOL = 1e-7


class NewtonWork(NamedTuple):
    """Scratch of :func:`_newton_direction` (``m`` weights, ``n × n`` matrices)."""

    A: np.ndarray  # whitened L_G^-1 Q_j L_G^-T, m × n × n
    Bm: np.ndarray  # whitened L_R^-1 Q_j L_R^-T, m × n × n
    g: np.ndarray  # gradient, m
    H: np.ndarray  # Hessian, m × m
    LH: np.ndarray  # its Cholesky factor
    Hd: np.ndarray  # its diagonal (shifts), then -g
    dw: np.ndarray  # the Newton step, m


@kernel(internal=True)
def _whiten(L, Q, out):
    """``out = L^-1 Q L^-T`` for symmetric ``Q``."""
    n = L.shape[0]
    X = np.empty((n, n))
    col = np.empty(n)
    x = np.empty(n)
    for c in range(n):
        for r in range(n):
            col[r] = Q[r, c]
        forward_solve(L, col, x)
        for r in range(n):
            X[r, c] = x[r]
    # out = L^-1 X^T = (L^-1 Q L^-T) since (L^-1 Q)^T = Q L^-T
    for c in range(n):
        for r in range(n):
            col[r] = X[c, r]
        forward_solve(L, col, x)
        for r in range(n):
            out[r, c] = x[r]


@kernel(internal=True)
def _barrier(Q, c, w, t, G, R, L):
    """Barrier value at ``w`` (inf when infeasible); fills ``G``, ``R`` and their factors."""
    m, n = Q.shape[0], Q.shape[1]
    for j in range(m):
        if not w[j] > 0.0:
            return np.inf, False
    for r in range(n):
        for s in range(n):
            acc = 0.0
            for j in range(m):
                acc += w[j] * Q[j, r, s]
            G[r, s] = acc
            R[r, s] = (1.0 if r == s else 0.0) - acc
    ok, ldg = cholesky(G, L[0])
    if not ok:
        return np.inf, False
    ok, ldr = cholesky(R, L[1])
    if not ok:
        return np.inf, False
    v = -t * ldg - ldr
    for j in range(m):
        v += t * c[j] * w[j] - np.log(w[j])
    return v, True


@kernel(internal=True)
def _newton_direction(Q, c, w, t, L, ws):
    """The Newton step ``ws.dw`` of the barrier function at ``w`` (``L``: :func:`_barrier`'s factors);
    fills the whitened ``A_j = L_G^-1 Q_j L_G^-T`` and ``B_j = L_R^-1 Q_j L_R^-T`` (:class:`NewtonWork`
    ``ws``).  Returns ``(ok, decrement)`` (``-g . dw``; ``ok`` False where the Hessian has no Cholesky
    factor)."""
    A, Bm, g, H, LH, Hd, dw = ws
    m, n = Q.shape[0], Q.shape[1]
    for j in range(m):
        _whiten(L[0], Q[j], A[j])
        _whiten(L[1], Q[j], Bm[j])
    for j in range(m):
        ta = 0.0
        tb = 0.0
        for r in range(n):
            ta += A[j, r, r]
            tb += Bm[j, r, r]
        g[j] = t * (c[j] - ta) - 1.0 / w[j] + tb
        for k in range(j + 1):
            sa = 0.0
            sb = 0.0
            for r in range(n):
                for s in range(n):
                    sa += A[j, r, s] * A[k, r, s]
                    sb += Bm[j, r, s] * Bm[k, r, s]
            H[j, k] = t * sa + sb
            H[k, j] = H[j, k]
        H[j, j] += 1.0 / (w[j] * w[j])
    ok, _ = cholesky(H, LH)
    # near the optimum H mixes entries 1/w_j^2 of inactive weights (~1e22) with the barrier
    # terms of an active constraint G <= I: rounding can make it indefinite.  A relative
    # diagonal shift (Levenberg) keeps a descent direction for the line search
    shift = 1e-14
    while not ok and shift < 1e-2:
        for j in range(m):
            Hd[j] = H[j, j]
            H[j, j] = Hd[j] * (1.0 + shift)
        ok, _ = cholesky(H, LH)
        for j in range(m):
            H[j, j] = Hd[j]
        shift *= 100.0
    if not ok:
        return False, 0.0
    for j in range(m):
        Hd[j] = -g[j]
    y = np.empty(m)
    forward_solve(LH, Hd, y)
    backward_solve(LH, y, dw)
    dec = 0.0
    for j in range(m):
        dec -= g[j] * dw[j]
    return True, dec


@kernel(internal=True)
def duality_gap(Q, c, w, t, L, A, Bm, dw):
    """A certified bound on ``f(w) - f*``: ``f(w)`` minus the objective of a dual feasible point.

    The dual of the problem (Vandenberghe, Boyd & Wu's MAXDET form) is ``max log det W - tr Z + n``
    over ``W > 0``, ``Z >= 0`` with ``tr(Q_j (W - Z)) <= c_j``.  From the Newton step ``dw`` at
    ``w`` (``dG = sum_j dw_j Q_j``), ``W = G^-1 - G^-1 dG G^-1`` and
    ``Z = (R^-1 + R^-1 dG R^-1) / t`` meet the constraints with equality up to the slacks
    ``1/(t w_j) - dw_j / (t w_j^2)``, and are positive definite when the step is short (Newton
    decrement below 1); on the central path (``dw = 0``) the gap is ``(m + n) / t``.  ``W`` is
    scaled by the largest ``theta <= 1`` that keeps every constraint despite rounding.  In the
    whitened ``M_G = sum_j dw_j A_j`` and ``M_R = sum_j dw_j B_j`` (``A``, ``Bm``:
    :func:`_newton_direction`'s at ``w``):
    ``gap = c^T w - n - n log theta - log det(I - M_G) + tr((I + M_R) L_R^-1 L_R^-T) / t``.
    ``inf`` where the point is not dual feasible (a centering that ended far from the path).
    """
    m, n = Q.shape[0], Q.shape[1]
    MG = np.zeros((n, n))
    MR = np.zeros((n, n))
    for j in range(m):
        for r in range(n):
            for s in range(n):
                MG[r, s] += dw[j] * A[j, r, s]
                MR[r, s] += dw[j] * Bm[j, r, s]
    IG = np.empty((n, n))
    IR = np.empty((n, n))
    for r in range(n):
        for s in range(n):
            d = 1.0 if r == s else 0.0
            IG[r, s] = d - MG[r, s]
            IR[r, s] = d + MR[r, s]
    F = np.empty((n, n))
    ok, ld_ig = cholesky(IG, F)
    if not ok:
        return np.inf
    ok, _ = cholesky(IR, F)
    if not ok:
        return np.inf
    # S = L_R^-1 L_R^-T (tr Z = <I + M_R, S> / t), column by column from X = L_R^-1
    X = np.empty((n, n))
    e = np.empty(n)
    x = np.empty(n)
    for k in range(n):
        for r in range(n):
            e[r] = 1.0 if r == k else 0.0
        forward_solve(L[1], e, x)
        for r in range(n):
            X[r, k] = x[r]
    trz = 0.0
    for r in range(n):
        for s in range(n):
            srs = 0.0
            for k in range(n):
                srs += X[r, k] * X[s, k]
            trz += IR[r, s] * srs
    trz /= t
    theta = 1.0
    cw = 0.0
    for j in range(m):
        tw = 0.0  # tr(Q_j W) = tr(A_j (I - M_G))
        tz = 0.0  # tr(Q_j Z) = tr(B_j (I + M_R)) / t
        for r in range(n):
            for s in range(n):
                tw += A[j, r, s] * IG[s, r]
                tz += Bm[j, r, s] * IR[s, r]
        tz /= t
        if tw - tz > c[j] and tw > 0.0:
            theta = min(theta, (c[j] + tz) / tw)
        cw += c[j] * w[j]
    if not theta > 0.0:
        return np.inf
    return cw - n - n * np.log(theta) - ld_ig + trz


@kernel()
def maxdet_weights(Q, c, tol, max_newton):
    """Solve one MAXDET problem; returns ``(w, n_newton_total, converged)``.

    ``converged``: the gap of a dual feasible point (:func:`duality_gap`) is below ``tol``.
    """
    m, n = Q.shape[0], Q.shape[1]
    trsum = 0.0
    for j in range(m):
        for r in range(n):
            trsum += Q[j, r, r]
    w = np.full(m, 0.5 / trsum)  # G = w sum_j Q_j has trace 1/2, so G < I
    G = np.empty((n, n))
    R = np.empty((n, n))
    L = np.empty((2, n, n))
    Lt = np.empty((2, n, n))
    A = np.empty((m, n, n))
    Bm = np.empty((m, n, n))
    g = np.empty(m)
    H = np.empty((m, m))
    LH = np.empty((m, m))
    Hd = np.empty(m)
    dw = np.empty(m)
    ws = NewtonWork(A, Bm, g, H, LH, Hd, dw)
    wt = np.empty(m)
    t = 1.0
    total = 0
    while True:
        f, _ = _barrier(Q, c, w, t, G, R, L)
        for _it in range(max_newton):
            total += 1
            ok, dec = _newton_direction(Q, c, w, t, L, ws)
            if not ok:
                return w, total, False
            if dec * 0.5 <= NEWTON_DECREMENT_TOL:
                break
            step = 1.0
            for j in range(m):
                if dw[j] < 0.0:
                    step = min(step, -0.99 * w[j] / dw[j])
            accepted = False
            for _ls in range(40):
                for j in range(m):
                    wt[j] = w[j] + step * dw[j]
                ft, feas = _barrier(Q, c, wt, t, G, R, Lt)
                if feas and ft <= f - 0.25 * step * dec:
                    accepted = True
                    break
                step *= 0.5
            if not accepted:
                break
            for j in range(m):
                w[j] = wt[j]
            f = ft
            L[:] = Lt
        if (m + n) / t < tol:  # the central path's gap: certify it where centering ended
            ok, _ = _newton_direction(Q, c, w, t, L, ws)
            if ok and duality_gap(Q, c, w, t, L, A, Bm, dw) < tol:
                return w, total, True
        if t > 1e30:  # the gap cannot close further in float64
            return w, total, False
        t *= BARRIER_FACTOR


@kernel(parallel=True)
def maxdet_rows(Qs, cs, offsets, tol, max_newton, W, status):
    """One MAXDET problem per representative; problem ``i`` uses ``Qs[offsets[i]:offsets[i+1]]``."""
    for i in prange(offsets.shape[0] - 1):
        a, b = offsets[i], offsets[i + 1]
        w, _, ok = maxdet_weights(Qs[a:b], cs[a:b], tol, max_newton)
        for k in range(b - a):
            W[a + k] = w[k]
        status[i] = 0 if ok else 1
