"""Dense linear algebra on small matrices by plain loops: Cholesky factors and solves of the
``dy × dy`` Hessians (:mod:`fastsm._kernels.hessian`), the KLIEP polish's Newton systems
(:mod:`fastsm._kernels.kliep_polish`) and the O(N^3) reference form (:mod:`fastsm._kernels.cubic`).
Loops rather than ``np.linalg`` keep their compile time below a second."""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def small_cholesky(M):
    """Lower Cholesky factor of an SPD matrix by plain loops (reference path).

    Loops rather than ``np.linalg.cholesky`` keep the compile time of the
    O(N^3) reference objective below a second.  Returns ``(L, ok)``.
    """
    n = M.shape[0]
    L = np.zeros((n, n))
    for j in range(n):
        s = M[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            return L, False
        L[j, j] = np.sqrt(s)
        for i in range(j + 1, n):
            t = M[i, j]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / L[j, j]
    return L, True


@kernel()
def small_cholesky_solve(L, b):
    n = L.shape[0]
    z = np.empty(n)
    for i in range(n):
        t = b[i]
        for k in range(i):
            t -= L[i, k] * z[k]
        z[i] = t / L[i, i]
    for i in range(n - 1, -1, -1):
        t = z[i]
        for k in range(i + 1, n):
            t -= L[k, i] * z[k]
        z[i] = t / L[i, i]
    return z
