"""Blocked matrix products whose rows do not depend on the blocking.

Products outside the optimiser's evaluations go through :func:`gemm_rows`:
``out = A @ M`` by one single-threaded DGEMM, with the row count padded to an
even number (``objectives.evaluate_rows`` pads its rounds the same way).
OpenBLAS computes the last row of an odd row count with its one-row tail
kernel, whose summation order differs from the main kernel's (measured here:
rows differ by ~1e-14 relative between ``m = 3`` and ``m = 4``).  With even
row counts a row's result does not depend on how many rows share the call or
where it sits in them, so predictions do not depend on the batch size or the
thread count (tests/test_hardening.py).

``np.dot(A, M, out)`` is used rather than ``out[...] = np.dot(A, M)``: the
allocating form with a slice assignment costs ~4 s of compile time per
call site.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from fastsm.config import kernel


@kernel()
def row_block(m):
    """Rows per block of the blocked GEMMs: a function of ``m`` only.

    Never of the thread count, so results are bitwise independent of it.
    """
    if m >= 2048:
        return 256
    if m >= 512:
        return 128
    return 64


@kernel()
def gemm_rows(A, M, out):
    """``out = A @ M`` (single DGEMM), padded to an even number of rows."""
    m, k = A.shape
    if m % 2 == 0:
        np.dot(A, M, out)
        return
    n = M.shape[1]
    A2 = np.empty((m + 1, k))
    for r in range(m):
        for j in range(k):
            A2[r, j] = A[r, j]
    for j in range(k):
        A2[m, j] = A[m - 1, j]
    O2 = np.empty((m + 1, n))
    np.dot(A2, M, O2)
    for r in range(m):
        for j in range(n):
            out[r, j] = O2[r, j]


@kernel(parallel=True)
def blocked_gemm(A, M, out):
    """``out = A @ M`` by fixed row blocks, one single-threaded DGEMM each.

    One thread pool (Numba's) does all the work: no contention with BLAS's
    own threads, which the callers limit to one.
    """
    m = A.shape[0]
    bs = row_block(m)
    nb = (m + bs - 1) // bs
    for b in prange(nb):
        r0 = b * bs
        r1 = min(m, r0 + bs)
        gemm_rows(A[r0:r1], M, out[r0:r1])
