"""A helper process that compiles one kernel family while this process compiles the rest: a first run.

Numba compiles one kernel at a time, holding the GIL, so a process's first prediction on a cold cache
compiled :func:`~fastsm._kernels.predict.predict_rows` and everything it calls on one core.  About half of
that is :func:`~fastsm._kernels.optimize.minimize_batch` and its callees, which ``predict_rows`` calls by
symbol.  :func:`start_helpers` starts ``python -m fastsm._prefetch`` compiling that kernel for the argument
types this process will call it with (:func:`~fastsm._kernels.predict.first_run_split`), if Numba's cache
holds no entry of it and no other process is compiling it; this process compiles the other half
meanwhile, and when it reaches a kernel the helper is compiling it waits for the helper's save and loads
the entry (:func:`fastsm._cache.compile_lock`).  Measured in docs/performance.md, "A first run on two
cores".

No helper with ``FASTSM_COMPILE_HELPER=0``, on one core, without a cache or file locks (not POSIX), or
inside a helper.  The helper inherits this process's environment (Numba's settings, the cache folder) and
finds this fastsm first on its path; it prints nothing, and Ctrl-C in a terminal stops it with its parent.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import threading
from typing import Any

import numba

from fastsm._cache import LOCKS, locked_elsewhere
from fastsm._threads import cores

#: The environment variable that turns the helper off (``0``).
ENV = "FASTSM_COMPILE_HELPER"


def enabled() -> bool:
    """Whether helpers may start: not turned off (:data:`ENV`), more than one core, and compile locks (without
    them this process would compile the helper's kernels beside it)."""
    return LOCKS and os.environ.get(ENV, "1") != "0" and cores() > 1


def ready(kernel: Any, argtypes: tuple) -> bool:
    """Whether ``kernel`` for ``argtypes`` needs no compiling: compiled in this process, or an entry in Numba's
    cache (or no cache to share with a helper)."""
    return argtypes in kernel.overloads or kernel.lock_path(argtypes) is None or kernel.cached(argtypes)


def in_progress(kernel: Any, argtypes: tuple) -> bool:
    """Whether another process holds the compile lock of ``kernel`` for ``argtypes`` (it is compiling it)."""
    path = kernel.lock_path(argtypes)
    return path is not None and locked_elsewhere(path)


def prefetch(jobs: list) -> subprocess.Popen | None:
    """Start a helper process compiling each ``(kernel, argtypes)`` of ``jobs`` in turn (kernels of
    :func:`fastsm.config.kernel`) into Numba's cache, the jobs handed over on its standard input; returns it, or
    ``None`` where it cannot start (the compile then happens here, as without a helper).  The caller checks
    :func:`enabled`, :func:`ready` and :func:`in_progress`."""
    job = pickle.dumps([(kernel.py_func.__module__, kernel.py_func.__name__, argtypes) for kernel, argtypes in jobs])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, **{ENV: "0"}, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    folder = getattr(numba.config, "CACHE_DIR", "")  # not in numba's stubs
    if folder:
        env["NUMBA_CACHE_DIR"] = folder
    try:
        proc = subprocess.Popen([sys.executable, "-m", "fastsm._prefetch"], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:  # no process can be started here (limits, no executable)
        return None
    try:
        assert proc.stdin is not None
        proc.stdin.write(job)  # a few kB: within a pipe's buffer
        proc.stdin.close()
    except OSError:  # the helper died at start: nothing to wait for
        pass
    threading.Thread(target=proc.wait, name="fastsm-prefetch", daemon=True).start()  # reaps it when it ends
    return proc


def start_helpers(helper: list) -> bool:
    """A helper process compiling, in order, the ``(kernel, argtypes)`` of ``helper`` that are not :func:`ready`,
    unless one of them is :func:`in_progress` (a helper is at work) or no helper is :func:`enabled`.  Returns whether
    they are being compiled elsewhere."""
    if not enabled():
        return False
    todo = [(kernel, argtypes) for kernel, argtypes in helper if not ready(kernel, argtypes)]
    if not todo:
        return False
    return any(in_progress(kernel, argtypes) for kernel, argtypes in todo) or prefetch(todo) is not None


def first_run(helper: list, here: list) -> bool:
    """Split a cold compile: :func:`start_helpers` ``helper``'s kernels elsewhere; if any is compiled elsewhere, compile
    those of ``here`` in this process now (the helper loads them when it needs them).  Returns whether."""
    if not start_helpers(helper):
        return False
    for kernel, argtypes in here:
        kernel.compile(argtypes)
    return True


def compile_job(job: bytes) -> None:
    """The helper's work: compile the kernels that ``job`` (:func:`prefetch`'s pickle) names, for their types."""
    for module, name, argtypes in pickle.loads(job):
        getattr(importlib.import_module(module), name).compile(argtypes)


if __name__ == "__main__":
    compile_job(sys.stdin.buffer.read())
