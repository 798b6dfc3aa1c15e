"""The optimiser's curvature hook: where a driver with an exact Hessian hands it over, and how it
seeds a point's BFGS matrix (:mod:`fastsm._kernels.quasi_newton`'s state).

SMTGP's driver (:func:`fastsm._kernels.optimize.minimize_batch`) computes the Hessian of the points
that :func:`wants_curvature` names (schedule: :data:`fastsm.config.CURVATURE_SCHEDULE`) and passes it
to :func:`seed_inverse`.
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.linalg import cholesky_solve, potrf_symmetric
from fastsm._kernels.shared import call
from fastsm.config import CURVATURE_SCHEDULE, CURVATURE_SHIFT, CURVATURE_SHIFT_COST, kernel


@kernel(inline=True)
def hessian_cost(d):
    """A ``d``-output point's exact Hessian in evaluations, ``ceil(d / 2)``: its ``2 d`` triangular
    products against an evaluation's 4 (:func:`~fastsm._kernels.hessian.hessian_rows`)."""
    return (d + 1) // 2


@kernel(inline=True)
def _first_try(d):
    """The iteration of a ``d``-output point's first request for curvature: ``max(first, ceil(d / 2))``."""
    return max(CURVATURE_SCHEDULE[0], hessian_cost(d))


@kernel(inline=True)
def wants_curvature(p, it, opts):
    """Point ``p`` just moved and asks for exact curvature there (``opts.hessian``), by
    :data:`fastsm.config.CURVATURE_SCHEDULE` ``(first, every, last)``: first at iteration
    ``max(first, ceil(d / 2))``, then every ``every`` iterations, ``last - first`` at most, until one
    seeded its BFGS matrix."""
    first0, every, last = CURVATURE_SCHEDULE
    k = it.n_iter[p]
    first = _first_try(it.Y.shape[1])
    return (opts.hessian and it.active[p] and k < opts.stop.max_iter and not it.h_exact[p]
            and first <= k <= first + last - first0 and (k - first) % every == 0)


@kernel(internal=True)
def seed_inverse(p, Hx, it):
    """Point ``p``'s exact Hessian ``Hx`` arrived: its inverse becomes the BFGS matrix if it is finite and
    positive definite.  An indefinite one is used at the schedule's last request
    (:func:`wants_curvature`), and at every request where it cost at least
    :data:`fastsm.config.CURVATURE_SHIFT_COST` evaluations (:func:`hessian_cost`), shifted to ``Hx + tau I``
    with the least ``tau`` of the sequence ``max(beta, beta - min_i Hx_ii) 2^k``
    (``beta = CURVATURE_SHIFT ||Hx||_F``, :data:`fastsm.config.CURVATURE_SHIFT`) that makes it positive
    definite (docs/math.md §8): by the last request the point has spent the whole schedule where the
    criterion curves down, and BFGS alone crawls there; an expensive Hessian is not paid for again.
    Else nothing changes.

    Factorised by LAPACK (:func:`~fastsm._kernels.linalg.potrf_symmetric`, an external call: the loops
    of fastsm's own factorisation cost 1.4 s of the first SMTGP prediction's compilation)."""
    d = Hx.shape[0]
    L = np.empty((d, d))
    fro = 0.0
    low = np.inf
    for c in range(d):
        for e in range(d):
            if not np.isfinite(Hx[c, e]):
                return
            L[c, e] = Hx[c, e]
            fro += Hx[c, e] * Hx[c, e]
        low = min(low, Hx[c, c])
    if potrf_symmetric(L) != 0:
        first0, every, last = CURVATURE_SCHEDULE
        if hessian_cost(d) < CURVATURE_SHIFT_COST and it.n_iter[p] + every <= _first_try(d) + last - first0:
            return  # a cheap Hessian before the last request: a later one may be positive definite
        beta = CURVATURE_SHIFT * np.sqrt(fro)
        tau = max(beta, beta - low)
        for _ in range(64):
            for c in range(d):
                for e in range(d):
                    L[c, e] = Hx[c, e]
                L[c, c] += tau
            if potrf_symmetric(L) == 0:
                break
            tau *= 2.0
        else:
            return
    unit = np.empty(d)
    unit[:] = 0.0
    for c in range(d):  # H^-1 column by column
        unit[c] = 1.0
        col = call(cholesky_solve, L, unit)
        unit[c] = 0.0
        for i in range(d):
            it.H[p, i, c] = col[i]
    it.h_scaled[p] = True
    it.h_exact[p] = True
