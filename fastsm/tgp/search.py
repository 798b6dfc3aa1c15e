"""The search space of :func:`fastsm.tgp.select`: its grids, their validation and the coordinate search.

Widths are numbers or relative to the data (``"scale"``, ``"f*scale"``: :mod:`fastsm.tgp.params`); the
coordinate search sweeps one axis at a time from the defaults (docs/selection.md, "TwinGPRegressorCV").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fastsm._validation import check_scalar
from fastsm.tgp.params import scale_factor, scale_gamma

#: [SM] §5.2: alpha from 0 to 1 in steps of 0.05 (the open interval), beta in {0.5, 0.99, 1.5}.
PAPER_ALPHAS: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 20))
PAPER_BETAS: tuple[float, ...] = (0.5, 0.99, 1.5)
COLUMNS = ("gamma_x", "gamma_y", "lambda_x", "lambda_y", "alpha", "beta")
#: TwinGPRegressorCV's default width grids: 1/64 … 4 and 1/8 … 2 times ``"scale"`` (docs/realdata.md).
GAMMA_X_GRID: tuple[str, ...] = tuple("scale" if k == 0 else f"{2.0 ** k:g}*scale" for k in range(-6, 3))
GAMMA_Y_GRID: tuple[str, ...] = tuple("scale" if k == 0 else f"{2.0 ** k:g}*scale" for k in range(-3, 2))
#: TwinGPRegressorCV's default grid of lambda_x and of lambda_y.
LAMBDA_GRID: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
#: TwinGPRegressorCV's default alphas: from near the KLTGP limit (alpha -> 0) to [SM] Toy 1's 0.9.
DEFAULT_ALPHAS: tuple[float, ...] = (0.01, 0.1, 0.25, 0.5, 0.75, 0.9)
#: Rounds of the coordinate search at most (``select(search="coordinate")``).
MAX_ROUNDS = 3
SEARCHES = ("grid", "coordinate", "descent", "auto")


def param_grid(name: str, values, default, *, positive: bool, open_unit: bool = False,
          relative: bool = False) -> tuple:
    """A grid as a tuple; with ``relative`` its entries may be ``"scale"`` strings (:func:`scale_factor`)."""
    if values is None:
        return (default,)
    if np.isscalar(values):
        values = (values,)
    try:
        values = tuple(values)
    except TypeError:
        raise TypeError(f"{name} must be a number or a sequence of numbers, got {type(values).__name__}") from None
    if not values:
        raise ValueError(f"{name} must not be empty")
    out: list[float | str] = []
    for v in values:
        if relative and isinstance(v, str):
            scale_factor(name, v)
            out.append(v.strip())
        elif open_unit:
            out.append(check_scalar(name, v, low=0.0, high=1.0, low_open=True, high_open=True))
        else:
            out.append(check_scalar(name, v, low=0.0, low_open=positive))
    return tuple(out)


def absolute(name: str, value, Z: np.ndarray, const: float, w) -> float:
    f = scale_factor(name, value)
    return float(value) if f is None else scale_gamma(Z, f * const, w)


def search_start(axis: tuple, default) -> int:
    """Where the coordinate search starts on an axis: the default value if on it, else the middle."""
    for i, v in enumerate(axis):
        if v == default or (isinstance(v, str) and isinstance(default, str) and scale_factor("", v) == 1.0):
            return i
    return len(axis) // 2


def coordinate_search(axes: list[tuple], starts: list[int], score: Callable[[tuple], float]) -> tuple:
    """Cyclic coordinate search: sweep each axis at the others' best values until no sweep moves.

    ``score(index_tuple)`` is memoised by the caller; a value moves only for
    a strictly lower score (ties keep the current value), so the search is
    deterministic.  At most :data:`MAX_ROUNDS` rounds.
    """
    idx = list(starts)
    best = score(tuple(idx))
    for _ in range(MAX_ROUNDS):
        moved = False
        for d, axis in enumerate(axes):
            for j in range(len(axis)):
                trial = (*idx[:d], j, *idx[d + 1:])
                val = score(trial)
                if val < best:
                    best, idx, moved = val, list(trial), True
        if not moved:
            break
    return tuple(idx)


def descent_search(axes: list[tuple], starts: list[int], score: Callable[[tuple], float]) -> tuple:
    """Cyclic coordinate descent by neighbour steps: on each axis, from the current value, step towards
    the better neighbour while the score strictly falls; rounds until none moves.

    A local minimum along every axis (no one-step move improves), where :func:`coordinate_search`
    finds each axis's global minimum; it scores far fewer settings where the error is unimodal
    along the axes (the widths and regularisers of the LOO error, docs/selection.md).  ``score`` is
    memoised by the caller; the lower neighbour wins a tie, so the search is deterministic.  At most
    :data:`MAX_ROUNDS` rounds.
    """
    idx = list(starts)
    best = score(tuple(idx))
    for _ in range(MAX_ROUNDS):
        moved = False
        for d, axis in enumerate(axes):
            step = 0
            for s in (-1, 1):
                j = idx[d] + s
                if 0 <= j < len(axis):
                    val = score((*idx[:d], j, *idx[d + 1:]))
                    if val < best:
                        best, step = val, s
                        idx_j = j
            if step == 0:
                continue
            idx[d], moved = idx_j, True
            while 0 <= idx[d] + step < len(axis):
                trial = (*idx[:d], idx[d] + step, *idx[d + 1:])
                val = score(trial)
                if not val < best:
                    break
                best, idx = val, list(trial)
        if not moved:
            break
    return tuple(idx)
