"""Triangular products of whole row blocks for tests and benchmarks, by the kernels' own
:func:`fastsm._kernels.tri_rows.run_products` (one call, this thread)."""

from __future__ import annotations

import numpy as np

from fastsm._kernels.tri_rows import MULTIPLY_PLAN, SOLVE_PLAN, run_products, symmetric_storage


def tri(A: np.ndarray, M: np.ndarray, forward: bool, *, solve: bool = False, stored: bool = False) -> np.ndarray:
    """Each row ``x`` of ``A`` times a lower-triangular ``M``: ``M x`` (``forward``) or ``M^T x``; with
    ``solve`` ``M^-1 x`` or ``M^-T x`` (substitutions).  Only the lower triangle of ``M`` is read, unless
    ``stored``: ``M`` is then in symmetric storage already."""
    m, n = A.shape
    if M.shape != (n, n):
        raise ValueError(f"tri needs a square factor with {n} rows, got {M.shape}")
    work = np.zeros((2, m, n))
    work[0] = A
    M = np.ascontiguousarray(M, dtype=np.float64)
    S = M if stored else symmetric_storage(M)
    run_products(work, S, S, np.array([[0, 0, 1 if forward else 0, 1]], dtype=np.int64), m,
                 SOLVE_PLAN if solve else MULTIPLY_PLAN)
    return work[1]
