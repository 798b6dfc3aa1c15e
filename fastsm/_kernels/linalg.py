"""Dense linear algebra: fastsm's one Cholesky factorisation of its own (#54), its substitutions,
the one LAPACK binding (``dpotrf``, :func:`potrf_symmetric`) and the one BLAS binding (``dgemm``,
:func:`at_b` and :func:`a_bt`).

:func:`factor_symmetric` factorises in place into symmetric storage (lower triangle ``L``, upper
``L^T``), eight rows at a time with explicit eight-lane vectors (:mod:`fastsm._kernels.simd`):
the local models' twin factors (:func:`fastsm._kernels.cholesky.twin_factors`) and, through
:func:`cholesky`, the small systems — Gaussian divergences and their mixtures, MAXDET's Newton
systems, the KLIEP polish's Newton systems (:mod:`fastsm._kernels.kliep_polish`) and the O(N^3)
reference form (:mod:`fastsm._kernels.cubic`): their bits depend on the matrix and on whether the
compile target fuses multiply-adds (:mod:`fastsm._kernels.fma`), not on the BLAS.
:func:`potrf_symmetric` (LAPACK) factorises the global models' matrices, orders
above ``CHOLESKY_MAX_N``, and the optimiser's ``dy × dy`` Hessians
(:func:`fastsm._kernels.curvature.seed_inverse`), where an external call compiles in a fraction
of the time of the loops.  The BLAS products serve the exact Hessian's ``dy × dy`` Gram matrices
(:mod:`fastsm._kernels.hessian`): ``np.dot`` compiled four of Numba's implementations there (0.3 s of a
cold start)."""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
from numba import types
from numba.core.extending import intrinsic
from numba.extending import get_cython_function_address

from fastsm._kernels.fma import msub, vmsub
from fastsm._kernels.simd import vload, vsplat, vstore
from fastsm.config import kernel

# LAPACK's dpotrf, reached by name so that the kernels calling it stay cacheable: the symbol is
# registered in this process before any kernel is compiled or loaded from the cache.
llvm.add_symbol("fastsm_dpotrf", get_cython_function_address("scipy.linalg.cython_lapack", "dpotrf"))
_POTRF_SIG = types.void(types.CPointer(types.int8), types.CPointer(types.intc), types.CPointer(types.float64),
                        types.CPointer(types.intc), types.CPointer(types.intc))
_dpotrf = types.ExternalFunction("fastsm_dpotrf", _POTRF_SIG)
_L = ord("L")
# BLAS's dgemm, reached by name as dpotrf is: C = alpha op(A) op(B) + beta C, column-major.
llvm.add_symbol("fastsm_dgemm", get_cython_function_address("scipy.linalg.cython_blas", "dgemm"))
_GEMM_SIG = types.void(types.CPointer(types.int8), types.CPointer(types.int8), types.CPointer(types.intc),
                       types.CPointer(types.intc), types.CPointer(types.intc), types.CPointer(types.float64),
                       types.CPointer(types.float64), types.CPointer(types.intc), types.CPointer(types.float64),
                       types.CPointer(types.intc), types.CPointer(types.float64), types.CPointer(types.float64),
                       types.CPointer(types.intc))
_dgemm = types.ExternalFunction("fastsm_dgemm", _GEMM_SIG)
_N, _T = ord("N"), ord("T")


@intrinsic
def ptr(typingctx, arr, offset):
    """Pointer to element ``offset`` of a C-contiguous array's data (for a BLAS or LAPACK call)."""
    sig = types.CPointer(arr.dtype)(arr, types.intp)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.gep(ary.data, [args[1]])

    return sig, codegen


@intrinsic
def shift(typingctx, p, offset):
    """The pointer ``p`` moved by ``offset`` elements (pointer arithmetic for a C function's arguments)."""
    sig = p(p, types.intp)

    def codegen(context, builder, signature, args):
        return builder.gep(args[0], [args[1]])

    return sig, codegen


