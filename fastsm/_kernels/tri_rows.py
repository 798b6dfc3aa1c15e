"""Products of rows with a lower-triangular factor, and substitutions with a Cholesky factor, by
vectorisable row loops: every triangular product of fastsm (#55).

A factor travels in *symmetric storage* ``S`` (:func:`symmetric_storage`): its lower triangle is the
factor ``M``, its strict upper triangle ``M^T``, so that row ``p`` of ``M`` (``S[p, :p]``) and column
``p`` below the diagonal (``S[p, p+1:]``) are both contiguous.  A row ``x`` becomes

* ``M x`` (forward) or ``M^T x`` (backward): a product (``M = W = L^-1`` of a model in inverse form, or
  IKLTGP's ``G``);
* ``M^-1 x`` or ``M^-T x``: a substitution with a Cholesky factor ``M = L`` (models in Cholesky form).

All four are one loop: the pivots ``p`` are taken in order (ascending forward, descending backward) and
each pivot's coefficient ``a`` — ``-x[p]`` for a product, the solved entry ``y[p] * (1 / L[p, p])``
for a substitution — is taken out of every entry it reaches, ``y[i] -= a * S[p, i]`` along ``S``'s
row ``p`` (a column of ``M`` forward, a row backward).  An entry therefore takes its terms one at a
time in pivot order, one multiply and one subtraction each (no fused multiply-add:
``config.FASTMATH_FLAGS``): its bits depend on its row and ``S`` only — not on the other rows of the
call, the thread, the CPU or the BLAS (there is none).  The substitutions are backward stable; DTRSM
tiles of OpenBLAS were 10-20x less accurate on the near-duplicate sets of #55 (docs/accuracy.md).

For speed the pivots are taken in blocks: four rows at a time take four pivots per sweep over the
rest of their entries (each ``S`` entry loaded once for sixteen multiply-subtracts), in groups of
:data:`GROUP` rows that stay in cache while ``S`` streams once for all of them; rows left over take
eight pivots per sweep.  Blocking changes only which loads are shared, not the operations of an
entry.  On this project's 2-core AVX-512 machine, against the DTRSM/DTRMM tiles it replaced, one
thread: 64-256 rows of ``N = 1000-2000`` 0.83-1.10x the time, 4-16 rows 0.5-0.6x
(``benchmarks/tri_rows.py``).

The loops are compiled once, as a C function (:data:`rows_call`, a ``cfunc`` cached like every kernel),
and kernels call it by symbol as they call BLAS: compiled into every kernel that runs products, they
cost the cold start several seconds (#54).
"""

from __future__ import annotations

from typing import NamedTuple

import llvmlite.binding as llvm
import numpy as np
from numba import carray, cfunc, types

from fastsm._kernels.linalg import ptr
from fastsm.config import FASTMATH_FLAGS, kernel

#: Rows of one group of :func:`tri_rows` (four-row sets sweeping ``S`` together).
GROUP = 64


@kernel()
def symmetric_storage(W):
    """``S`` with ``S``'s lower triangle that of ``W`` and its strict upper triangle ``W^T``'s
    (``W`` lower triangular, C-contiguous; its upper triangle is not read)."""
    n = W.shape[0]
    S = np.empty((n, n))
    for i in range(n):
        for j in range(i + 1):
            S[i, j] = W[i, j]
            S[j, i] = W[i, j]
    return S


@kernel(inline=True)
def _sweep4(P, r, S, p0, step, c, lo, hi):
    """Rows ``r .. r+3`` of ``P``, entries ``lo .. hi-1``: ``-= c[q, t] * S[p0 + t step]`` for ``t = 0 .. 3``."""
    s0, s1, s2, s3 = S[p0, lo:hi], S[p0 + step, lo:hi], S[p0 + 2 * step, lo:hi], S[p0 + 3 * step, lo:hi]
    z0, z1, z2, z3 = P[r, lo:hi], P[r + 1, lo:hi], P[r + 2, lo:hi], P[r + 3, lo:hi]
    a0, a1, a2, a3 = c[0, 0], c[0, 1], c[0, 2], c[0, 3]
    b0, b1, b2, b3 = c[1, 0], c[1, 1], c[1, 2], c[1, 3]
    d0, d1, d2, d3 = c[2, 0], c[2, 1], c[2, 2], c[2, 3]
    e0, e1, e2, e3 = c[3, 0], c[3, 1], c[3, 2], c[3, 3]
    for i in range(hi - lo):
        w0, w1, w2, w3 = s0[i], s1[i], s2[i], s3[i]
        z0[i] = z0[i] - a0 * w0 - a1 * w1 - a2 * w2 - a3 * w3
        z1[i] = z1[i] - b0 * w0 - b1 * w1 - b2 * w2 - b3 * w3
        z2[i] = z2[i] - d0 * w0 - d1 * w1 - d2 * w2 - d3 * w3
        z3[i] = z3[i] - e0 * w0 - e1 * w1 - e2 * w2 - e3 * w3


