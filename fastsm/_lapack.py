"""LAPACK's triangular inverse without the GIL (the inverse form's ``W = L^-1`` and leave-one-out's columns of it).

SciPy's ``scipy.linalg.lapack`` wrappers hold the GIL (measured: two Python threads factorising
1000×1000 matrices take as long as one thread doing both).  The same routines, reached through
``scipy.linalg.cython_lapack`` (``dtrtri`` here by ``ctypes``, which releases the GIL; ``dpotrf``
by the one binding, :func:`fastsm._kernels.linalg.potrf_symmetric`, a kernel without the GIL), run
concurrently, each single-threaded and bitwise deterministic.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba.extending import get_cython_function_address

from fastsm.config import kernel

_int_p = ctypes.POINTER(ctypes.c_int)
_dbl_p = ctypes.POINTER(ctypes.c_double)
_TRTRI = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, _int_p, _dbl_p, _int_p, _int_p)
_dtrtri = _TRTRI(get_cython_function_address("scipy.linalg.cython_lapack", "dtrtri"))


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


def _dtrtri_lower(a: np.ndarray) -> None:
    """LAPACK's ``dtrtri`` on the lower triangle of the Fortran-ordered ``a``, in place (GIL released)."""
    n = a.shape[0]
    nn, info = ctypes.c_int(n), ctypes.c_int(0)
    _dtrtri(b"L", b"N", ctypes.byref(nn), a.ctypes.data_as(_dbl_p), ctypes.byref(nn), ctypes.byref(info))
    if info.value != 0:
        raise ValueError(f"the factor is singular (zero pivot at row {info.value})")


def inverse_transposed(L: np.ndarray) -> np.ndarray:
    """``(L^-1)^T`` of a lower-triangular ``L`` (only its lower triangle is read: symmetric storage
    serves), C-contiguous, upper triangular: row ``h`` holds column ``h`` of ``W = L^-1``.  LAPACK's
    ``dtrtri`` on a Fortran copy, whose C view is the transpose.  Call with BLAS limited to one thread."""
    a = np.array(L, dtype=np.float64, order="F", copy=True)
    _dtrtri_lower(a)
    return np.triu(a.T)


def triangular_inverse(L: np.ndarray) -> np.ndarray:
    """``W = L^-1`` of a lower-triangular ``L`` (only its lower triangle is read), C-contiguous with
    zeros above the diagonal, by LAPACK's ``dtrtri``: :func:`fastsm.tgp.fitting.inverse_parts`'s inversion of a model's
    factor (the inverse form: :func:`fastsm.tgp.views.inverse_form` and models pickled before #55; no
    model fastsm fits inverts its factors).  Call with BLAS limited to one thread."""
    a = np.array(L, dtype=np.float64, order="F", copy=True)
    _dtrtri_lower(a)
    return lower_part(a.T)
