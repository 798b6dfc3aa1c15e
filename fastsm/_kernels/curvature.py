"""The optimiser's curvature hook: where a driver with an exact Hessian hands it over, and how it
seeds a point's BFGS matrix (:mod:`fastsm._kernels.quasi_newton`'s state).

SMTGP's driver (:func:`fastsm._kernels.optimize.minimize_batch`) computes the Hessian of the points
that :func:`wants_curvature` names (schedule: :data:`fastsm.config.CURVATURE_SCHEDULE`) and passes it
to :func:`seed_inverse`.
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.linalg import at_b, eigh_symmetric, mirror_upper
from fastsm.config import CURVATURE_EIG_FLOOR, CURVATURE_SCHEDULE, kernel


@kernel(inline=True)
def _first_try(d):
    """The iteration of a ``d``-output point's first request for curvature: ``max(first, ceil(d / 2))``."""
    return max(CURVATURE_SCHEDULE[0], (d + 1) // 2)


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
    positive definite.  An indefinite one is used only at the schedule's last request
    (:func:`wants_curvature`), eigenvalues ``lambda`` replaced by ``max(|lambda|, CURVATURE_EIG_FLOOR
    max |lambda|)`` (:data:`fastsm.config.CURVATURE_EIG_FLOOR`; docs/math.md §8): by then the point has
    spent the whole schedule where the criterion curves down, and BFGS alone crawls there.  Else
    nothing changes.

    The inverse comes from the eigenpairs, by LAPACK (:func:`~fastsm._kernels.linalg.eigh_symmetric`)
    and BLAS (:func:`~fastsm._kernels.linalg.at_b`): external calls, where loops of fastsm's own cost
    1.4 s of the first SMTGP prediction's compilation."""
    d = Hx.shape[0]
    V = np.empty((d, d))
    for c in range(d):
        for e in range(d):
            if not np.isfinite(Hx[c, e]):
                return
            V[c, e] = Hx[c, e]
    lam = np.empty(d)
    if eigh_symmetric(V, lam) != 0:
        return
    floor = 0.0
    if not lam[0] > 0.0:
        first0, every, last = CURVATURE_SCHEDULE
        if it.n_iter[p] + every <= _first_try(d) + last - first0:
            return  # not the last request: a later one may be positive definite
        floor = CURVATURE_EIG_FLOOR * max(abs(lam[0]), abs(lam[d - 1]))
        if not floor > 0.0:
            return
    for j in range(d):  # rows v_j / sqrt(lambda_j): H^-1 = V^T diag(1 / lambda) V is their Gram matrix
        r = 1.0 / np.sqrt(max(abs(lam[j]), floor))
        for i in range(d):
            V[j, i] *= r
    Hp = it.H[p]
    at_b(V, V, Hp)
    mirror_upper(Hp)
    it.h_scaled[p] = True
    it.h_exact[p] = True
