"""Dense linear algebra on small matrices by plain loops, the one home of fastsm's own small Cholesky
factorisation (#54): Gaussian divergences and their mixtures, MAXDET's Newton systems, and the
factors and solves of the
``dy × dy`` Hessians (:mod:`fastsm._kernels.hessian`), the KLIEP polish's Newton systems
(:mod:`fastsm._kernels.kliep_polish`) and the O(N^3) reference form (:mod:`fastsm._kernels.cubic`).
Loops rather than ``np.linalg`` keep their compile time below a second."""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def cholesky(A, L):
    """Lower Cholesky factor of ``A`` into ``L``; returns ``(ok, log|A|)``."""
    n = A.shape[0]
    logdet = 0.0
    for i in range(n):
        for j in range(i + 1):
            s = A[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not s > 0.0:
                    return False, 0.0
                L[i, i] = np.sqrt(s)
                logdet += 2.0 * np.log(L[i, i])
            else:
                L[i, j] = s / L[j, j]
        for j in range(i + 1, n):
            L[i, j] = 0.0
    return True, logdet


@kernel()
def forward_solve(L, b, x):
    """Solve ``L x = b`` (lower triangular)."""
    n = L.shape[0]
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s / L[i, i]


@kernel()
def backward_solve(L, b, x):
    """Solve ``L^T x = b``."""
    n = L.shape[0]
    for i in range(n - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, n):
            s -= L[k, i] * x[k]
        x[i] = s / L[i, i]


@kernel()
def cholesky_solve(L, b):
    """``A^-1 b`` from the Cholesky factor ``L`` of ``A``: :func:`forward_solve`, then :func:`backward_solve`."""
    z = np.empty(b.shape[0])
    forward_solve(L, b, z)
    x = np.empty(b.shape[0])
    backward_solve(L, z, x)
    return x
