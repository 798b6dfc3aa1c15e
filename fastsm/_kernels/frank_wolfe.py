"""[CS] Alg. 2, 4 and 5: standard, away-step and pairwise Frank–Wolfe for KLIEP (docs/math.md §5).

The problem, its products and the Armijo rule: :mod:`fastsm._kernels.kliep_problem`.
"""

from __future__ import annotations

from typing import NamedTuple

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
    armijo_max,
    center_row,
    combine,
    fw_gap,
    gradient,
    log_sum,
    record,
)
from fastsm.config import kernel


class Atoms(NamedTuple):
    """The iterate ``mu`` on the simplex and its active set (the atoms with ``mu > 0``)."""

    mu: np.ndarray  # (n_c,) weights, summing to 1
    active: np.ndarray  # (n_c,) int64: the active atoms in its first ``n[0]`` entries
    in_active: np.ndarray  # (n_c,) bool
    n: np.ndarray  # (1,) int64: the active count


class FWOptions(NamedTuple):
    """What a Frank–Wolfe run is asked to do (the problem and the iterate travel apart)."""

    variant: int  # FW, AFW or PFW
    max_iter: int
    tol: float  # stop at a duality gap <= tol
    ftol: float  # stop at a relative increase of F <= ftol over one step (when > 0)
    tau: float  # the Armijo constant
    check: bool  # count invariant violations after every step


@kernel(internal=True)
def _atoms(mu):
    """The :class:`Atoms` of ``mu`` (in place: ``mu`` is not copied)."""
    n_c = mu.shape[0]
    atoms = Atoms(mu, np.empty(n_c, dtype=np.int64), np.zeros(n_c, dtype=np.bool_), np.zeros(1, dtype=np.int64))
    for l in range(n_c):
        if mu[l] > 0.0:
            atoms.active[atoms.n[0]] = l
            atoms.in_active[l] = True
            atoms.n[0] += 1
    return atoms


@kernel(internal=True)
def _away(gt, atoms):
    """The away atom: the active atom of least ``gt``."""
    active = atoms.active
    l_aw = active[0]
    for k in range(atoms.n[0]):
        l = active[k]
        if gt[l] < gt[l_aw]:
            l_aw = l
    return l_aw


@kernel(internal=True)
def _add(atoms, l, rho):
    """``mu[l] += rho``, ``l`` joining the active set."""
    atoms.mu[l] += rho
    if not atoms.in_active[l]:
        atoms.active[atoms.n[0]] = l
        atoms.in_active[l] = True
        atoms.n[0] += 1


@kernel()
def _drop(atoms, l):
    """``mu[l] = 0``, ``l`` leaving the active set."""
    atoms.mu[l] = 0.0
    atoms.in_active[l] = False
    active, n = atoms.active, atoms.n[0]
    for k in range(n):
        if active[k] == l:
            active[k] = active[n - 1]
            atoms.n[0] = n - 1
            return


@kernel()
def _check(atoms):
    """Invariant violations: active set != support of ``mu``, or ``sum mu != 1``."""
    mu, in_active = atoms.mu, atoms.in_active
    bad = 0
    count = 0
    s = 0.0
    for l in range(mu.shape[0]):
        s += mu[l]
        if mu[l] < 0.0 or (mu[l] > 0.0) != in_active[l]:
            bad += 1
        if in_active[l]:
            count += 1
    if count != atoms.n[0] or abs(s - 1.0) > 1e-12:
        bad += 1
    return bad


@kernel(internal=True)
def _direction(p, variant, atoms, z, gt, vertex, dz, bufs):
    """The step direction ``dz`` in ``z``-space for Alg. 2 / 4 / 5 (in place).

    ``vertex = (l_fw, gmax, mg)`` from :func:`~fastsm._kernels.kliep_problem.fw_gap`;
    ``bufs`` two scratch rows.  Returns ``(towards, l_aw, rho_max, slope)``:
    whether the step moves towards the FW vertex ``l_fw``, the away atom (-1
    for FW), the largest feasible step and the directional derivative.
    """
    l_fw, gmax, mg = vertex
    gap = gmax - mg
    n = z.shape[0]
    row_fw = center_row(p, l_fw, bufs[0])
    if variant == FW:
        for j in range(n):
            dz[j] = row_fw[j] - z[j]
        return True, -1, 1.0, gap
    l_aw = _away(gt, atoms)
    row_aw = center_row(p, l_aw, bufs[1])
    m_aw = atoms.mu[l_aw]
    if variant == PFW:
        for j in range(n):
            dz[j] = row_fw[j] - row_aw[j]
        return False, l_aw, m_aw, gmax - gt[l_aw]
    if gap >= mg - gt[l_aw]:
        for j in range(n):
            dz[j] = row_fw[j] - z[j]
        return True, l_aw, 1.0, gap
    for j in range(n):
        dz[j] = z[j] - row_aw[j]
    return False, l_aw, m_aw / (1.0 - m_aw), mg - gt[l_aw]


