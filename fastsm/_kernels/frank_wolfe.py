"""[CS] Alg. 2, 4 and 5: standard, away-step and pairwise Frank–Wolfe for KLIEP (MATH §5).

The problem, its products and the Armijo rule: :mod:`fastsm._kernels.kliep_problem`.
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.kliep_problem import (
    AFW,
    DROP,
    FW,
    GOOD,
    PFW,
    STOP_GAP,
    STOP_INTERRUPTED,
    STOP_LINE_SEARCH,
    STOP_MAX_ITER,
    STOP_OBJECTIVE,
    SWAP,
    _gap,
    _record,
    _row,
    armijo_max,
    combine,
    gradient,
    log_sum,
)
from fastsm.config import kernel


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
