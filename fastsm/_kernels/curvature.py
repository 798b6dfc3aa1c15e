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
from fastsm.config import CURVATURE_SCHEDULE, kernel


@kernel(inline=True)
def wants_curvature(p, it, opts):
    """Point ``p`` just moved and asks for exact curvature there (``opts.hessian``), by
    :data:`fastsm.config.CURVATURE_SCHEDULE` ``(first, every, last)``: first at iteration
    ``max(first, ceil(d / 2))``, then every ``every`` iterations, ``last - first`` at most, until one
    seeded its BFGS matrix."""
    first0, every, last = CURVATURE_SCHEDULE
    k = it.n_iter[p]
    first = max(first0, (it.Y.shape[1] + 1) // 2)
    return (opts.hessian and it.active[p] and k < opts.stop.max_iter and not it.h_exact[p]
            and first <= k <= first + last - first0 and (k - first) % every == 0)


@kernel(internal=True)
def seed_inverse(p, Hx, it):
    """Point ``p``'s exact Hessian ``Hx`` arrived: its inverse becomes the BFGS matrix if it is finite and
    positive definite (else nothing changes).  Factorised by LAPACK (:func:`~fastsm._kernels.linalg.potrf_symmetric`,
    an external call: the loops of fastsm's own factorisation cost 1.4 s of the first SMTGP prediction's
    compilation)."""
    d = Hx.shape[0]
    for c in range(d):
        for e in range(d):
            if not np.isfinite(Hx[c, e]):
                return
    L = np.empty((d, d))
    for c in range(d):
        for e in range(d):
            L[c, e] = Hx[c, e]
    if potrf_symmetric(L) != 0:
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
