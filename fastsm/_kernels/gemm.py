"""Names kept only so that Numba cache indexes written by fastsm 0.2.0 before #55's row loops still load.

Numba unpickles a cache index, argument types included, before it compares the index's source
stamp; an index whose kernels took the plan types that lived here (the DTRSM/DTRMM tile plans,
removed with the tiles) would raise ``ModuleNotFoundError`` on the first prediction of an upgraded
installation whose ``__pycache__`` kept them.  With the classes importable the stale entries load,
match no signature of today's kernels and are compiled anew.  Nothing in fastsm uses them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TilePlan(NamedTuple):
    """The former tile plan's fields (see the module docstring)."""

    heights: np.ndarray
    unit: int
    rows: bool = False
    solve: int = 0


class RowPlan(TilePlan):
    """The former row-loop plan (see the module docstring)."""

    __slots__ = ()
