"""Which BLAS call shapes the products may use, checked on the BLAS in use.

:mod:`fastsm._kernels.gemm` computes every batch product as tiles of a
:class:`~fastsm._kernels.gemm.TilePlan`.  A point's result must not depend on
the tile its row lands in or its position there.  Which call shapes give a
row the same arithmetic is a property of the BLAS build, its CPU kernels and
``N`` (measured with OpenBLAS 0.3.31: SkylakeX kernels agree for every height
of at least 2 rows at ``N = 1000`` but only for multiples of 12 at ``N = 300``,
and switch to a small-matrix kernel below ``M N K = 10^6``; Nehalem's need
multiples of 4; Haswell's of 2).  So before the first product with ``N``
columns in a process, :func:`tile_plan` runs every candidate shape once on
random data (:class:`Probe`):

* candidate heights ``2^a`` and ``3·2^a`` up to 256 rows;
* a menu's top height once more, one row further on, which shows whether a
  row's position in the call matters;
* each height's rows compared with the top's;
* column panels (used when a round is too small to keep every thread busy
  at full width) compared with the full-width rows.

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
import warnings

import numba
import numpy as np

from fastsm._kernels.gemm import CALL_OVERHEAD_ROWS, TilePlan, padded_rows, plan_products, probe_calls, row_tiles
from fastsm._threads import thread_limits

#: Largest tile height.
TOP = 256
#: Target width of a column panel.
PANEL_COLS = 256
#: Candidate tile heights: ``2^a`` and ``3·2^a`` up to :data:`TOP`.
HEIGHTS: tuple[int, ...] = tuple(sorted({2**a for a in range(9)} | {3 * 2**a for a in range(7)}))


def panel_width(n: int) -> int:
    """Column panel width for ``n`` columns (a multiple of 16), or 0 when one panel would do."""
    count = max(1, (n + PANEL_COLS // 2) // PANEL_COLS)
    if count == 1:
        return 0
    width = -(-n // count)
    return -(-width // 16) * 16


class Probe:
    """Candidate call shapes for ``n`` columns run on random data, lazily and memoised.

    ``rows(h)``: rows ``A[0:h] @ M`` by one full-width ``h``-row call;
    ``invariant(h)``: the same call one row further on gives every row the
    same bits (a row's position in the call does not matter);
    ``panels_agree(hs)``: the column-panel calls give the full-width rows.
    Every run holds BLAS at one thread (multi-threaded OpenBLAS splits a call
    differently and rounds differently).
    """

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(20261122)
        self.n = n
        self.A = rng.standard_normal((TOP + 1, n))
        self.M = rng.standard_normal((n, n))
        self.width = panel_width(n)
        self._full: dict[tuple[int, int], np.ndarray] = {}
        self._panel: dict[int, np.ndarray] = {}
        self._run([(0, h, 1) for h in HEIGHTS] + [(1, TOP, 1)])

    def _run(self, jobs: list[tuple[int, int, int]]) -> None:
        rows = np.cumsum([0] + [j[1] for j in jobs])
        table = np.array([(r0, h, full, rows[i]) for i, (r0, h, full) in enumerate(jobs)], dtype=np.int64)
        P = np.empty((int(rows[-1]), self.n))
        with thread_limits(None):  # BLAS on one thread inside, as the products run (reentrant)
            probe_calls(self.A, self.M, table, self.width if self.width else self.n, P)
        for i, (r0, h, full) in enumerate(jobs):
            if full:
                self._full[(r0, h)] = P[rows[i]:rows[i + 1]]
            else:
                self._panel[h] = P[rows[i]:rows[i + 1]]

    def rows(self, h: int) -> np.ndarray:
        return self._full[(0, h)]

    def invariant(self, h: int) -> bool:
        if (1, h) not in self._full:
            self._run([(1, h, 1)])
        return bool(np.array_equal(self._full[(0, h)][1:], self._full[(1, h)][:-1]))

    def panels_agree(self, hs) -> bool:
        if not self.width:
            return False
        todo = [(0, h, 0) for h in hs if h not in self._panel]
        if todo:
            self._run(todo)
        return all(np.array_equal(self._panel[h], self._full[(0, h)]) for h in hs)


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
#: Menus within this factor of the cheapest count as equally cheap; among them panels are preferred.
COST_SLACK = 1.05


def menu_cost(heights) -> float:
    """(Rows computed + per-call overhead) / rows needed, summed over :data:`ROUND_SIZES`."""
    plan = TilePlan(np.array(heights, dtype=np.int64), int(heights[-1]), 0)
    total = 0.0
    for m in ROUND_SIZES:
        _, hs = row_tiles(m, plan)
        total += hs.sum() + CALL_OVERHEAD_ROWS * len(hs)
    return total / sum(ROUND_SIZES)


def choose(probe: Probe) -> tuple[tuple[int, ...], int, bool]:
    """``(heights, unit, panels)``: the tiles :func:`tile_plan` allows.

    The valid :func:`menus` ranked by :func:`menu_cost`; among those within
    :data:`COST_SLACK` of the cheapest, the first whose column panels agree
    with the full-width rows, else the cheapest without panels.
    """
    ranked = sorted(((menu_cost(hs), unit, hs) for unit, hs in menus(probe)), key=lambda c: (c[0], c[1]))
    for cost, unit, hs in ranked:
        if cost > COST_SLACK * ranked[0][0]:
            break
        if probe.panels_agree(hs):
            return hs, unit, True
    _, unit, hs = ranked[0]
    return hs, unit, False


@functools.cache
def tile_plan(n: int) -> TilePlan:
    """The checked call shapes for products with ``n`` columns (memoised per process)."""
    heights, unit, panels_ok = choose(Probe(n))
    if heights == (1,) and n >= 64:
        warnings.warn(
            f"this BLAS computes a row of a matrix product differently depending on the call's shape for every "
            f"tile menu fastsm tried (N = {n}); products run one row per call to stay deterministic (slow)",
            RuntimeWarning, stacklevel=2)
    return TilePlan(np.array(heights, dtype=np.int64), int(unit), panel_width(n) if panels_ok else 0)


def times(A: np.ndarray, M: np.ndarray, plan: TilePlan | None = None) -> np.ndarray:
    """``A @ M`` for a square ``M``, each row computed independently of the other rows of ``A``.

    Runs on the caller's Numba threads; call inside ``thread_limits``.
    """
    m, n = A.shape
    if M.shape != (n, n):
        raise ValueError(f"times needs a square right factor with {n} rows, got {M.shape}")
    plan = tile_plan(n) if plan is None else plan
    mp = padded_rows(m, plan)
    Ap = np.zeros((mp, n))
    Ap[:m] = A
    out = np.empty((mp, n))
    plan_products(Ap, m, np.ascontiguousarray(M), np.ascontiguousarray(M), 1, out, out, plan,
                  numba.get_num_threads())
    return out[:m]