@kernel(internal=True)
def _step(variant, atoms, towards, l_fw, l_aw, rho, rho_max):
    """Move ``mu`` by ``rho`` along the chosen direction (in place); returns the step's kind."""
    mu, active = atoms.mu, atoms.active
    if towards:  # [CS] Eq. 22-23
        if rho == 1.0:
            for k in range(atoms.n[0]):
                mu[active[k]] = 0.0
                atoms.in_active[active[k]] = False
            atoms.n[0] = 0
            _add(atoms, l_fw, 1.0)
            return GOOD
        for k in range(atoms.n[0]):
            mu[active[k]] *= 1.0 - rho
        _add(atoms, l_fw, rho)
        return GOOD
    if variant == AFW:  # Eq. 26-27
        for k in range(atoms.n[0]):
            mu[active[k]] *= 1.0 + rho
        mu[l_aw] -= rho
        if rho == rho_max:
            _drop(atoms, l_aw)
            return DROP
        return GOOD
    # PFW, Eq. 30-31
    new_atom = not atoms.in_active[l_fw]
    _add(atoms, l_fw, rho)
    mu[l_aw] -= rho
    if rho != rho_max:
        return GOOD
    _drop(atoms, l_aw)
    return SWAP if new_atom else DROP


@kernel()
def frank_wolfe(p, opts, mu, trace, stop):
    """[CS] Alg. 2 (FW), 4 (AFW) or 5 (PFW) with the Armijo rule of Alg. 3, from ``mu`` (in place).

    ``mu`` must lie on the unit simplex; ``opts`` is an :class:`FWOptions`.
    Stops when the duality gap is at most ``opts.tol``, when the relative
    increase of ``F`` over one iteration is at most ``opts.ftol``
    (``ftol > 0``), at ``opts.max_iter`` or when ``stop[0]`` is set.
    ``trace`` records the gap, ``F`` and the active-set size at every
    iterate and the kind of every step.

    Returns ``(n_iter, stop_reason, n_good, n_drop, n_swap, violations)``.
    """
    n_c = mu.shape[0]
    n = p.Xte.shape[0]
    bufs = (np.empty(n), np.empty(n))
    z = np.empty(n)
    combine(p, mu, z, bufs[0])
    r = np.empty(n)
    gt = np.empty(n_c)
    dz = np.empty(n)
    atoms = _atoms(mu)
    f = log_sum(z)
    kinds = np.zeros(3, dtype=np.int64)  # GOOD, DROP, SWAP
    violations = 0
    it = 0
    while True:
        for j in range(n):
            r[j] = 1.0 / z[j]
        gradient(p, r, gt)
        vertex = fw_gap(gt, mu)
        l_fw = vertex[0]
        record(trace, it, vertex[1] - vertex[2], f, atoms.n[0])
        if vertex[1] - vertex[2] <= opts.tol:
            reason = STOP_GAP
            break
        if it >= opts.max_iter:
            reason = STOP_MAX_ITER
            break
        if stop[0] != 0:
            reason = STOP_INTERRUPTED
            break
        towards, l_aw, rho_max, slope = _direction(p, opts.variant, atoms, z, gt, vertex, dz, bufs)
        if l_aw == l_fw or not slope > 0.0:  # no ascent direction left: optimal to rounding
            reason = STOP_GAP
            break
        rho, f_new, ok = armijo_max(z, dz, f, slope, rho_max, opts.tau, 0.0)
        if not ok:
            reason = STOP_LINE_SEARCH
            break
        kind = _step(opts.variant, atoms, towards, l_fw, l_aw, rho, rho_max)
        for j in range(n):
            z[j] += rho * dz[j]
        kinds[kind] += 1
        if it < trace.step.shape[0]:
            trace.step[it] = kind
        it += 1
        if opts.check:
            violations += _check(atoms)
        f_old = f
        f = f_new
        if opts.ftol > 0.0 and f - f_old <= opts.ftol * abs(f_old):
            record(trace, it, np.nan, f, atoms.n[0])  # gap not computed: stopped before the next gradient
            reason = STOP_OBJECTIVE
            break
    return it, reason, kinds[GOOD], kinds[DROP], kinds[SWAP], violations
