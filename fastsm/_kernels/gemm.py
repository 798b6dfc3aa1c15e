"""Products of row buffers with lower-triangular factors whose rows do not depend on the other rows
of the call.

Every product of a batch of rows with a model's ``N × N`` factor (the evaluations' ``W x`` and
``W^T x``, the Hessian's, the points' precomputations) is cut into *row tiles*, each one
single-threaded DTRMM call (DTRSM for a Cholesky factor: a substitution, #55) on the tile's rows
copied in place (:func:`tri_tile`), with the shape from a :class:`TilePlan`:

* the tile heights come from a short menu that depends on ``N`` only; a call of ``m`` rows is
  covered by the cheapest set of menu heights (:func:`row_tiles`), padded with zero rows;
* operands are addressed in place with their leading dimensions (no copies, no transposes), so
  the strides are those of the buffers, not of the batch.

A BLAS computes a row of a call with the same arithmetic whatever the other rows are only for some
shapes: OpenBLAS's SkylakeX kernels switch to a "small-matrix" kernel below ``M N K = 10^6``,
Nehalem's handle rows in fours, Haswell's in twos or eights (measured; ``docs/threads.md``).  Which
shapes are safe is therefore *checked*, not assumed: :mod:`fastsm._products` runs every shape of the
menu once per ``N`` and process on random data and keeps only the menu entries whose rows agree bit
for bit with one reference call, falling back to one row per call (identical calls, so trivially
deterministic) when no menu passes.  Small ``N`` uses row loops instead (:class:`RowPlan`,
:mod:`~fastsm._kernels.tri_rows`).
"""

from __future__ import annotations

from typing import NamedTuple

import llvmlite.binding as llvm
import numpy as np
from numba import types
from numba.core.extending import overload
from numba.extending import get_cython_function_address

from fastsm._kernels.linalg import ptr
from fastsm._kernels.tri_rows import rows_product
from fastsm.config import kernel

# DTRMM, reached by name like Numba's own DGEMM binding so that kernels calling it stay cacheable:
# the symbol is registered in this process before any kernel is compiled or loaded from the cache.
llvm.add_symbol("fastsm_dtrmm", get_cython_function_address("scipy.linalg.cython_blas", "dtrmm"))
llvm.add_symbol("fastsm_dtrsm", get_cython_function_address("scipy.linalg.cython_blas", "dtrsm"))
_TRMM_SIG = types.void(
    types.CPointer(types.int8), types.CPointer(types.int8), types.CPointer(types.int8), types.CPointer(types.int8),
    types.CPointer(types.intc), types.CPointer(types.intc),               # m, n
    types.CPointer(types.float64),                                        # alpha
    types.CPointer(types.float64), types.CPointer(types.intc),            # a, lda
    types.CPointer(types.float64), types.CPointer(types.intc),            # b, ldb
)
_dtrmm = types.ExternalFunction("fastsm_dtrmm", _TRMM_SIG)
_dtrsm = types.ExternalFunction("fastsm_dtrsm", _TRMM_SIG)  # the same arguments

_N = ord("N")
_T = ord("T")
_L = ord("L")
_U = ord("U")


class TilePlan(NamedTuple):
    """The BLAS call shapes of the products for one ``N`` (see the module docstring).

    Attributes
    ----------
    heights : ndarray of int64
        Allowed tile heights, descending; all multiples of ``unit``.
    unit : int
        The smallest height (every height is a multiple of it).
    rows : bool
        Triangular products by :mod:`~fastsm._kernels.tri_rows`'s row loops instead of DTRMM
        tiles (small ``N``, ``config.ROW_PRODUCTS_MAX_N``); the factors then come in symmetric
        storage (:func:`~fastsm._kernels.tri_rows.symmetric_storage`) and ``heights`` is ``(1,)``.
    solve : int
        Which factors are Cholesky factors ``L`` (models in Cholesky form), bit ``f`` for factor ``f``
        of :func:`tri_products`: a "product with ``W = L^-1``" by such a factor is a substitution
        (:func:`~fastsm._kernels.tri_rows.rows_product` in row loops, DTRSM in tiles).  ``0``: every
        factor is multiplied (inverse factors ``W``, and IKLTGP's ``G`` in every form).
    """

    heights: np.ndarray
    unit: int
    rows: bool = False
    solve: int = 0


class RowPlan(TilePlan):
    """A :class:`TilePlan` whose products run by row loops (``rows`` is True, ``heights`` is ``(1,)``).

    A class of its own so that Numba types it apart: a kernel compiled for a tile plan contains no
    row loops and one compiled for a row plan no BLAS tiles (:func:`tri_products`).  The row loops
    took 14 s of the first global prediction's compilation, relinked into every caller.
    """

    __slots__ = ()


