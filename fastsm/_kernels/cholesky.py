"""A small twin GP's kernel matrices and Cholesky factors in one call (models in Cholesky form).

A KNN-local or region model (``K`` up to ``config.ROW_PRODUCTS_MAX_N`` points) is factorised for
one or a few test points.  :func:`twin_factors` forms ``K_X``, ``K_Y`` and
``K_XY = (1-a) K_X + a K_Y`` (MATH §1, §6 with weights), factorises each by LAPACK's ``dpotrf``
in place and leaves each factor ``L`` in *symmetric storage* (lower triangle ``L``, upper
triangle ``L^T``, :mod:`fastsm._kernels.tri_rows`), the form its solves read: one call without
the GIL where the inverse form took eleven NumPy and LAPACK calls per model (Gram matrices,
the blend, Fortran copies, ``dpotrf``, triangular inverses, checks, symmetric storage).

The Gram entries are computed as :func:`fastsm._kernels.rbf.rbf_gram` computes them (rows of
squared distances and a vectorised exponential), so a factor here is bitwise the ``dpotrf``
factor of the inverse form.  ``dpotrf`` runs on the
caller's BLAS threads: call inside ``thread_limits`` (one BLAS thread, deterministic).

``dpotrf`` is reached by name, like :mod:`fastsm._kernels.gemm`'s DTRMM, so that the kernel
stays cacheable.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
from numba import types
from numba.extending import get_cython_function_address

from fastsm._kernels.gemm import _ptr
from fastsm._kernels.rbf import gram_upper
from fastsm.config import kernel

llvm.add_symbol("fastsm_dpotrf", get_cython_function_address("scipy.linalg.cython_lapack", "dpotrf"))
_POTRF_SIG = types.void(types.CPointer(types.int8), types.CPointer(types.intc), types.CPointer(types.float64),
                        types.CPointer(types.intc), types.CPointer(types.intc))
_dpotrf = types.ExternalFunction("fastsm_dpotrf", _POTRF_SIG)
_L = ord("L")


@kernel()
def gram_into(Z, gamma, lam, w, weighted, K):
    """The upper triangle and diagonal of ``K = K0 + lam I`` (or ``K0 + lam W^-1`` if ``weighted``:
    noise ``lam / w_i``), row by row as :func:`~fastsm._kernels.rbf.rbf_gram` (and
    :func:`fastsm.tgp.fitting.weighted_gram`) compute it; ``K``'s strict lower triangle is not written
    (``dpotrf`` reads the upper one, :func:`potrf_symmetric`)."""
    n = Z.shape[0]
    gram_upper(Z, np.ascontiguousarray(Z.T), gamma, K)
    for i in range(n):
        K[i, i] = 1.0 + lam / w[i] if weighted else 1.0 + lam


@kernel()
def potrf_symmetric(A):
    """Factorise the symmetric ``A = L L^T`` in place into symmetric storage; returns LAPACK's ``info``.

    A C-ordered symmetric matrix reads as itself in Fortran order: ``dpotrf("L")`` writes ``L`` into
    the Fortran lower triangle, which is the C upper triangle, transposed (``A[j, i] = L[i, j]``,
    the memory of a Fortran-ordered ``L``: the same call on the same bytes as
    :func:`fastsm._lapack.potrf_trtri`); the C lower triangle is then filled with ``L``.
    With ``info != 0`` (the leading minor of that order is not positive) ``A`` is meaningless.
    """
    n = A.shape[0]
    flags = np.empty(1, dtype=np.int8)
    flags[0] = _L
    dims = np.empty(2, dtype=np.intc)
    dims[0] = n
    dims[1] = 0
    _dpotrf(_ptr(flags, 0), _ptr(dims, 0), _ptr(A, 0), _ptr(dims, 0), _ptr(dims, 1))
    info = dims[1]
    if info == 0:
        for i in range(n):
            for j in range(i):
                A[i, j] = A[j, i]
    return info


@kernel()
def twin_factors(X, Y, gamma_x, gamma_y, lambda_x, lambda_y, alpha, w, weighted, S, logdet, info):
    """``S[0], S[1], S[2]``: the Cholesky factors of ``K_X``, ``K_Y``, ``K_XY`` in symmetric storage.

    ``logdet[k] = 2 sum_i log L_ii`` and ``info[k]`` (LAPACK's, 0 on success) per factor;
    ``w`` the weights if ``weighted`` (MATH §6).  ``K_XY``'s entries are ``(1-a) K_X + a K_Y``
    computed as NumPy computes the blend (two products, one sum).  Only the upper triangles are
    formed (``dpotrf`` reads no more; :func:`potrf_symmetric` then fills the lower ones).
    """
    gram_into(X, gamma_x, lambda_x, w, weighted, S[0])
    gram_into(Y, gamma_y, lambda_y, w, weighted, S[1])
    n = X.shape[0]
    b = 1.0 - alpha
    for i in range(n):
        for j in range(i, n):
            S[2, i, j] = b * S[0, i, j] + alpha * S[1, i, j]
    for k in range(3):
        info[k] = potrf_symmetric(S[k])
        t = 0.0
        if info[k] == 0:
            for i in range(n):
                t += np.log(S[k, i, i])
        logdet[k] = 2.0 * t