@kernel(inline=True)
def _sweep1(P, r, S, p0, step, c, lo, hi):
    """Row ``r`` of ``P``, entries ``lo .. hi-1``: ``-= c[0, t] * S[p0 + t step]`` for ``t = 0 .. 7``."""
    s0, s1, s2, s3 = S[p0, lo:hi], S[p0 + step, lo:hi], S[p0 + 2 * step, lo:hi], S[p0 + 3 * step, lo:hi]
    s4, s5, s6, s7 = S[p0 + 4 * step, lo:hi], S[p0 + 5 * step, lo:hi], S[p0 + 6 * step, lo:hi], S[p0 + 7 * step, lo:hi]
    z = P[r, lo:hi]
    a0, a1, a2, a3, a4, a5, a6, a7 = c[0, 0], c[0, 1], c[0, 2], c[0, 3], c[0, 4], c[0, 5], c[0, 6], c[0, 7]
    for i in range(hi - lo):
        z[i] = (z[i] - a0 * s0[i] - a1 * s1[i] - a2 * s2[i] - a3 * s3[i]
                - a4 * s4[i] - a5 * s5[i] - a6 * s6[i] - a7 * s7[i])


@kernel(inline=True)
def tri_rows(X, S, P, m, fwd, solve):
    """``P[r, :n]`` for ``r < m``: row ``X[r, :n]`` times the lower triangle ``M`` of ``S`` (``n × n``,
    symmetric storage): ``M x`` (``fwd``) or ``M^T x``; with ``solve`` ``M^-1 x`` or ``M^-T x``.
    ``X`` and ``P`` are distinct (see the module docstring for the loops)."""
    n = S.shape[0]
    c = np.empty((4, 8))
    step = 1 if fwd else -1
    m4 = m // 4 * 4
    ngroups = (m4 + GROUP - 1) // GROUP
    for job in range(ngroups + m - m4):
        if job < ngroups:  # a group of four-row sets, four pivots per sweep
            r0, r1, nq, B = job * GROUP, min(job * GROUP + GROUP, m4), 4, 4
        else:  # one row, eight pivots per sweep
            r0, r1, nq, B = m4 + job - ngroups, m4 + job - ngroups + 1, 1, 8
        for r in range(r0, r1):
            for j in range(n):
                P[r, j] = X[r, j] if solve else 0.0
        k = 0
        while k < n:
            b = min(B, n - k)
            p0 = k if fwd else n - 1 - k
            for r in range(r0, r1, nq):
                for t in range(b):  # the block's own pivots
                    p = p0 + t * step
                    if solve:
                        d = 1.0 / S[p, p]
                        for q in range(nq):
                            a = P[r + q, p] * d
                            P[r + q, p] = a
                            c[q, t] = a
                    else:
                        d = S[p, p]
                        for q in range(nq):
                            a = -X[r + q, p]
                            P[r + q, p] -= a * d
                            c[q, t] = a
                    for u in range(t + 1, b):
                        pu = p0 + u * step
                        w = S[p, pu]
                        for q in range(nq):
                            P[r + q, pu] -= c[q, t] * w
                if b == B:  # then every entry past the block (none after a short last block)
                    lo, hi = (k + B, n) if fwd else (0, n - k - B)
                    if nq == 4:
                        _sweep4(P, r, S, p0, step, c, lo, hi)
                    else:
                        _sweep1(P, r, S, p0, step, c, lo, hi)
            k += b


#: :func:`tri_rows` as a C function: ``(X, ldx, m, S, n, P, ldp, mode)``, ``X`` and ``P`` of ``m`` rows
#: with leading dimensions ``ldx`` and ``ldp``, ``S`` ``n × n``; ``mode`` bit 0 ``fwd``, bit 1 ``solve``.
ROWS_SIG = types.void(types.CPointer(types.float64), types.int64, types.int64, types.CPointer(types.float64),
                      types.int64, types.CPointer(types.float64), types.int64, types.int64)


@cfunc(ROWS_SIG, cache=True, fastmath=set(FASTMATH_FLAGS), error_model="numpy")
def _tri_rows_c(x, ldx, m, s, n, p, ldp, mode):
    if m > 0 and n > 0:
        tri_rows(carray(x, (m, ldx)), carray(s, (n, n)), carray(p, (m, ldp)), m, (mode & 1) == 1, (mode & 2) == 2)