@kernel()
def solves(plan, factor):
    """Whether factor ``factor`` (0 or 1) of ``plan``'s products is a Cholesky factor (:class:`TilePlan`)."""
    return (plan.solve >> factor) & 1 == 1


@kernel()
def tri_tile(X, r0, h, M, fwd, P, p0, solve):
    """``P[p0:p0+h] = X[r0:r0+h]`` times a lower-triangular ``M``: each row ``x`` becomes ``M x`` (``fwd``)
    or ``M^T x``; one in-place DTRMM call on the copied rows.  With ``solve``, ``M`` is a Cholesky
    factor ``L`` and the rows become ``L^-1 x`` or ``L^-T x`` by one DTRSM call (substitution).

    In column-major terms the rows are the columns of ``B`` (``N × h``, leading dimension
    ``N``) and ``M`` (C-ordered) is the upper-triangular ``M^T``: ``B := op(M^T) B`` (or
    ``op(M^T)^-1 B``), with ``op`` the transpose for ``fwd``.  Only ``M``'s lower triangle is read.
    """
    n = M.shape[0]
    ldp = P.shape[1]
    for r in range(h):
        for j in range(n):
            P[p0 + r, j] = X[r0 + r, j]
    flags = np.empty(4, dtype=np.int8)
    flags[0] = _L
    flags[1] = _U
    flags[2] = _T if fwd else _N
    flags[3] = _N
    dims = np.empty(4, dtype=np.intc)
    dims[0] = n
    dims[1] = h
    dims[2] = M.shape[1]
    dims[3] = ldp
    one = np.ones(1)
    if solve:
        _dtrsm(ptr(flags, 0), ptr(flags, 1), ptr(flags, 2), ptr(flags, 3), ptr(dims, 0), ptr(dims, 1),
               ptr(one, 0), ptr(M, 0), ptr(dims, 2), ptr(P, p0 * ldp), ptr(dims, 3))
    else:
        _dtrmm(ptr(flags, 0), ptr(flags, 1), ptr(flags, 2), ptr(flags, 3), ptr(dims, 0), ptr(dims, 1),
               ptr(one, 0), ptr(M, 0), ptr(dims, 2), ptr(P, p0 * ldp), ptr(dims, 3))


#: Cost of one DGEMM call beyond its rows, in rows (packing the right factor's panel; measured
#: 16-row tiles at ~half the rate of 256-row tiles on N = 1000-2000).
CALL_OVERHEAD_ROWS = 12


@kernel()
def row_tiles(m, plan):
    """``(starts, heights)`` of the tiles covering ``m`` rows, padded rows included.

    The cheapest cover of at least ``m`` rows by the plan's heights with cost ``sum(h +
    CALL_OVERHEAD_ROWS)`` (a small dynamic programme over row counts, a function of ``m`` and the
    plan only), largest tiles first.  Every height of the plan computes a row with the same bits,
    so the cover changes no result.
    """
    hs = plan.heights
    top = hs[0]
    limit = m + top
    cost = np.full(limit + 1, np.inf)
    pick = np.zeros(limit + 1, dtype=np.int64)
    cost[0] = 0.0
    for r in range(1, limit + 1):  # cost[r]: cheapest cover of exactly r rows
        for h in hs:
            if h <= r and cost[r - h] + h + CALL_OVERHEAD_ROWS < cost[r]:
                cost[r] = cost[r - h] + h + CALL_OVERHEAD_ROWS
                pick[r] = h
    best = m
    for r in range(m, limit + 1):
        if cost[r] < cost[best]:
            best = r
    count = 0
    r = best
    while r > 0:
        count += 1
        r -= pick[r]
    heights = np.empty(count, dtype=np.int64)
    r = best
    for i in range(count):
        heights[i] = pick[r]
        r -= pick[r]
    for i in range(1, count):  # largest first; insertion sort: a handful of tiles, and np.sort costs 1.5 s to compile
        h = heights[i]
        j = i
        while j > 0 and heights[j - 1] < h:
            heights[j] = heights[j - 1]
            j -= 1
        heights[j] = h
    starts = np.empty(count, dtype=np.int64)
    r = 0
    for i in range(count):
        starts[i] = r
        r += heights[i]
    return starts, heights


