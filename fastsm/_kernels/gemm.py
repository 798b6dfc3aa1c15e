"""Matrix products whose rows do not depend on the other rows of the call.

Every product of a batch of rows with a fixed ``N × N`` matrix (the
optimiser's ``K M1``, ``K M2``; ``fit``'s and ``predict``'s precomputations)
is cut into *tiles*, and each tile is one single-threaded DGEMM call
``P[r0:r0+h, c0:c0+w] = K[r0:r0+h] @ M[:, c0:c0+w]`` whose shape comes from a
:class:`TilePlan`:

* the tile heights ``h`` come from a short menu that depends on ``N`` only;
  a call of ``m`` rows is covered by the cheapest set of menu heights
  (:func:`row_tiles`), padded with zero rows;
* the columns are either the full width or fixed panels of ``panel_width``
  columns, a function of ``N`` only;
* operands are addressed in place with their leading dimensions (no copies,
  no transposes), so the strides are those of the buffers, not of the batch.

A BLAS computes a row of a call with the same arithmetic whatever the other
rows are only for some shapes: OpenBLAS's SkylakeX kernels switch to a
"small-matrix" kernel below ``M N K = 10^6``, Nehalem's handle rows in fours,
Haswell's in twos or eights (measured; ``docs/threads.md``).  Which shapes are
safe is therefore *checked*, not assumed: :mod:`fastsm._products` runs every
shape of the menu once per ``N`` and process on random data and keeps only the
menu entries whose rows agree bit for bit with one reference call, falling
back to one row per call (identical calls, so trivially deterministic) when
no menu passes.

The DGEMM is reached through Numba's own cacheable binding
(``numba_xxgemm``, what ``np.dot`` calls) so that operands keep their
strides: ``np.dot`` accepts only contiguous outputs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange, types
from numba.core.extending import intrinsic
from numba.np.linalg import ensure_blas

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


class TilePlan(NamedTuple):
    """The BLAS call shapes of the products for one ``N`` (see the module docstring).

    Attributes
    ----------
    heights : ndarray of int64
        Allowed tile heights, descending; all multiples of ``unit``.
    unit : int
        The smallest height (every height is a multiple of it).
    panel_width : int
        Width of the column panels (the last one narrower), or 0 when every
        call is full width.
    """

    heights: np.ndarray
    unit: int
    panel_width: int


@intrinsic
def _ptr(typingctx, arr, offset):
    """Pointer to element ``offset`` of a C-contiguous array's data (for the BLAS call)."""
    sig = types.CPointer(arr.dtype)(arr, types.intp)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.gep(ary.data, [args[1]])

    return sig, codegen


@kernel()
def gemm_tile(K, r0, h, M, c0, w, P, p0, scal):
    """``P[p0:p0+h, c0:c0+w] = K[r0:r0+h] @ M[:, c0:c0+w]``: one DGEMM call, operands in place.

    ``K``, ``M`` and ``P`` are C-contiguous with ``M.shape[0]`` = ``K``'s
    columns; ``scal = [1.0, 0.0]`` (alpha, beta).  In column-major terms the
    call is ``P^T = M^T K^T`` with leading dimensions the row lengths.
    """
    n = M.shape[0]
    ldk = K.shape[1]
    ldm = M.shape[1]
    ldp = P.shape[1]
    _xxgemm(_D, _N, _N, w, h, n, _ptr(scal, 0), _ptr(M, c0), ldm, _ptr(K, r0 * ldk), ldk, _ptr(scal, 1),
            _ptr(P, p0 * ldp + c0), ldp)


#: Cost of one DGEMM call beyond its rows, in rows (packing the right factor's panel; measured
#: 16-row tiles at ~half the rate of 256-row tiles on N = 1000-2000).
CALL_OVERHEAD_ROWS = 12


@kernel()
def row_tiles(m, plan):
    """``(starts, heights)`` of the tiles covering ``m`` rows, padded rows included.

    The cheapest cover of at least ``m`` rows by the plan's heights with
    cost ``sum(h + CALL_OVERHEAD_ROWS)`` (a small dynamic programme over row
    counts, a function of ``m`` and the plan only), largest tiles first.
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
def panels(n, plan, use_panels):
    """``(width, count)`` of the column split: panels of ``plan.panel_width`` or the full width."""
    if not use_panels or plan.panel_width <= 0 or plan.panel_width >= n:
        return n, 1
    w = plan.panel_width
    return w, (n + w - 1) // w


@kernel(parallel=True)
def plan_products(K, m, M1, M2, nprod, P1, P2, plan, nthreads):
    """``P1[:mp] = K[:mp] @ M1`` and (``nprod == 2``) ``P2[:mp] = K[:mp] @ M2`` by the plan's tiles.

    ``K`` must hold ``mp = padded_rows(m, plan)`` rows; the ones past ``m``
    are set to zero here (the tile cover is computed once per call).  Panels
    are used only when the full-width tiles would leave threads idle; the
    plan guarantees both give the same rows.  ``nthreads`` (the caller's
    Numba thread count) chooses that split only.
    """
    n = M1.shape[0]
    starts, heights = row_tiles(m, plan)
    nt = starts.shape[0]
    mp = starts[nt - 1] + heights[nt - 1] if nt > 0 else 0
    for r in range(m, mp):
        for j in range(K.shape[1]):
            K[r, j] = 0.0
    width, npan = panels(n, plan, nprod * nt < 2 * nthreads)
    scal = np.array([1.0, 0.0])
    for task in prange(nprod * nt * npan):
        g = task // (nt * npan)
        rem = task - g * nt * npan
        i = rem // npan
        j = rem - i * npan
        c0 = j * width
        w = min(n, c0 + width) - c0
        if g == 0:
            gemm_tile(K, starts[i], heights[i], M1, c0, w, P1, starts[i], scal)
        else:
            gemm_tile(K, starts[i], heights[i], M2, c0, w, P2, starts[i], scal)


@kernel(parallel=True)
def probe_calls(A, M, jobs, width, P):
    """The probe of :func:`fastsm._products.tile_plan`: job ``(r0, h, full, out0)`` computes rows
    ``A[r0:r0+h] @ M`` into ``P[out0:out0+h]`` in one call (``full``) or panels of ``width``."""
    n = M.shape[0]
    npan = (n + width - 1) // width
    scal = np.array([1.0, 0.0])
    for t in prange(jobs.shape[0]):
        r0, h, full, out0 = jobs[t, 0], jobs[t, 1], jobs[t, 2], jobs[t, 3]
        if full:
            gemm_tile(A, r0, h, M, 0, n, P, out0, scal)
        else:
            for j in range(npan):
                c0 = j * width
                gemm_tile(A, r0, h, M, c0, min(n, c0 + width) - c0, P, out0, scal)