# registered before any kernel calling it is compiled or loaded from the cache (as the BLAS symbols)
llvm.add_symbol("fastsm_tri_rows", _tri_rows_c.address)
rows_call = types.ExternalFunction("fastsm_tri_rows", ROWS_SIG)


@kernel()
def rows_product(X, r0, h, S, fwd, P, solve=False):
    """``P[r] = M X[r]`` (``fwd``) or ``M^T X[r]`` for ``r`` in ``r0 .. r0+h-1``, ``M`` the lower triangle of
    ``S`` (symmetric storage; ``X``, ``P`` C-contiguous 2-D); with ``solve`` ``M^-1 X[r]`` or ``M^-T X[r]``.
    :func:`tri_rows` through :data:`rows_call`; a row's result does not depend on ``r0`` or ``h``."""
    n = S.shape[0]
    if h > 0:
        rows_call(ptr(X, r0 * X.shape[1]), X.shape[1], h, ptr(S, 0), n, ptr(P, r0 * P.shape[1]), P.shape[1],
                  (1 if fwd else 0) + (2 if solve else 0))


class ProductPlan(NamedTuple):
    """Which factors of :func:`run_products` are Cholesky factors ``L`` (models in Cholesky form): bit ``f``
    of ``solve`` for factor ``f``; a "product with ``W = L^-1``" by such a factor is a substitution.
    ``0``: every factor is multiplied (inverse factors ``W``, and IKLTGP's ``G`` in every form)."""

    solve: int


@kernel()
def solves(plan, factor):
    """Whether factor ``factor`` (0 or 1) of ``plan``'s products is a Cholesky factor (:class:`ProductPlan`)."""
    return (plan.solve >> factor) & 1 == 1


@kernel()
def run_products(work, M0, M1, ops, m, plan):
    """Products of row buffers with lower-triangular factors, in this thread.

    ``work`` is a stack of row buffers, ``M0`` and ``M1`` ``N × N`` factors in symmetric storage and
    ``ops`` one row ``(source, factor, fwd, target)`` per product: ``work[target, :m]`` gets each row
    ``x`` of ``work[source, :m]`` times ``M`` (``M0`` for factor 0, else ``M1``): ``M x`` (``fwd``) or
    ``M^T x``, or for a factor that ``plan.solve`` marks ``M^-1 x`` or ``M^-T x``.  The products of one
    call are independent (no target is another's source).  Every row by :data:`rows_call`: its result
    depends on its own data and ``M`` only, so threads split the points, not the products
    (:func:`fastsm._threads.run_chunks`).
    """
    n = work.shape[2]
    size = work.shape[1] * n
    for g in range(ops.shape[0]):
        f = ops[g, 1]
        M = M0 if f == 0 else M1
        mode = (1 if ops[g, 2] == 1 else 0) + (2 if solves(plan, f) else 0)
        rows_call(ptr(work, ops[g, 0] * size), n, m, ptr(M, 0), M.shape[0], ptr(work, ops[g, 3] * size), n, mode)


#: The plans of the two forms: every factor multiplied (inverse form), or both solved (Cholesky form;
#: IKLTGP's ``G`` is multiplied: ``ProductPlan(1)``).
MULTIPLY_PLAN = ProductPlan(0)
SOLVE_PLAN = ProductPlan(3)


def tri(A: np.ndarray, M: np.ndarray, forward: bool, *, solve: bool = False, stored: bool = False) -> np.ndarray:
    """Each row ``x`` of ``A`` times a lower-triangular ``M``: ``M x`` (``forward``) or ``M^T x``; with
    ``solve`` ``M^-1 x`` or ``M^-T x`` (substitutions), by :func:`run_products` in this thread.  Only the
    lower triangle of ``M`` is read, unless ``stored``: ``M`` is then in symmetric storage already."""
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


@kernel()
def pack_lower(M):
    """The lower triangle of the square ``M``, row by row (``M[np.tri(n, dtype=bool)]``), ``(n (n+1) / 2,)``."""
    n = M.shape[0]
    out = np.empty(n * (n + 1) // 2)
    k = 0
    for i in range(n):
        out[k:k + i + 1] = M[i, :i + 1]
        k += i + 1
    return out


@kernel()
def unpack_lower(packed, n, symmetric):
    """The ``n × n`` matrix whose lower triangle :func:`pack_lower` packed: zeros above the diagonal,
    or with ``symmetric`` the transposed lower triangle (symmetric storage)."""
    M = np.zeros((n, n))
    k = 0
    for i in range(n):
        M[i, :i + 1] = packed[k:k + i + 1]
        k += i + 1
    if symmetric:
        for i in range(n):
            for j in range(i):
                M[j, i] = M[i, j]
    return M