@kernel()
def padded_rows(m, plan):
    """Rows the tiles of ``m`` rows cover (``m`` plus zero padding): at most ``m + plan.heights[0]``."""
    starts, heights = row_tiles(m, plan)
    if starts.shape[0] == 0:
        return 0
    return starts[-1] + heights[-1]


@kernel()
def tri_products(work, M0, M1, ops, m, plan):
    """:func:`run_products` called from Python (kernels call :func:`run_products` itself)."""
    run_products(work, M0, M1, ops, m, plan)


def run_products(work, M0, M1, ops, m, plan):
    """Products of row buffers with lower-triangular factors, in this thread.

    ``work`` is a stack of row buffers, ``M0`` and ``M1`` ``N × N`` lower-triangular factors and
    ``ops`` one row ``(source, factor, fwd, target)`` per product:
    ``work[target, :mp] = work[source, :mp] @ Op`` with ``Op = M^T`` (``fwd``: each row ``x``
    becomes ``M x``) or ``M`` (``x`` becomes ``M^T x``), ``M`` being ``M0`` (factor 0) or ``M1``.
    The products of one call are independent (no target is another's source).  A factor that
    ``plan.solve`` marks is a Cholesky factor ``L``, and ``M x`` reads ``L^-1 x`` (a substitution).

    By the plan's kind, chosen at compile time (:func:`_run_products_overload`, so each compiled
    version holds one kind of product only): for a :class:`RowPlan` every row by
    :func:`~fastsm._kernels.tri_rows.rows_product` (factors in symmetric storage), all ``m`` rows in
    one call per product; for any other plan by the DTRMM/DTRSM tiles of :func:`row_tiles`, the rows
    past ``m`` up to the cover (``mp``, :func:`padded_rows`) zeroed in every source first.  Every row
    is computed by a call shape of the plan, so its result depends on its own data, ``N`` and the
    plan only.  Threads split the points, not the products (:func:`fastsm._threads.run_chunks`).
    """
    if isinstance(plan, RowPlan):
        _row_loops(work, M0, M1, ops, m, plan)
    else:
        _tiles(work, M0, M1, ops, m, plan)


@overload(run_products)
def _run_products_overload(work, M0, M1, ops, m, plan):
    if getattr(plan, "instance_class", None) is RowPlan:
        def rows_impl(work, M0, M1, ops, m, plan):
            _row_loops(work, M0, M1, ops, m, plan)
        return rows_impl

    def tiles_impl(work, M0, M1, ops, m, plan):
        _tiles(work, M0, M1, ops, m, plan)
    return tiles_impl


@kernel(inline=True)
def _row_loops(work, M0, M1, ops, m, plan):
    """:func:`run_products` by row loops."""
    for g in range(ops.shape[0]):
        if ops[g, 1] == 0:
            rows_product(work[ops[g, 0]], np.int64(0), m, M0, ops[g, 2] == 1, work[ops[g, 3]], solves(plan, 0))
        else:
            rows_product(work[ops[g, 0]], np.int64(0), m, M1, ops[g, 2] == 1, work[ops[g, 3]], solves(plan, 1))


@kernel(inline=True)
def _tiles(work, M0, M1, ops, m, plan):
    """:func:`run_products` by DTRMM (DTRSM) tiles."""
    n = work.shape[2]
    starts, heights = row_tiles(m, plan)
    nt = starts.shape[0]
    mp = starts[nt - 1] + heights[nt - 1] if nt > 0 else 0
    for g in range(ops.shape[0]):
        for r in range(m, mp):
            for j in range(n):
                work[ops[g, 0], r, j] = 0.0
    for g in range(ops.shape[0]):
        f = ops[g, 1]
        M = M0 if f == 0 else M1
        for i in range(nt):
            tri_tile(work[ops[g, 0]], starts[i], heights[i], M, ops[g, 2] == 1, work[ops[g, 3]], starts[i],
                     solves(plan, f))


@kernel()
def probe_tri(A, M, jobs, P):
    """The probe of :func:`fastsm._products.tile_plan`: job ``(r0, h, fwd, out0, solve)`` computes rows
    ``A[r0:r0+h]`` times the lower-triangular ``M`` (``fwd``: ``M x``, else ``M^T x``; with ``solve``
    ``M^-1 x`` or ``M^-T x``) into ``P[out0:out0+h]`` by one :func:`tri_tile` call, as
    :func:`tri_products` does."""
    for t in range(jobs.shape[0]):
        r0, h, fwd, out0 = jobs[t, 0], jobs[t, 1], jobs[t, 2], jobs[t, 3]
        tri_tile(A, r0, h, M, fwd == 1, P, out0, jobs[t, 4] == 1)
