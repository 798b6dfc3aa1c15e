"""LAPACK's Cholesky factorisation and SPD inverse without the GIL.

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

_int_p = ctypes.POINTER(ctypes.c_int)
_dbl_p = ctypes.POINTER(ctypes.c_double)
_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_char_p, _int_p, _dbl_p, _int_p, _int_p)
_dpotrf = _PROTO(get_cython_function_address("scipy.linalg.cython_lapack", "dpotrf"))
_dpotri = _PROTO(get_cython_function_address("scipy.linalg.cython_lapack", "dpotri"))


def potrf_potri(K: np.ndarray) -> tuple[np.ndarray, float, int, int]:
    """``(K^-1, log|K|, info_potrf, info_potri)`` of a symmetric matrix by lower Cholesky.

    Only the lower triangle of ``K`` is read.  On failure (``info != 0``)
    the inverse is meaningless.  Call with BLAS limited to one thread for
    results independent of the thread count.
    """
    n = K.shape[0]
    a = np.array(K, dtype=np.float64, order="F", copy=True)
    nn, info = ctypes.c_int(n), ctypes.c_int(0)
    ptr = a.ctypes.data_as(_dbl_p)
    _dpotrf(b"L", ctypes.byref(nn), ptr, ctypes.byref(nn), ctypes.byref(info))
    if info.value != 0:
        return a, np.nan, info.value, 0
    logdet = 2.0 * float(np.sum(np.log(np.diag(a))))
    info2 = ctypes.c_int(0)
    _dpotri(b"L", ctypes.byref(nn), ptr, ctypes.byref(nn), ctypes.byref(info2))
    inv = np.tril(a)
    inv += np.tril(inv, -1).T
    return np.ascontiguousarray(inv), logdet, 0, info2.value
