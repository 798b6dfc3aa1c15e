"""A small twin GP's kernel matrices and Cholesky factors in one call (models in Cholesky form).

A KNN-local or region model (``K`` up to ``config.ROW_PRODUCTS_MAX_N`` points) is factorised for
one or a few test points.  :func:`twin_factors` forms ``K_X``, ``K_Y`` and
``K_XY = (1-a) K_X + a K_Y`` (docs/math.md §1, §6 with weights), factorises each in place
(:func:`cholesky_symmetric`) and leaves each factor ``L`` in *symmetric storage* (lower triangle
``L``, upper triangle ``L^T``, :mod:`fastsm._kernels.tri_rows`), the form its solves read: one
call without the GIL where the inverse form took eleven NumPy and LAPACK calls per model (Gram
matrices, the blend, Fortran copies, ``dpotrf``, triangular inverses, checks, symmetric storage).

The Gram entries are computed as :func:`fastsm._kernels.rbf.rbf_gram` computes them (rows of
squared distances and a vectorised exponential).  The factorisation is this module's own up to
order :data:`CHOLESKY_MAX_N` (explicit eight-lane vectors, :mod:`fastsm._kernels.simd`): at
``K = 200`` it takes ~0.09 ms where OpenBLAS's ``dpotrf`` took ~0.12 ms (docs/scale.md), as
accurate (tests/test_cholesky_form.py), and its bits depend on the matrix only, not on the BLAS
or the CPU.  Above that order LAPACK's ``dpotrf`` is the faster; it runs on the caller's BLAS
threads (call inside ``thread_limits``: one BLAS thread, deterministic) and is reached by name,
like :mod:`fastsm._kernels.gemm`'s DTRMM, so that the kernel stays cacheable.
"""

from __future__ import annotations

from typing import NamedTuple

import llvmlite.binding as llvm
import numpy as np
from numba import types
from numba.extending import get_cython_function_address

