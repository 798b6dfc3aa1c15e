"""Small dense factorisations of stacks of matrices, over an array namespace (NumPy or CuPy): the GPU engine's
exact-curvature seeds (``d x d``) and KNN-local models (``K x K``), with a flag per matrix where LAPACK's
``dpotrf`` would return a non-zero ``info``.
"""

from __future__ import annotations

import numpy as np


def batched_cholesky(xp, A):
    """Lower Cholesky factors of the stacked ``A`` (``h × d × d``) and whether each exists (every pivot
    positive, every entry finite): :func:`fastsm._kernels.linalg.potrf_symmetric`'s test, column by column
    over the stack."""
    h, d, _ = A.shape
    L = xp.zeros_like(A)
    ok = xp.ones(h, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(d):
            v = A[:, j, j] - (L[:, j, :j] * L[:, j, :j]).sum(axis=1)
            ok &= v > 0.0
            piv = xp.sqrt(xp.where(v > 0.0, v, 1.0))
            L[:, j, j] = piv
            if j + 1 < d:
                below = A[:, j + 1:, j] - xp.einsum("hik,hk->hi", L[:, j + 1:, :j], L[:, j, :j])
                L[:, j + 1:, j] = below / piv[:, None]
    return L, ok & xp.isfinite(L).reshape(h, -1).all(axis=1)


def inverse_from_cholesky(xp, L):
    """``(L L^T)^-1 = L^-T L^-1`` of the stacked factors, by forward substitution against the identity."""
    h, d, _ = L.shape
    Li = xp.zeros_like(L)
    for i in range(d):
        row = -xp.einsum("hk,hkj->hj", L[:, i, :i], Li[:, :i, :])
        row[:, i] += 1.0
        Li[:, i, :] = row / L[:, i, i][:, None]
    return xp.einsum("hki,hkj->hij", Li, Li)
