"""Numba's threading layer: TBB, else workqueue, never GNU OpenMP by default.

Numba's GNU OpenMP layer is not fork-safe (``fork()`` after a parallel
call hangs or aborts a ``multiprocessing`` pool) and spin-waits, which
slows down every process beside it.  At import, unless the user chose a
layer (``NUMBA_THREADING_LAYER`` / ``NUMBA_THREADING_LAYER_PRIORITY`` or
``numba.config.THREADING_LAYER``) or a parallel kernel already ran, fastsm
makes TBB loadable (the ``tbb`` wheel installs ``libtbb.so.12`` into
``<prefix>/lib``, which is not on the loader path, so Numba reports
"TBB disabled: Unknown import problem") and sets the priority
``tbb > workqueue > omp``.  TBB is fork-safe and thread-safe.  Where it is
unavailable the fallback is ``workqueue``: fork-safe and without spinning,
but it aborts the process when two threads launch parallel kernels at
once, so fastsm then serialises its kernel calls with a lock.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import sysconfig
import threading

import numba
import numpy as np

_PRIORITY = ["tbb", "workqueue", "omp"]
_TBB_NAMES = {"linux": "libtbb.so.12*", "darwin": "libtbb.12*.dylib", "win32": "tbb12*.dll"}


def _tbb_candidates() -> list[str]:
    pattern = _TBB_NAMES.get(sys.platform, "libtbb.so.12*")
    dirs = {os.path.join(sys.prefix, "lib"), os.path.join(sys.prefix, "Library", "bin")}
    data = sysconfig.get_paths().get("data")
    if data:
        dirs.add(os.path.join(data, "lib"))
    found: list[str] = []
    for d in sorted(dirs):
        found.extend(sorted(glob.glob(os.path.join(d, pattern)), key=len))
    return found


def parallel_initialized() -> bool:
    from numba.np.ufunc import parallel

    return bool(parallel._is_initialized)


def configure_threading_layer() -> None:
    """Prefer TBB, then workqueue, over GNU OpenMP (see the module docstring).

    Does nothing if the user chose a layer or a parallel kernel already ran.
    """
    if os.environ.get("NUMBA_THREADING_LAYER") or os.environ.get("NUMBA_THREADING_LAYER_PRIORITY"):
        return
    if numba.config.THREADING_LAYER != "default" or parallel_initialized():  # type: ignore[attr-defined]
        return
    for path in _tbb_candidates():
        try:
            ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
            break
        except OSError:
            continue
    numba.config.THREADING_LAYER_PRIORITY = list(_PRIORITY)  # type: ignore[attr-defined]


def launch_in_main_thread() -> None:
    """Start Numba's threading layer now if this is the main thread and no parallel kernel ran yet.

    Numba's TBB layer shuts its workers down before ``fork()`` only when the
    fork comes from the thread that started the layer (elsewhere it prints
    "Attempted to fork from a non-main thread" and the child may hang in its
    first parallel kernel).  fastsm's large calls run in helper threads, so
    the layer would otherwise start in one of those.
    """
    if parallel_initialized() or threading.current_thread() is not threading.main_thread():
        return
    from numba.np.ufunc import parallel

    launch = getattr(parallel, "_launch_threads", None)
    if launch is not None:
        launch()


def threading_layer() -> str:
    """The Numba threading layer fastsm runs on (``"tbb"``, ``"workqueue"`` or ``"omp"``).

    Before the first parallel kernel has run, the layer Numba will choose is
    determined by running a trivial parallel kernel.
    """
    if not parallel_initialized():
        _probe(np.zeros(2))
    return numba.threading_layer()


@numba.njit(parallel=True, cache=False)
def _probe(x):  # pragma: no cover - trivial
    for i in numba.prange(x.shape[0]):
        x[i] = i
