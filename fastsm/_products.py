"""Which BLAS call shapes the products may use, checked on the BLAS in use.

Every product of a batch of rows with a model's factor is a product with a lower-triangular
``N × N`` matrix ``W = L^-1`` (or ``G``), forward (``x -> W x``) or backward (``x -> W^T x``)
(docs/accuracy.md).  :mod:`fastsm._kernels.gemm` computes it as tiles of a
:class:`~fastsm._kernels.gemm.TilePlan`: row tiles of the plan's heights, one single-threaded
DTRMM call each.  A point's result must not depend on the tile its row lands in or its position
there.  Which call shapes give a
row the same arithmetic is a property of the BLAS build, its CPU kernels and
``N`` (measured with OpenBLAS 0.3.31: SkylakeX kernels agree for every height
of at least 2 rows at ``N = 1000`` but only for multiples of 12 at ``N = 300``,
and switch to a small-matrix kernel below ``M N K = 10^6``; Nehalem's need
multiples of 4; Haswell's of 2).  So before the first product with ``N``
columns in a process, :func:`tile_plan` runs every candidate shape once on
random data (:class:`Probe`):

* candidate heights ``2^a`` and ``3·2^a`` up to 256 rows, each through a
  forward and a backward product and a forward and a backward substitution (DTRSM, the products
  of models in Cholesky form);
* a menu's top height once more, one row further on, which shows whether a
  row's position in the call matters;
* each height's rows compared with the top's.

:func:`choose` then keeps a menu — a unit ``u`` and the heights that are
multiples of it up to a top — all of whose calls give every row the same
bits.  A call's rows are covered by the cheapest set of menu heights,
padded with zero rows.  One row per call (identical calls, so deterministic on any BLAS, at GEMV speed) is the
menu of last resort; a ``RuntimeWarning`` says when it is used.

A BLAS call's arithmetic depends on its shape and strides, not on the
values, so agreement on random data (thousands of sums of ``N`` terms per
height) means the same operations in the same order.  The plan is a
property of the process's BLAS: it is never pickled with a model, and a
process on another CPU computes its own.  Cost: about 1 100 to 2 000 rows of
products, once per ``N`` and process.
"""

from __future__ import annotations

import functools

import numpy as np

from fastsm._kernels.gemm import CALL_OVERHEAD_ROWS, RowPlan, TilePlan, padded_rows, probe_tri, row_tiles, tri_products
from fastsm._kernels.tri_rows import symmetric_storage
from fastsm._threads import run_chunks, thread_limits
from fastsm._warn import warn

#: Largest tile height.
TOP = 256
#: Candidate tile heights: ``2^a`` and ``3·2^a`` up to :data:`TOP`.
HEIGHTS: tuple[int, ...] = tuple(sorted({2**a for a in range(9)} | {3 * 2**a for a in range(7)}))


class Probe:
    """Candidate call shapes for ``n`` columns run on random data, lazily and memoised.

    ``rows(h)``: rows ``A[0:h]`` through a forward and a backward product with a random lower-
    triangular ``M`` and a forward and a backward substitution with it, by ``h``-row calls;
    ``invariant(h)``: the same calls one row further on give every row the same bits (a row's
    position in the call does not matter). Every run holds BLAS at one thread (multi-threaded
    OpenBLAS splits a call differently and rounds differently).
    """

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(20261122)
        self.n = n
        self.A = rng.standard_normal((TOP + 1, n))
        M = np.tril(rng.standard_normal((n, n))) / n  # small below the diagonal: finite substitutions
        M[np.diag_indices(n)] = 1.0 + rng.random(n)
        self.M = M
        self._rows: dict[tuple[int, int], np.ndarray] = {}
        self._run([(0, h) for h in HEIGHTS] + [(1, TOP)])

    def _run(self, jobs: list[tuple[int, int]]) -> None:
        kinds = [(fwd, solve) for solve in (0, 1) for fwd in (1, 0)]
        runs = [(r0, h, fwd, solve) for r0, h in jobs for fwd, solve in kinds]
        rows = np.cumsum([0] + [j[1] for j in runs])
        table = np.array([(r0, h, fwd, rows[i], solve) for i, (r0, h, fwd, solve) in enumerate(runs)], dtype=np.int64)
        P = np.empty((int(rows[-1]), self.n))
        with thread_limits(None) as nt:  # BLAS on one thread inside, as the products run (reentrant)
            # the largest jobs first, dealt round-robin: each thread's chunk holds a like share of the rows
            order = np.argsort(-table[:, 1], kind="stable")
            dealt = np.concatenate([order[c::nt] for c in range(nt)])
            run_chunks(len(table), nt, lambda s, e: probe_tri(self.A, self.M, table[dealt[s:e]], P))
        q = len(kinds)
        for k, (r0, h) in enumerate(jobs):
            self._rows[(r0, h)] = np.hstack([P[rows[q * k + i]:rows[q * k + i + 1]] for i in range(q)])

    def rows(self, h: int) -> np.ndarray:
        return self._rows[(0, h)]

    def invariant(self, h: int) -> bool:
        if (1, h) not in self._rows:
            self._run([(1, h)])
        return bool(np.array_equal(self._rows[(0, h)][1:], self._rows[(1, h)][:-1]))