from fastsm._kernels.gemm import ptr
from fastsm._kernels.rbf import gram_upper
from fastsm._kernels.simd import vload, vmul, vsplat, vstore, vsub
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
    (the factorisation reads the upper one, :func:`cholesky_symmetric`)."""
    n = Z.shape[0]
    gram_upper(Z, gamma, K)
    for i in range(n):
        K[i, i] = 1.0 + lam / w[i] if weighted else 1.0 + lam


@kernel()
def potrf_symmetric(A):
    """Factorise the symmetric ``A = L L^T`` in place into symmetric storage by LAPACK's ``dpotrf``;
    returns LAPACK's ``info``.

    A C-ordered symmetric matrix reads as itself in Fortran order: ``dpotrf("L")`` writes ``L`` into
    the Fortran lower triangle, which is the C upper triangle, transposed (``A[j, i] = L[i, j]``,
    the memory of a Fortran-ordered ``L``: the same call on the same bytes as
    every Cholesky factor of fastsm above ``CHOLESKY_MAX_N``: the one LAPACK binding); the C lower
    triangle is then filled with ``L``.
    With ``info != 0`` (the leading minor of that order is not positive) ``A`` is meaningless.
    """
    n = A.shape[0]
    flags = np.empty(1, dtype=np.int8)
    flags[0] = _L
    dims = np.empty(2, dtype=np.intc)
    dims[0] = n
    dims[1] = 0
    _dpotrf(ptr(flags, 0), ptr(dims, 0), ptr(A, 0), ptr(dims, 0), ptr(dims, 1))
    info = dims[1]
    if info == 0:
        _mirror_upper(A)
    return info


@kernel()
def _mirror_upper(A):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] = A[j, i]


@kernel(inline=True)
def _tile(P, r0, n, a0, i, j):
    """Rows ``i .. i+7`` (flat offset ``a0`` of row ``i``) at columns ``j .. j+7``, each minus the
    eight panel rows' terms ``U[r, i+t] U[r, j..j+7]`` (row ``r`` at flat offset ``r0 + k n``), in
    panel order, one multiply and one subtraction each."""
    a1 = a0 + n
    a2 = a1 + n
    a3 = a2 + n
    a4 = a3 + n
    a5 = a4 + n
    a6 = a5 + n
    a7 = a6 + n
    c0, c1, c2, c3 = vload(P, a0 + j), vload(P, a1 + j), vload(P, a2 + j), vload(P, a3 + j)
    c4, c5, c6, c7 = vload(P, a4 + j), vload(P, a5 + j), vload(P, a6 + j), vload(P, a7 + j)
    r = r0
    for _ in range(8):
        v = vload(P, r + j)
        c0 = vsub(c0, vmul(vsplat(P[r + i]), v))
        c1 = vsub(c1, vmul(vsplat(P[r + i + 1]), v))
        c2 = vsub(c2, vmul(vsplat(P[r + i + 2]), v))
        c3 = vsub(c3, vmul(vsplat(P[r + i + 3]), v))
        c4 = vsub(c4, vmul(vsplat(P[r + i + 4]), v))
        c5 = vsub(c5, vmul(vsplat(P[r + i + 5]), v))
        c6 = vsub(c6, vmul(vsplat(P[r + i + 6]), v))
        c7 = vsub(c7, vmul(vsplat(P[r + i + 7]), v))
        r += n
    return c0, c1, c2, c3, c4, c5, c6, c7


@kernel(inline=True)
def _store8(P, a0, n, j, c):
    c0, c1, c2, c3, c4, c5, c6, c7 = c
    vstore(P, a0 + j, c0)
    vstore(P, a0 + n + j, c1)
    vstore(P, a0 + 2 * n + j, c2)
    vstore(P, a0 + 3 * n + j, c3)
    vstore(P, a0 + 4 * n + j, c4)
    vstore(P, a0 + 5 * n + j, c5)
    vstore(P, a0 + 6 * n + j, c6)
    vstore(P, a0 + 7 * n + j, c7)


@kernel()
def _update_rows8(P, n, r0, i):
    """The trailing update of rows ``i .. i+7`` (``n - i >= 8``) by the eight panel rows at ``r0``.

    Vectors from column ``i`` on: the entries of rows ``i+1 .. i+7`` left of their diagonal are in
    the lower triangle, scratch until it is filled.  A last partial vector is taken as the vector
    ending at column ``n``, computed from the entries before the others are stored: where it
    overlaps, it stores the same values (lane-wise operations on the same inputs)."""
    a0 = i * n
    e = i + (n - i) // 8 * 8
    if e == n:
        for j in range(i, n, 8):
            _store8(P, a0, n, j, _tile(P, r0, n, a0, i, j))
        return
    last = _tile(P, r0, n, a0, i, n - 8)
    for j in range(i, e, 8):
        _store8(P, a0, n, j, _tile(P, r0, n, a0, i, j))
    _store8(P, a0, n, n - 8, last)


@kernel()
def _axpy_row(P, n, a, b, u, j0):
    """``P[a+j] -= u * P[b+j]`` for ``j = j0 .. n-1`` (rows at flat offsets ``a`` and ``b``), as
    :func:`_update_rows8` takes its vectors (a last partial one ending at column ``n``; entries
    left of ``j0`` may change where ``n - j0 < 8``: callers pass lower-triangle scratch there)."""
    if n < 8:
        for j in range(j0, n):
            P[a + j] -= u * P[b + j]
        return
    us = vsplat(u)
    e = j0 + (n - j0) // 8 * 8
    last = vsub(vload(P, a + n - 8), vmul(us, vload(P, b + n - 8)))  # before the loop's stores
    for j in range(j0, e, 8):
        vstore(P, a + j, vsub(vload(P, a + j), vmul(us, vload(P, b + j))))
    if e < n:
        vstore(P, a + n - 8, last)


@kernel()
def cholesky_symmetric(A):
    """Factorise the symmetric ``A = L L^T`` in place into symmetric storage; returns ``info`` as
    LAPACK's ``dpotrf`` does (0, or the order of the first leading minor that is not positive:
    ``A`` is then meaningless).

    Reads the upper triangle of ``A`` (``U = L^T`` by rows); the strict lower triangle is scratch
    and ends as ``L``.  Right-looking, eight rows of ``U`` per step: each row's pivot, square root
    and scaling by its reciprocal (as LAPACK's ``dpotf2``) and the updates of the step's later rows,
    then the trailing rows eight at a time by :func:`_update_rows8` (:mod:`fastsm._kernels.simd`:
    LLVM leaves these loops scalar otherwise).  Every entry takes its terms one at a time in row
    order, one multiply and one subtraction each: the bits depend on ``A`` only, not on the BLAS,
    the CPU or the thread count.  Orders above ``CHOLESKY_MAX_N`` go to :func:`potrf_symmetric`
    (``dpotrf`` is the faster there; its bits are the BLAS's).
    """
    n = A.shape[0]
    if n > CHOLESKY_MAX_N:
        return potrf_symmetric(A)
    P = A.reshape(n * n)
    for k0 in range(0, n, 8):
        k1 = min(n, k0 + 8)
        for k in range(k0, k1):
            d = P[k * n + k]
            if not d > 0.0:
                return k + 1
            r = np.sqrt(d)
            P[k * n + k] = r
            inv = 1.0 / r
            row = P[k * n + k + 1:k * n + n]
            for j in range(row.shape[0]):
                row[j] *= inv
            for s in range(k + 1, k1):
                _axpy_row(P, n, s * n, k * n, P[k * n + s], s)
        i = k1
        if k1 - k0 == 8:
            while n - i >= 8:
                _update_rows8(P, n, k0 * n, i)
                i += 8
        while i < n:
            for r in range(k0, k1):
                _axpy_row(P, n, i * n, r * n, P[r * n + i], i)
            i += 1
    _mirror_upper(A)
    return 0


#: Orders up to which :func:`cholesky_symmetric` factorises by its own loops (above: ``dpotrf``).
CHOLESKY_MAX_N = 400


class TwinKernels(NamedTuple):
    """The kernels of a twin-GP fit as :func:`twin_factors` reads them."""

    gamma_x: float
    gamma_y: float
    lambda_x: float
    lambda_y: float
    alpha: float  # K_XY = (1 - alpha) K_X + alpha K_Y
    weighted: bool  # noise lambda / w_i


@kernel()
def twin_factors(X, Y, kern, w, S, logdet, info):
    """``S[0], S[1], S[2]``: the Cholesky factors of ``K_X``, ``K_Y``, ``K_XY`` in symmetric storage, for the
    kernels :class:`TwinKernels` ``kern``.

    ``logdet[k] = 2 sum_i log L_ii`` and ``info[k]`` (as LAPACK's, 0 on success) per factor;
    ``w`` the weights if ``kern.weighted`` (docs/math.md §6).  ``K_XY``'s entries are ``(1-a) K_X + a K_Y``
    computed as NumPy computes the blend (two products, one sum).  Only the upper triangles are
    formed (:func:`cholesky_symmetric` reads no more and fills the lower ones).
    """
    gram_into(X, kern.gamma_x, kern.lambda_x, w, kern.weighted, S[0])
    gram_into(Y, kern.gamma_y, kern.lambda_y, w, kern.weighted, S[1])
    n = X.shape[0]
    alpha = kern.alpha
    b = 1.0 - alpha
    for i in range(n):
        x, y, xy = S[0, i, i:], S[1, i, i:], S[2, i, i:]
        for j in range(n - i):
            xy[j] = b * x[j] + alpha * y[j]
    for k in range(3):
        info[k] = cholesky_symmetric(S[k])
        t = 0.0
        if info[k] == 0:
            for i in range(n):
                t += np.log(S[k, i, i])
        logdet[k] = 2.0 * t
