"""Gaussian (RBF) kernel blocks and their derivative with respect to y.

``k(a, b) = exp(-gamma * ||a - b||^2)`` (scikit-learn's ``rbf_kernel``
convention; the papers' ``2 rho^2`` equals ``1 / gamma``).  The regulariser
``lambda`` is added to the diagonal of training matrices only (MATH §1).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from fastsm.config import kernel


@kernel(parallel=True)
def rbf_gram(Z, gamma, lam):
    """Training kernel matrix ``K`` (n×n) with ``lam`` on its diagonal."""
    n, d = Z.shape
    K = np.empty((n, n))
    for i in prange(n):
        K[i, i] = 1.0 + lam
        for j in range(i + 1, n):
            s = 0.0
            for c in range(d):
                t = Z[i, c] - Z[j, c]
                s += t * t
            v = np.exp(-gamma * s)
            K[i, j] = v
            K[j, i] = v
    return K


@kernel(parallel=True)
def rbf_cross(A, Z, gamma, out):
    """Cross-kernel rows: ``out[i, j] = exp(-gamma ||A_i - Z_j||^2)``.

    One row per test point (the transposed ``N×B`` column block of
    DESIGN.md), so that each point's column is contiguous.  ``out`` must be
    at least ``len(A)`` rows by ``len(Z)`` columns.
    """
    m, d = A.shape
    n = Z.shape[0]
    for i in prange(m):
        for j in range(n):
            s = 0.0
            for c in range(d):
                t = A[i, c] - Z[j, c]
                s += t * t
            out[i, j] = np.exp(-gamma * s)


@kernel()
def rbf_jacobian(y, Z, k, gamma):
    """``J[i, d] = d k(y, z_i) / d y[d] = -2 gamma (y[d] - z_i[d]) k_i`` (MATH §1).

    Explicit form, used by tests and the cubic reference objective; the
    batched objectives never build ``J`` but contract it on the fly
    (:func:`contract_jacobian`).
    """
    n, d = Z.shape
    J = np.empty((n, d))
    for i in range(n):
        for c in range(d):
            J[i, c] = -2.0 * gamma * (y[c] - Z[i, c]) * k[i]
    return J


@kernel()
def contract_jacobian(y, Z, k, gamma, c1, v1, c2, v2, c3, v3, use_v3, grad):
    """``grad = a^T J`` with ``a = c1 v1 + c2 v2 + c3 v3`` in O(N·d).

    ``J`` is never formed: ``sum_i a_i J[i, d] = -2 gamma (y[d] S - T[d])``
    with ``S = sum_i a_i k_i`` and ``T[d] = sum_i a_i k_i z_i[d]``.
    """
    n, d = Z.shape
    for c in range(d):
        grad[c] = 0.0
    s = 0.0
    for i in range(n):
        a = c1 * v1[i] + c2 * v2[i]
        if use_v3:
            a += c3 * v3[i]
        w = a * k[i]
        s += w
        for c in range(d):
            grad[c] += w * Z[i, c]
    for c in range(d):
        grad[c] = -2.0 * gamma * (y[c] * s - grad[c])