@kernel()
def potrf_symmetric(A):
    """Factorise the symmetric ``A = L L^T`` in place into symmetric storage by LAPACK's ``dpotrf``;
    returns LAPACK's ``info``.

    A C-ordered symmetric matrix reads as itself in Fortran order: ``dpotrf("L")`` writes ``L`` into
    the Fortran lower triangle, which is the C upper triangle, transposed (``A[j, i] = L[i, j]``,
    the memory of a Fortran-ordered ``L``: the same call on the same bytes as
    every Cholesky factor of fastsm above ``CHOLESKY_MAX_N``: the one LAPACK binding); the C lower
    triangle is then filled with ``L``.  Its bits are the BLAS's (one BLAS thread: deterministic).
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
        mirror_upper(A)
    return info


@kernel(internal=True)
def _gemm(ta, tb, dims, X, Y, C):
    """BLAS's ``C = op(X) op(Y)`` in column-major terms, ``dims = (m, n, k, ldx, ldy, ldc)``; ``X``, ``Y``
    and ``C``: pointers, ``ta`` and ``tb`` int64 (one signature for every call: ``_N`` and ``_T`` as they
    are would type as two literals)."""
    flags = np.empty(2, dtype=np.int8)
    flags[0] = ta
    flags[1] = tb
    scal = np.empty(2)
    scal[0] = 1.0
    scal[1] = 0.0
    d = np.empty(6, dtype=np.intc)
    for i in range(6):
        d[i] = dims[i]
    _dgemm(ptr(flags, 0), ptr(flags, 1), ptr(d, 0), ptr(d, 1), ptr(d, 2), ptr(scal, 0), X, ptr(d, 3), Y,
           ptr(d, 4), ptr(scal, 1), C, ptr(d, 5))


@kernel(inline=True)
def at_b(A, B, C):
    """``C = A^T B`` (``A``: k × m, ``B``: k × p, ``C``: m × p; rows contiguous) by BLAS's ``dgemm``.
    Its bits are the BLAS's (one BLAS thread: deterministic)."""
    k, m = A.shape
    p = B.shape[1]  # column-major: C^T (p × m) = B^T A, the memory of B^T and of A^T
    _gemm(np.int64(_N), np.int64(_T), (p, m, k, B.strides[0] // 8, A.strides[0] // 8, C.strides[0] // 8),
          ptr(B, 0), ptr(A, 0), ptr(C, 0))


@kernel(inline=True)
def a_bt(A, B, C):
    """``C = A B^T`` (``A``: m × k, ``B``: p × k, ``C``: m × p; rows contiguous) by BLAS's ``dgemm``."""
    m, k = A.shape
    p = B.shape[0]  # column-major: C^T (p × m) = B A^T, the memory of B^T and of A^T
    _gemm(np.int64(_T), np.int64(_N), (p, m, k, B.strides[0] // 8, A.strides[0] // 8, C.strides[0] // 8),
          ptr(B, 0), ptr(A, 0), ptr(C, 0))


@kernel()
def cholesky(A, L):
    """Lower Cholesky factor of ``A`` (its lower triangle is read) into ``L`` (C-contiguous, upper
    triangle zero); returns ``(ok, log|A|)``.  By :func:`factor_symmetric`."""
    n = A.shape[0]
    for i in range(n):
        for j in range(i + 1):
            L[i, j] = A[i, j]
            L[j, i] = A[i, j]
    if factor_symmetric(L) != 0:
        return False, 0.0
    logdet = 0.0
    for i in range(n):
        logdet += 2.0 * np.log(L[i, i])
        for j in range(i + 1, n):
            L[i, j] = 0.0
    return True, logdet


@kernel(internal=True)
def forward_solve(L, b, x):
    """Solve ``L x = b`` (lower triangular)."""
    n = L.shape[0]
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * x[k]
        x[i] = s / L[i, i]


@kernel(internal=True)
def backward_solve(L, b, x):
    """Solve ``L^T x = b``."""
    n = L.shape[0]
    for i in range(n - 1, -1, -1):
        s = b[i]
        for k in range(i + 1, n):
            s -= L[k, i] * x[k]
        x[i] = s / L[i, i]


@kernel(internal=True)
def cholesky_solve(L, b):
    """``A^-1 b`` from the Cholesky factor ``L`` of ``A``: :func:`forward_solve`, then :func:`backward_solve`."""
    z = np.empty(b.shape[0])
    forward_solve(L, b, z)
    x = np.empty(b.shape[0])
    backward_solve(L, z, x)
    return x


@kernel(internal=True)
def mirror_upper(A):
    """``A``'s strict lower triangle from its upper one."""
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] = A[j, i]


@kernel(inline=True)
def _load8(P, a0, n, j):
    """Rows ``i .. i+7`` (flat offset ``a0`` of row ``i``) at columns ``j .. j+7``: eight vectors."""
    return (vload(P, a0 + j), vload(P, a0 + n + j), vload(P, a0 + 2 * n + j), vload(P, a0 + 3 * n + j),
            vload(P, a0 + 4 * n + j), vload(P, a0 + 5 * n + j), vload(P, a0 + 6 * n + j), vload(P, a0 + 7 * n + j))


@kernel(inline=True)
def _store8(P, a0, n, j, c):
    """:func:`_load8`'s inverse."""
    c0, c1, c2, c3, c4, c5, c6, c7 = c
    vstore(P, a0 + j, c0)
    vstore(P, a0 + n + j, c1)
    vstore(P, a0 + 2 * n + j, c2)
    vstore(P, a0 + 3 * n + j, c3)
    vstore(P, a0 + 4 * n + j, c4)
    vstore(P, a0 + 5 * n + j, c5)
    vstore(P, a0 + 6 * n + j, c6)
    vstore(P, a0 + 7 * n + j, c7)


@kernel(inline=True)
def _minus_terms(c, P, ri, v):
    """Each of the eight rows' vectors ``c[t]`` minus ``P[ri + t] v``: one multiply-subtract a lane (:func:`vmsub`)."""
    c0, c1, c2, c3, c4, c5, c6, c7 = c
    return (vmsub(c0, vsplat(P[ri]), v), vmsub(c1, vsplat(P[ri + 1]), v),
            vmsub(c2, vsplat(P[ri + 2]), v), vmsub(c3, vsplat(P[ri + 3]), v),
            vmsub(c4, vsplat(P[ri + 4]), v), vmsub(c5, vsplat(P[ri + 5]), v),
            vmsub(c6, vsplat(P[ri + 6]), v), vmsub(c7, vsplat(P[ri + 7]), v))


@kernel(inline=True)
def _tile(P, r0, n, a0, i, j):
    """Rows ``i .. i+7`` (flat offset ``a0`` of row ``i``) at columns ``j .. j+7``, each minus the
    eight panel rows' terms ``U[r, i+t] U[r, j..j+7]`` (row ``r`` at flat offset ``r0 + k n``), in
    panel order, one multiply-subtract each (:func:`~fastsm._kernels.fma.vmsub`)."""
    c = _load8(P, a0, n, j)
    r = r0
    for _ in range(8):
        c = _minus_terms(c, P, r + i, vload(P, r + j))
        r += n
    return c


@kernel(inline=True)
def _tile16(P, r0, n, a0, i, j):
    """:func:`_tile` at columns ``j .. j+15`` as two vectors a row, stored: sixteen accumulators instead
    of eight hide the multiply-subtracts' latency (docs/scale.md).  Each entry takes the same terms in the same
    order as :func:`_tile` gives it."""
    h = j + 8
    c = _load8(P, a0, n, j)
    d = _load8(P, a0, n, h)
    r = r0
    for _ in range(8):
        c = _minus_terms(c, P, r + i, vload(P, r + j))
        d = _minus_terms(d, P, r + i, vload(P, r + h))
        r += n
    _store8(P, a0, n, j, c)
    _store8(P, a0, n, h, d)


@kernel(internal=True)
def _update_rows8(P, n, r0, i):
    """The trailing update of rows ``i .. i+7`` (``n - i >= 8``) by the eight panel rows at ``r0``.

    Vectors from column ``i`` on, sixteen columns at a time (:func:`_tile16`), then eight: the entries
    of rows ``i+1 .. i+7`` left of their diagonal are in the lower triangle, scratch until it is filled.
    A last partial vector is taken as the vector ending at column ``n``, computed from the entries
    before the others are stored: where it overlaps, it stores the same values (lane-wise operations
    on the same inputs)."""
    a0 = i * n
    e = i + (n - i) // 8 * 8
    if e == n:
        _tiles(P, r0, n, a0, i, e)
        return
    last = _tile(P, r0, n, a0, i, n - 8)
    _tiles(P, r0, n, a0, i, e)
    _store8(P, a0, n, n - 8, last)


@kernel(inline=True)
def _tiles(P, r0, n, a0, i, e):
    """Columns ``i .. e-1`` (a multiple of eight) of :func:`_update_rows8`'s rows, stored."""
    j = i
    while e - j >= 16:
        _tile16(P, r0, n, a0, i, j)
        j += 16
    if j < e:
        _store8(P, a0, n, j, _tile(P, r0, n, a0, i, j))


@kernel(internal=True)
def _axpy_row(P, n, a, b, u, j0):
    """``P[a+j] -= u * P[b+j]`` for ``j = j0 .. n-1`` (rows at flat offsets ``a`` and ``b``), as
    :func:`_update_rows8` takes its vectors (a last partial one ending at column ``n``; entries
    left of ``j0`` may change where ``n - j0 < 8``: callers pass lower-triangle scratch there)."""
    if n < 8:
        for j in range(j0, n):
            P[a + j] = msub(P[a + j], u, P[b + j])
        return
    us = vsplat(u)
    e = j0 + (n - j0) // 8 * 8
    last = vmsub(vload(P, a + n - 8), us, vload(P, b + n - 8))  # before the loop's stores
    for j in range(j0, e, 8):
        vstore(P, a + j, vmsub(vload(P, a + j), us, vload(P, b + j)))
    if e < n:
        vstore(P, a + n - 8, last)


@kernel(internal=True)
def factor_symmetric(A):
    """Factorise the symmetric ``A = L L^T`` in place into symmetric storage; returns ``info`` as
    LAPACK's ``dpotrf`` does (0, or the order of the first leading minor that is not positive:
    ``A`` is then meaningless).

    Reads the upper triangle of ``A`` (``U = L^T`` by rows); the strict lower triangle is scratch
    and ends as ``L``.  Right-looking, eight rows of ``U`` per step: each row's pivot, square root
    and scaling by its reciprocal (as LAPACK's ``dpotf2``) and the updates of the step's later rows,
    then the trailing rows eight at a time by :func:`_update_rows8` (:mod:`fastsm._kernels.simd`:
    LLVM leaves these loops scalar otherwise).  Every entry takes its terms one at a time in row
    order, one multiply-subtract each (:mod:`fastsm._kernels.fma`: rounded once where the compile
    target has FMA): the bits depend on ``A`` and on that target only, not on the BLAS or the thread
    count.  ``A`` is C-contiguous.  fastsm's one Cholesky factorisation of its
    own (the other is LAPACK's ``dpotrf``, :func:`potrf_symmetric`).
    """
    n = A.shape[0]
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
    mirror_upper(A)
    return 0
