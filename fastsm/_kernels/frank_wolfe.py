"""KLIEP on the simplex: Frank–Wolfe (standard, away-step, pairwise), projected gradient, Newton polish.

MATH §5.  With ``A[j, l] = k_l(x_te_j)`` and ``b_l = mean_i k_l(x_tr_i)``
KLIEP maximises ``F(alpha) = sum_j log (A alpha)_j`` over
``{alpha >= 0, b^T alpha = 1}``, a simplex with vertices ``e_l / b_l``
([CS] Eq. 4).  Every solver here works in the simplex coordinates
``mu = b * alpha`` (the paper's atoms, ``alpha = sum_l mu_l beta^(l)``):

* ``At[l, j] = A[j, l] / b_l`` (the scaled kernel, stored transposed so that
  a centre's column is a contiguous row);
* ``z = At^T mu = A alpha`` (kept up to date in O(n_te) per step);
* ``gt = At (1 / z) = g * beta`` — the paper's ``g ⊙ beta`` ([CS] Eq. 3–4),
  the one O(n_te n_c) product of an iteration;
* the duality gap ``<g, d_FW> = max_l gt_l - mu^T gt`` (``mu^T gt = n_te`` in
  exact arithmetic).

The problem travels as a :class:`KliepProblem`.  With ``stored = False`` the
matrix ``At`` is never formed: rows are recomputed from ``Xte``/``C`` when
needed (memory O(n_te + n_c), one ``exp`` per entry and iteration).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from fastsm._kernels.linesearch import backtrack
from fastsm._kernels.objectives import _cholesky, _cholesky_solve
from fastsm.config import kernel

FW = 0
AFW = 1
PFW = 2
PG = 3

GOOD = 0
DROP = 1
SWAP = 2

STOP_GAP = 0
STOP_MAX_ITER = 1
STOP_OBJECTIVE = 2
STOP_LINE_SEARCH = 3
STOP_INTERRUPTED = 4

#: Backtracking steps before a line search gives up (the step is then below 2^-60 of its start).
MAX_BACKTRACK = 60


class KliepProblem(NamedTuple):
    """A KLIEP problem in simplex coordinates (what the solvers need, nothing else)."""

    At: np.ndarray  # n_c × n_te scaled kernel A^T / b, or 0 × 0 when not stored
    Xte: np.ndarray  # n_te × d test inputs
    C: np.ndarray  # n_c × d centres
    gamma: float  # 1 / (2 sigma^2)
    inv_b: np.ndarray  # beta_l = 1 / b_l
    stored: bool


@kernel()
def _record(trace, it, gap, f, n_active):
    """Row ``it`` of the trace, if it has one."""
    if it < trace.gap.shape[0]:
        trace.gap[it] = gap
        trace.objective[it] = f
        trace.n_active[it] = n_active


class FWTrace(NamedTuple):
    """Per-iteration records, preallocated; iterations beyond their length are not recorded."""

    gap: np.ndarray
    objective: np.ndarray
    step: np.ndarray  # kind of the step from iterate i to i + 1: GOOD / DROP / SWAP (-1: none)
    n_active: np.ndarray


@kernel(parallel=True)
def center_means(C, X, gamma, out):
    """``out[l] = mean_i exp(-gamma ||C_l - X_i||^2)`` without storing the block ([CS] Eq. 4)."""
    n_c, d = C.shape
    n = X.shape[0]
    for l in prange(n_c):
        s = 0.0
        for i in range(n):
            q = 0.0
            for c in range(d):
                t = C[l, c] - X[i, c]
                q += t * t
            s += np.exp(-gamma * q)
        out[l] = s / n


@kernel(parallel=True)
def scaled_kernel(C, Xte, gamma, inv_b, At):
    """``At[l, j] = exp(-gamma ||C_l - Xte_j||^2) / b_l`` (built in parallel over centres)."""
    n_c, d = C.shape
    n = Xte.shape[0]
    for l in prange(n_c):
        for j in range(n):
            q = 0.0
            for c in range(d):
                t = C[l, c] - Xte[j, c]
                q += t * t
            At[l, j] = np.exp(-gamma * q) * inv_b[l]


@kernel()
def _row(p, l, buf):
    """Row ``l`` of ``At`` (a view when stored, else computed into ``buf``)."""
    if p.stored:
        return p.At[l]
    n, d = p.Xte.shape
    for j in range(n):
        q = 0.0
        for c in range(d):
            t = p.C[l, c] - p.Xte[j, c]
            q += t * t
        buf[j] = np.exp(-p.gamma * q) * p.inv_b[l]
    return buf


@kernel(parallel=True)
def gradient(p, r, gt):
    """``gt = At r`` in parallel over centres; each entry is one serial dot (thread-count independent)."""
    n_c = p.inv_b.shape[0]
    n, d = p.Xte.shape
    for l in prange(n_c):
        s = 0.0
        if p.stored:
            for j in range(n):
                s += p.At[l, j] * r[j]
            gt[l] = s
        else:
            for j in range(n):
                q = 0.0
                for c in range(d):
                    t = p.C[l, c] - p.Xte[j, c]
                    q += t * t
                s += np.exp(-p.gamma * q) * r[j]
            gt[l] = s * p.inv_b[l]


@kernel()
def combine(p, mu, z, buf):
    """``z = At^T mu`` over the nonzero entries of ``mu`` (O(n_te · nnz))."""
    z[:] = 0.0
    for l in range(mu.shape[0]):
        if mu[l] != 0.0:
            row = _row(p, l, buf)
            for j in range(z.shape[0]):
                z[j] += mu[l] * row[j]


@kernel()
def log_sum(z):
    """``sum_j log z_j``; ``-inf`` if any ``z_j <= 0``."""
    s = 0.0
    for j in range(z.shape[0]):
        if not z[j] > 0.0:
            return -np.inf
        s += np.log(z[j])
    return s


@kernel()
def _trial(z, dz, rho):
    s = 0.0
    for j in range(z.shape[0]):
        v = z[j] + rho * dz[j]
        if not v > 0.0:
            return -np.inf
        s += np.log(v)
    return s


@kernel()
def armijo_max(z, dz, f0, slope, rho_max, tau, noise):
    """[CS] Alg. 3: largest ``rho <= rho_max`` (backtracking) with ``F(rho) >= F0 + tau rho slope - noise``.

    Backtracking uses the safeguarded quadratic interpolation of
    :func:`fastsm._kernels.linesearch.backtrack` (``rho`` shrinks by a
    factor in ``[0.1, 0.5]``, the paper's ``xi``).  ``noise = 0`` is the
    paper's rule; the polish passes the rounding level of ``F`` so that
    Newton steps whose gain is below it are still taken.  Returns
    ``(rho, F, ok)``.
    """
    rho = rho_max
    for _ in range(MAX_BACKTRACK):
        f = _trial(z, dz, rho)
        if np.isfinite(f) and f >= f0 + tau * rho * slope - noise:
            return rho, f, True
        rho = backtrack(-f0, -f, rho, -slope)
    return 0.0, f0, False


@kernel()
def _gap(gt, mu):
    """``(l_fw, max gt, mu^T gt)``."""
    l_fw = 0
    gmax = gt[0]
    s = 0.0
    for l in range(gt.shape[0]):
        if gt[l] > gmax:
            gmax = gt[l]
            l_fw = l
        if mu[l] != 0.0:
            s += mu[l] * gt[l]
    return l_fw, gmax, s


@kernel()
def _away(gt, active, n_active):
    l_aw = active[0]
    for k in range(n_active):
        l = active[k]
        if gt[l] < gt[l_aw]:
            l_aw = l
    return l_aw


@kernel()
def _remove(active, n_active, l):
    for k in range(n_active):
        if active[k] == l:
            active[k] = active[n_active - 1]
            return n_active - 1
    return n_active


@kernel()
def _check(mu, in_active, n_active):
    """Invariant violations: active set != support of ``mu``, or ``sum mu != 1``."""
    bad = 0
    count = 0
    s = 0.0
    for l in range(mu.shape[0]):
        s += mu[l]
        if mu[l] < 0.0 or (mu[l] > 0.0) != in_active[l]:
            bad += 1
        if in_active[l]:
            count += 1
    if count != n_active or abs(s - 1.0) > 1e-12:
        bad += 1
    return bad


@kernel()
def frank_wolfe(p, variant, mu, max_iter, tol, ftol, tau, trace, stop, check):
    """[CS] Alg. 2 (FW), 4 (AFW) or 5 (PFW) with the Armijo rule of Alg. 3, from ``mu`` (in place).

    ``mu`` must lie on the unit simplex.  Stops when the duality gap is at
    most ``tol``, when the relative increase of ``F`` over one iteration is
    at most ``ftol`` (``ftol > 0``), at ``max_iter`` or when ``stop[0]`` is
    set.  ``trace`` records the gap, ``F`` and the active-set size at every
    iterate and the kind of every step.

    Returns ``(n_iter, stop_reason, n_good, n_drop, n_swap, violations)``.
    """
    n_c = mu.shape[0]
    n = p.Xte.shape[0]
    buf_a = np.empty(n)
    buf_b = np.empty(n)
    z = np.empty(n)
    combine(p, mu, z, buf_a)
    r = np.empty(n)
    gt = np.empty(n_c)
    dz = np.empty(n)
    active = np.empty(n_c, dtype=np.int64)
    in_active = np.zeros(n_c, dtype=np.bool_)
    n_active = 0
    for l in range(n_c):
        if mu[l] > 0.0:
            active[n_active] = l
            in_active[l] = True
            n_active += 1
    f = log_sum(z)
    n_good = 0
    n_drop = 0
    n_swap = 0
    violations = 0
    reason = STOP_MAX_ITER
    it = 0
    while True:
        for j in range(n):
            r[j] = 1.0 / z[j]
        gradient(p, r, gt)
        l_fw, gmax, mg = _gap(gt, mu)
        gap = gmax - mg
        _record(trace, it, gap, f, n_active)
        if gap <= tol:
            reason = STOP_GAP
            break
        if it >= max_iter:
            reason = STOP_MAX_ITER
            break
        if stop[0] != 0:
            reason = STOP_INTERRUPTED
            break
        row_fw = _row(p, l_fw, buf_a)
        towards = True
        l_aw = -1
        if variant == FW:
            for j in range(n):
                dz[j] = row_fw[j] - z[j]
            rho_max = 1.0
            slope = gap
        else:
            l_aw = _away(gt, active, n_active)
            row_aw = _row(p, l_aw, buf_b)
            m_aw = mu[l_aw]
            if variant == PFW:
                towards = False
                for j in range(n):
                    dz[j] = row_fw[j] - row_aw[j]
                rho_max = m_aw
                slope = gmax - gt[l_aw]
            elif gap >= mg - gt[l_aw]:
                for j in range(n):
                    dz[j] = row_fw[j] - z[j]
                rho_max = 1.0
                slope = gap
            else:
                towards = False
                for j in range(n):
                    dz[j] = z[j] - row_aw[j]
                rho_max = m_aw / (1.0 - m_aw)
                slope = mg - gt[l_aw]
        if l_aw == l_fw or not slope > 0.0:  # no ascent direction left: optimal to rounding
            reason = STOP_GAP
            break
        rho, f_new, ok = armijo_max(z, dz, f, slope, rho_max, tau, 0.0)
        if not ok:
            reason = STOP_LINE_SEARCH
            break
        kind = GOOD
        if towards:  # [CS] Eq. 22-23
            if rho == 1.0:
                for k in range(n_active):
                    mu[active[k]] = 0.0
                    in_active[active[k]] = False
                mu[l_fw] = 1.0
                active[0] = l_fw
                in_active[l_fw] = True
                n_active = 1
            else:
                for k in range(n_active):
                    mu[active[k]] *= 1.0 - rho
                mu[l_fw] += rho
                if not in_active[l_fw]:
                    active[n_active] = l_fw
                    in_active[l_fw] = True
                    n_active += 1
        elif variant == AFW:  # Eq. 26-27
            for k in range(n_active):
                mu[active[k]] *= 1.0 + rho
            mu[l_aw] -= rho
            if rho == rho_max:
                mu[l_aw] = 0.0
                in_active[l_aw] = False
                n_active = _remove(active, n_active, l_aw)
                kind = DROP
        else:  # PFW, Eq. 30-31
            mu[l_fw] += rho
            mu[l_aw] -= rho
            if not in_active[l_fw]:
                active[n_active] = l_fw
                in_active[l_fw] = True
                n_active += 1
                if rho == rho_max:
                    kind = SWAP
            elif rho == rho_max:
                kind = DROP
            if rho == rho_max:
                mu[l_aw] = 0.0
                in_active[l_aw] = False
                n_active = _remove(active, n_active, l_aw)
        for j in range(n):
            z[j] += rho * dz[j]
        if kind == GOOD:
            n_good += 1
        elif kind == DROP:
            n_drop += 1
        else:
            n_swap += 1
        if it < trace.step.shape[0]:
            trace.step[it] = kind
        it += 1
        if check:
            violations += _check(mu, in_active, n_active)
        f_old = f
        f = f_new
        if ftol > 0.0 and f - f_old <= ftol * abs(f_old):
            _record(trace, it, np.nan, f, n_active)  # gap not computed: stopped before the next gradient
            reason = STOP_OBJECTIVE
            break
    return it, reason, n_good, n_drop, n_swap, violations


@kernel()
def _project_pg(alpha, b, bn, c):
    """Sugiyama et al.'s KLIEP projection: onto ``b^T alpha = 1``, clip at 0, rescale.

    ``b / (b^T b)`` as ``bn c`` with ``bn = b / max(b)`` (an array, so that
    fast-math cannot fold the scale back) and ``c = 1 / (max(b) |bn|^2)``: at
    narrow kernels ``b ~ 1e-160`` and ``b^T b`` itself underflows to zero.
    """
    s = 0.0
    for l in range(alpha.shape[0]):
        s += b[l] * alpha[l]
    for l in range(alpha.shape[0]):
        alpha[l] += bn[l] * ((1.0 - s) * c)
        if alpha[l] < 0.0:
            alpha[l] = 0.0
    s = 0.0
    for l in range(alpha.shape[0]):
        s += b[l] * alpha[l]
    if s > 0.0:
        for l in range(alpha.shape[0]):
            alpha[l] /= s


@kernel()
def _record_pg(p, z, mu, score, it, r, gt, trace):
    """Gradient ``gt`` at ``z`` (``r = 1/z`` as scratch) and the trace row ``it`` of a projected-gradient step."""
    for j in range(z.shape[0]):
        r[j] = 1.0 / z[j]
    gradient(p, r, gt)
    _, gmax, mg = _gap(gt, mu)
    nnz = 0
    for l in range(mu.shape[0]):
        if mu[l] > 0.0:
            nnz += 1
    _record(trace, it, gmax - mg, score, nnz)
    if it < trace.step.shape[0]:
        trace.step[it] = -1


@kernel()
def projected_gradient(p, b, mu, max_iter, iter_per_step, trace, stop):
    """KLIEP as Sugiyama et al. (2008) solve it: projected gradient ascent in ``alpha``.

    Step sizes ``eps = 10^3, 10^2, ..., 10^-3``; at each, up to
    ``iter_per_step`` ascent steps ``alpha += eps A^T (1 / A alpha)`` each
    followed by the projection, until the mean log-likelihood stops
    increasing.  ``mu`` (simplex coordinates) is the start and the result.

    Returns ``(n_iter, stop_reason)``.
    """
    n_c = mu.shape[0]
    n = p.Xte.shape[0]
    buf = np.empty(n)
    bmax = 0.0
    for l in range(n_c):
        bmax = max(bmax, b[l])
    bn = np.empty(n_c)
    for l in range(n_c):
        bn[l] = b[l] / bmax
    bbn = 0.0
    for l in range(n_c):
        bbn += bn[l] * bn[l]
    c = 1.0 / bmax / bbn
    alpha = np.empty(n_c)
    for l in range(n_c):
        alpha[l] = mu[l] * p.inv_b[l]
    _project_pg(alpha, b, bn, c)
    for l in range(n_c):
        mu[l] = alpha[l] * b[l]
    z = np.empty(n)
    combine(p, mu, z, buf)
    score = log_sum(z)
    r = np.empty(n)
    gt = np.empty(n_c)
    trial = np.empty(n_c)
    mu_t = np.empty(n_c)
    z_t = np.empty(n)
    it = 0
    reason = STOP_OBJECTIVE
    eps = 1e3
    for _ in range(7):
        for _ in range(iter_per_step):
            _record_pg(p, z, mu, score, it, r, gt, trace)
            if it >= max_iter:
                return it, STOP_MAX_ITER
            if stop[0] != 0:
                return it, STOP_INTERRUPTED
            for l in range(n_c):  # A^T r = b * gt
                trial[l] = alpha[l] + eps * b[l] * gt[l]
            _project_pg(trial, b, bn, c)
            for l in range(n_c):
                mu_t[l] = trial[l] * b[l]
            combine(p, mu_t, z_t, buf)
            s_new = log_sum(z_t)
            if not s_new > score:
                break
            score = s_new
            alpha[:] = trial
            mu[:] = mu_t
            z[:] = z_t
            it += 1
        eps *= 0.1
    _record_pg(p, z, mu, score, it, r, gt, trace)
    return it, reason


@kernel()
def _support(mu, S):
    k = 0
    for l in range(mu.shape[0]):
        if mu[l] > 0.0:
            S[k] = l
            k += 1
    return k


#: Atoms with the largest positive gaps added to the support per polish round.
N_ADD = 8


@kernel()
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


@kernel()
def polish(p, mu, tol, max_outer, max_inner, tau, gaps, stop):
    """Fully-corrective Newton polish (beyond [CS]; MATH §5), from ``mu`` (in place).

    Outer loop: one gradient ``At (1/z)``, the duality gap (the certificate),
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
        l_fw, gmax, mg = _gap(gt, mu)
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
            E = np.empty((k, n))
            for q in range(k):
                E[q] = _row(p, S[q], buf)
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
            L, ok = _cholesky(H)
            if not ok:
                break
            x1 = _cholesky_solve(L, g)
            x2 = _cholesky_solve(L, np.ones(k))
            nu = np.sum(x1) / np.sum(x2)
            delta = x1 - nu * x2
            dec = 0.0
            for q in range(k):
                dec += g[q] * delta[q]
            noise = 0.0
            for j in range(n):
                noise += abs(np.log(z[j])) + 1.0
            noise *= 8.0 * 2.220446049250313e-16
            if not dec > 1e-10 * noise:  # Newton converged far below F's rounding level
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
            t_max = np.inf
            q_hit = -1
            for q in range(k):
                if delta[q] < 0.0:
                    t = mu[S[q]] / -delta[q]
                    if t < t_max:
                        t_max = t
                        q_hit = q
            t0 = min(1.0, t_max)
            for j in range(n):
                s = 0.0
                for q in range(k):
                    s += delta[q] * E[q, j]
                dz[j] = s
            rho, f_new, ok = armijo_max(z, dz, f, dec, t0, tau, noise)
            if not ok:
                break
            for q in range(k):
                mu[S[q]] += rho * delta[q]
            moved = True
            if rho == t_max:
                mu[S[q_hit]] = -1.0  # reached the face's boundary: dropped below
            kk = 0
            for q in range(k):  # drop the atom that hit zero (and any rounded below it)
                if mu[S[q]] >= 0.0:
                    S[kk] = S[q]
                    kk += 1
                else:
                    mu[S[q]] = 0.0
            k = kk
            total = 0.0
            for q in range(k):
                total += mu[S[q]]
            for q in range(k):
                mu[S[q]] /= total
            combine(p, mu, z, buf)
            for j in range(n):
                r[j] = 1.0 / z[j]
            f = log_sum(z)
        if not moved:
            # mu, hence the gradient and the candidates, are what they were: another round repeats this one
            gaps[o + 1] = gaps[o]
            return o + 1, STOP_LINE_SEARCH
    return max_outer, STOP_MAX_ITER