def menus(probe: Probe) -> list[tuple[int, tuple[int, ...]]]:
    """Valid menus ``(unit, heights)``, the largest valid top for each unit, by increasing unit.

    A menu is a unit ``u`` and the candidate heights that are multiples of
    ``u`` up to a top.  It is valid when the top is position-invariant and
    every height's rows agree with the top's: then every call of the menu
    computes a row, at any position, as the top computes it.  ``(1, (1,))``
    (one row per call) is always valid.
    """
    found = []
    for unit in HEIGHTS:
        mult = [h for h in HEIGHTS if h % unit == 0]
        for top in reversed(mult):
            hs = [h for h in mult if h <= top]
            if all(np.array_equal(probe.rows(h), probe.rows(top)[:h]) for h in hs) and probe.invariant(top):
                found.append((unit, tuple(sorted(hs, reverse=True))))
                break
    return found


#: Round sizes over which menus are compared (the optimiser's rounds run from 1 to its window, 512).
ROUND_SIZES = (1, 2, 3, 5, 8, 13, 20, 32, 50, 80, 128, 200, 320, 512)


def menu_cost(heights) -> float:
    """(Rows computed + per-call overhead) / rows needed, summed over :data:`ROUND_SIZES`."""
    plan = TilePlan(np.array(heights, dtype=np.int64), int(heights[-1]))
    total = 0.0
    for m in ROUND_SIZES:
        _, hs = row_tiles(m, plan)
        total += hs.sum() + CALL_OVERHEAD_ROWS * len(hs)
    return total / sum(ROUND_SIZES)


def choose(probe: Probe) -> tuple[tuple[int, ...], int]:
    """``(heights, unit)``: the cheapest valid :func:`menus` entry by :func:`menu_cost`."""
    _, unit, hs = min(((menu_cost(hs), unit, hs) for unit, hs in menus(probe)), key=lambda c: (c[0], c[1]))
    return hs, unit


#: The plan of the row loops (:mod:`fastsm._kernels.tri_rows`): no BLAS call, nothing to check.
ROW_PLAN = RowPlan(np.ones(1, dtype=np.int64), 1, True)
#: The row loops' substitutions with Cholesky factors (both factors; models in Cholesky form).
ROW_SOLVE_PLAN = RowPlan(np.ones(1, dtype=np.int64), 1, True, 3)


@functools.cache
def tile_plan(n: int) -> TilePlan:
    """The checked call shapes for products with ``n`` columns (memoised per process)."""
    heights, unit = choose(Probe(n))
    if heights == (1,) and n >= 64:
        warn(
            f"this BLAS computes a row of a matrix product differently depending on the call's shape for every "
            f"tile menu fastsm tried (N = {n}); products run one row per call to stay deterministic (slow)",
            RuntimeWarning)
    return TilePlan(np.array(heights, dtype=np.int64), int(unit))


def product_factor(M: np.ndarray, plan: TilePlan) -> np.ndarray:
    """A lower-triangular factor as ``plan``'s products read it: itself, or in symmetric storage for
    row plans (:func:`~fastsm._kernels.tri_rows.symmetric_storage`; only ``M``'s lower triangle is read)."""
    M = np.ascontiguousarray(M, dtype=np.float64)
    return symmetric_storage(M) if plan.rows else M


def tri(A: np.ndarray, M: np.ndarray, forward: bool, plan: TilePlan | None = None, *,
        stored: bool = False, solve: bool | None = None) -> np.ndarray:
    """Each row ``x`` of ``A`` times a lower-triangular ``M``: ``M x`` (``forward``) or ``M^T x``; with
    ``solve`` ``M^-1 x`` or ``M^-T x`` (substitutions; ``None``: as ``plan.solve`` says).

    Every row is computed independently of the other rows of ``A`` (the checked tiles of
    :func:`~fastsm._kernels.gemm.tri_products`, or the row loops).  Only the lower triangle of ``M``
    is read, unless ``stored``: ``M`` is then :func:`product_factor`'s for ``plan``.
    Runs on the caller's Numba threads; call inside ``thread_limits``.
    """
    m, n = A.shape
    if M.shape != (n, n):
        raise ValueError(f"tri needs a square factor with {n} rows, got {M.shape}")
    plan = tile_plan(n) if plan is None else plan
    if solve is not None:
        plan = plan._replace(solve=3 if solve else 0)
    mp = padded_rows(m, plan)
    work = np.zeros((2, mp, n))
    work[0, :m] = A
    M = np.ascontiguousarray(M) if stored else product_factor(M, plan)
    tri_products(work, M, M, np.array([[0, 0, 1 if forward else 0, 1]], dtype=np.int64), m, plan)
    return work[1, :m]
