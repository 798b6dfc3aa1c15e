"""LAPACK's Cholesky factorisation and triangular inverse without the GIL.

SciPy's ``scipy.linalg.lapack.dpotrf`` / ``dpotri`` wrappers hold the GIL
(measured: two Python threads factorising 1000×1000 matrices take as long as
one thread doing both).  The same routines, reached through
``scipy.linalg.cython_lapack`` and called by ``ctypes`` (which releases the
GIL), run concurrently — so independent factorisations (local models, one
per test-point group) use every core while each stays single-threaded and
bitwise deterministic.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba.extending import get_cython_function_address

from fastsm import config
from fastsm._kernels.triangular import tri_inverse
from fastsm.config import kernel

_int_p = ctypes.POINTER(ctypes.c_int)
_dbl_p = ctypes.POINTER(ctypes.c_double)
_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_char_p, _int_p, _dbl_p, _int_p, _int_p)
_dpotrf = _PROTO(get_cython_function_address("scipy.linalg.cython_lapack", "dpotrf"))
_TRTRI = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, _int_p, _dbl_p, _int_p, _int_p)
_dtrtri = _TRTRI(get_cython_function_address("scipy.linalg.cython_lapack", "dtrtri"))


def potrf_trtri(K: np.ndarray, want_L: bool = True) -> tuple[np.ndarray | None, np.ndarray, float, int]:
    """``(L, W, log|K|, info)``: the lower Cholesky factor ``K = L L^T`` and ``W = L^-1``.

    ``L`` by LAPACK's ``dpotrf``; ``W`` by :func:`~fastsm._kernels.triangular.tri_inverse` up
    to order ``config.TRI_INVERSE_MAX_N``, by ``dtrtri`` beyond.

    Only the lower triangle of ``K`` is read; ``L`` and ``W`` are C-contiguous with zeros above
    the diagonal.  On failure (``info != 0``, the leading minor of that order is not positive)
    ``L`` and ``W`` are meaningless.  ``want_L=False``: ``L`` is not formed (``None``; a pass over
    the matrix saved where only ``W`` is used).  Call with BLAS limited to one thread for results
    independent of the thread count.
    """
    n = K.shape[0]
    a = np.array(K, dtype=np.float64, order="F", copy=True)
    nn, info = ctypes.c_int(n), ctypes.c_int(0)
    _dpotrf(b"L", ctypes.byref(nn), a.ctypes.data_as(_dbl_p), ctypes.byref(nn), ctypes.byref(info))
    if info.value != 0:
        return a, a, np.nan, info.value
    logdet = 2.0 * float(np.sum(np.log(np.diag(a))))
    if n <= config.TRI_INVERSE_MAX_N:
        return (lower_part(a.T) if want_L else None), tri_inverse(a), logdet, 0
    L = lower_part(a.T) if want_L else None
    # dtrtri reads and writes the lower triangle only: K's values left above it change nothing
    info2 = ctypes.c_int(0)
    _dtrtri(b"L", b"N", ctypes.byref(nn), a.ctypes.data_as(_dbl_p), ctypes.byref(nn), ctypes.byref(info2))
    if info2.value != 0:  # pragma: no cover - potrf succeeded: the diagonal is positive
        return L, a, np.nan, n + info2.value
    return L, lower_part(a.T), logdet, 0


@kernel()
def lower_part(At):
    """The lower triangle of ``A`` (zeros above), C-contiguous, from ``At = A^T`` (a Fortran array's
    C view): one pass, where ``np.tril`` of a Fortran array costs five times as long."""
    n = At.shape[0]
    L = np.zeros((n, n))
    for j in range(n):
        for i in range(j, n):
            L[i, j] = At[j, i]
    return L


def triangular_inverse(L: np.ndarray) -> np.ndarray:
    """``W = L^-1`` of a lower-triangular ``L`` (only its lower triangle is read), C-contiguous with
    zeros above the diagonal: :func:`potrf_trtri`'s inversion of an existing factor (the inverse
    form of a model kept in Cholesky form).  Call with BLAS limited to one thread."""
    n = L.shape[0]
    a = np.array(L, dtype=np.float64, order="F", copy=True)
    if n <= config.TRI_INVERSE_MAX_N:
        return tri_inverse(a)
    nn, info = ctypes.c_int(n), ctypes.c_int(0)
    _dtrtri(b"L", b"N", ctypes.byref(nn), a.ctypes.data_as(_dbl_p), ctypes.byref(nn), ctypes.byref(info))
    return lower_part(a.T)
