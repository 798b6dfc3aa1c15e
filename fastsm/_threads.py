"""Numba and BLAS thread control, restored in ``finally``."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import numba
from threadpoolctl import ThreadpoolController


@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    # scanning the loaded libraries costs ~1 ms; do it once (libraries loaded
    # later, e.g. by an import after the first call, are picked up by the
    # next process only -- BLAS is loaded by numpy/scipy before any call here)
    return ThreadpoolController()


def resolve_threads(threads: int | None) -> int:
    """Number of threads to use; ``None`` means all Numba threads."""
    if threads is None:
        return numba.config.NUMBA_NUM_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be a positive int or None, got {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return min(threads, numba.config.NUMBA_NUM_THREADS, os.cpu_count() or threads)


@contextlib.contextmanager
def thread_limits(threads: int | None, *, blas: str = "single") -> Iterator[int]:
    """Set Numba and BLAS threads for the duration of a call.

    ``blas="single"`` (kernel calls): Numba's pool does all the work and each
    of its threads calls a single-threaded BLAS on its own row block, so two
    spinning thread pools never fight over the cores.  ``blas="same"``
    (plain NumPy/SciPy work such as ``fit``): BLAS gets the same count.
    The previous settings are restored in ``finally``.
    """
    n = resolve_threads(threads)
    previous = numba.get_num_threads()
    numba.set_num_threads(n)
    try:
        with _controller().limit(limits=1 if blas == "single" else n, user_api="blas"):
            yield n
    finally:
        numba.set_num_threads(previous)
