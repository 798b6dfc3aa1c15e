"""One place for the Numba compilation flags and numerical defaults.

Every kernel in :mod:`fastsm._kernels` is compiled through :func:`kernel`, so
caching and floating-point flags are identical everywhere and no kernel is
recompiled by surprise.  ``fastmath`` is an explicit flag set *without*
``nnan``/``ninf``: those two let LLVM delete NaN/inf checks, which is how NaNs
silently escaped in other projects (see umap's history).
"""

from __future__ import annotations

import numba

#: LLVM fast-math flags used by every kernel (no ``nnan``/``ninf``/``afn``).
FASTMATH_FLAGS: frozenset[str] = frozenset({"nsz", "arcp", "contract", "reassoc"})

#: Floor applied to the Schur complements eta (MATH §2); hits are counted.
ETA_FLOOR_REL: float = 64.0 * 2.220446049250313e-16

#: Default maximum number of quasi-Newton iterations per test point ([SM] §5.2).
DEFAULT_MAX_ITER: int = 50

#: Default step tolerance, relative to the output spread.
DEFAULT_TOL: float = 1e-8

#: Default trust radius (largest step) in units of the output spread.
DEFAULT_TRUST_RADIUS: float = 0.25

#: Default number of test points handled per batch (bounds memory use).
DEFAULT_BATCH_SIZE: int = 1024


def kernel(*, parallel: bool = False):
    """Decorator factory: ``numba.njit`` with the project's flags.

    Parameters
    ----------
    parallel : bool
        Compile with ``parallel=True`` (enables ``prange``).
    """
    return numba.njit(
        cache=True,
        fastmath=set(FASTMATH_FLAGS),
        parallel=parallel,
        nogil=True,
        error_model="numpy",
    )
