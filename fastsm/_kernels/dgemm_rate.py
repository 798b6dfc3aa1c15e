"""The DGEMM rate of this machine by single-threaded DGEMM tiles on Numba threads: the yardstick
``python -m fastsm bench`` compares the products' rate with (:func:`fastsm.cli.bench.dgemm_gflops`).

The tiles are :data:`TILE` rows of the product (the last one shorter), full width, each one DGEMM
call with its operands in place.  The DGEMM is reached through Numba's own cacheable binding
(``numba_xxgemm``, what ``np.dot`` calls), so that operands keep their strides: ``np.dot`` accepts
only contiguous outputs.
"""

from __future__ import annotations

import numpy as np
from numba import prange, types
from numba.np.linalg import ensure_blas

from fastsm._kernels.linalg import ptr
from fastsm.config import kernel

ensure_blas()
_XXGEMM_SIG = types.intc(
    types.char, types.char, types.char,                      # kind, transa, transb
    types.intp, types.intp, types.intp,                      # m, n, k
    types.CPointer(types.float64),                           # alpha
    types.CPointer(types.float64), types.intp,               # a, lda
    types.CPointer(types.float64), types.intp,               # b, ldb
    types.CPointer(types.float64),                           # beta
    types.CPointer(types.float64), types.intp,               # c, ldc
)
_xxgemm = types.ExternalFunction("numba_xxgemm", _XXGEMM_SIG)
_D = ord("d")
_N = ord("N")


@kernel(internal=True)
def gemm_tile(K, r0, h, M, P, scal):
    """``P[r0:r0+h] = K[r0:r0+h] @ M``: one DGEMM call, operands in place.

    ``K``, ``M`` and ``P`` are C-contiguous with ``M.shape[0]`` = ``K``'s columns; ``scal = [1.0,
    0.0]`` (alpha, beta).  In column-major terms the call is ``P^T = M^T K^T`` with leading
    dimensions the row lengths.
    """
    n = M.shape[0]
    ldk = K.shape[1]
    ldp = P.shape[1]
    _xxgemm(_D, _N, _N, M.shape[1], h, n, ptr(scal, 0), ptr(M, 0), M.shape[1], ptr(K, r0 * ldk), ldk,
            ptr(scal, 1), ptr(P, r0 * ldp), ldp)


#: Rows per DGEMM tile of :func:`tiled_dgemm`.
TILE = 256


@kernel(parallel=True)
def tiled_dgemm(K, M, P):
    """``P = K @ M`` by tiles of :data:`TILE` rows, one task each."""
    m = K.shape[0]
    nt = (m + TILE - 1) // TILE
    scal = np.array([1.0, 0.0])
    for i in prange(nt):
        gemm_tile(K, i * TILE, min(TILE, m - i * TILE), M, P, scal)
