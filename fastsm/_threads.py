"""Threading layer, thread counts, BLAS limits, worker pools and fork safety of kernel calls.

Threading layer: :mod:`fastsm._layer`.

BLAS
    Each Numba thread calls a single-threaded DGEMM on its own block, so BLAS
    is limited to one thread while fastsm computes.  The limit is process-wide
    (OpenBLAS has no per-thread setting), so concurrent fastsm calls share one
    reference-counted limit and the last one out restores the user's setting.

Interrupts
    :mod:`fastsm._interrupt` (helper threads, Ctrl-C).

Fork
    TBB must shut its workers down before ``fork()``, which it cannot do
    while another thread runs a parallel kernel.  A ``fork()`` from any
    thread therefore (1) closes the helper threads, which first finish the
    calls already handed to them, (2) waits for kernel calls running in other
    threads to end and holds new ones back, and (3) lets them go on after the
    fork.  A call that finds its helper closed runs in its own thread.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np
from threadpoolctl import ThreadpoolController

from fastsm._layer import configure_threading_layer, launch_in_main_thread, parallel_initialized, threading_layer

__all__ = ["configure_threading_layer", "threading_layer", "resolve_threads", "thread_limits", "Compute",
           "worker_pool", "run_chunks", "chunk_bounds", "stop_requested", "check_stop", "Stopped", "pool_stop",
           "remember_thread", "await_ended_threads", "cores"]

def resolve_threads(threads: int | None) -> int:
    """Number of threads to use; ``None`` means all Numba threads."""
    if threads is None:
        return numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    if isinstance(threads, bool) or not isinstance(threads, numbers.Integral):
        raise TypeError(f"threads must be a positive int or None, got {threads!r}")
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    return min(threads, numba.config.NUMBA_NUM_THREADS, _cpu_count() or threads)


@functools.lru_cache(maxsize=1)
def _cpu_count() -> int | None:
    # os.cpu_count() reads /sys on every call (~17 us; a local prediction resolves threads ~6 times a group)
    return os.cpu_count()


def cores() -> int:
    """Cores this process may run on (its affinity; elsewhere than Linux, the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def _controller() -> ThreadpoolController:
    # scanning the loaded libraries costs ~1 ms; do it once (BLAS is loaded
    # by numpy/scipy before any call here)
    return ThreadpoolController()


class _SharedBlasLimit:
    """One process-wide "BLAS at one thread" limit, reference-counted."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved: list[tuple[Any, int]] = []

    @staticmethod
    def _set(lib, n: int) -> None:
        # threadpoolctl >= 3.6 lets only one "controlling" Python thread change
        # OpenBLAS's process-wide limit and silently ignores the others (their
        # GEMMs then ran on 2 BLAS threads: other rounding, and the limit leaked);
        # this class already serialises the changes, so it sets the limit itself
        setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
        setter(n)

    def __enter__(self) -> None:
        with self.lock:
            if self.users == 0:
                self.saved = [(lib, lib.get_num_threads()) for lib in _controller().lib_controllers
                              if lib.user_api == "blas"]
                for lib, _ in self.saved:
                    self._set(lib, 1)
            self.users += 1

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0:
                for lib, n in self.saved:
                    self._set(lib, n)
                self.saved = []


class _KernelLock:
    """Serialises kernel launches where the threading layer is not thread-safe (workqueue)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.lock = threading.RLock()

    @contextlib.contextmanager
    def held_if_needed(self) -> Iterator[None]:
        if parallel_initialized() and numba.threading_layer() != "workqueue":
            yield
            return
        with self.lock:
            yield


class _ForkGate:
    """Kernel calls in flight, counted so that ``fork()`` can wait for them and hold new ones back.

    Reentrant per thread (a call inside a call is counted once).  The wait
    before a fork is bounded, so a fork from inside a kernel call (a progress
    callback, say) is delayed, never deadlocked.
    """

    #: seconds ``fork()`` waits for running kernel calls
    FORK_WAIT = 60.0

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.active = 0
        self.forking = False
        self.depth = threading.local()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        depth = getattr(self.depth, "n", 0)
        if depth == 0:
            with self.cond:
                while self.forking:
                    self.cond.wait()
                self.active += 1
        self.depth.n = depth + 1
        try:
            yield
        finally:
            self.depth.n = depth
            if depth == 0:
                with self.cond:
                    self.active -= 1
                    self.cond.notify_all()

    def join(self) -> None:
        """Make this thread's calls part of the call that started it (a pool thread's initializer)."""
        self.depth.n = 1

    def close(self) -> None:
        with self.cond:
            self.forking = True
            own = 1 if getattr(self.depth, "n", 0) else 0
            self.cond.wait_for(lambda: self.active <= own, timeout=self.FORK_WAIT)

    def open(self) -> None:
        with self.cond:
            self.forking = False
            self.cond.notify_all()


_BLAS = _SharedBlasLimit()
_KERNEL_LOCK = _KernelLock()
_GATE = _ForkGate()


def _after_fork_in_child() -> None:
    # a lock held by another thread at fork time would never be released here,
    # and the parent's helper threads do not exist in the child
    _BLAS._reset()
    _KERNEL_LOCK._reset()
    _GATE._reset()
    _LIMITS.__dict__.clear()
    _POOL.__dict__.clear()
    _OWN_THREADS.clear()


def _close_gate_for_fork() -> None:
    # kernel calls in other threads end first, new ones wait until after the fork (after the helper
    # threads of fastsm._interrupt have closed: "before" hooks run in reverse order of registration)
    _GATE.close()
    await_ended_threads()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_close_gate_for_fork, after_in_parent=lambda: _GATE.open(),
                        after_in_child=_after_fork_in_child)


class Compute:
    """Handle passed to the body of :func:`compute`."""

    def __init__(self, n_threads: int) -> None:
        self.n_threads = n_threads
        #: polled by long kernels; set to 1 on Ctrl-C
        self.stop = np.zeros(1, dtype=np.int64)


@contextlib.contextmanager
def thread_limits(threads: int | None) -> Iterator[int]:
    """Numba threads for the calling thread, BLAS at one thread, kernel lock.

    Numba's thread count is thread-local; BLAS's limit is shared (see
    :class:`_SharedBlasLimit`).  Everything is restored in ``finally``.
    """
    n = resolve_threads(threads)
    if getattr(_LIMITS, "n", 0) == n:  # inside a thread_limits(n) of this thread: everything is set
        yield n
        return
    launch_in_main_thread()
    previous = numba.get_num_threads()
    outer = getattr(_LIMITS, "n", 0)
    with _GATE.running(), _KERNEL_LOCK.held_if_needed(), _BLAS:
        numba.set_num_threads(n)
        _LIMITS.n = n
        try:
            yield n
        finally:
            _LIMITS.n = outer
            numba.set_num_threads(previous)


#: The thread count of the innermost :func:`thread_limits` of each thread (0 outside)
_LIMITS = threading.local()


#: OS ids of fastsm's pool and helper threads; ``fork()`` waits for the ended ones to leave the OS
_OWN_THREADS: set[int] = set()


def remember_thread(tid: int) -> None:
    """Note ``tid`` (an OS thread id of fastsm's) for :func:`await_ended_threads`."""
    _OWN_THREADS.add(tid)
    if len(_OWN_THREADS) > 64:  # forget the threads that have left the OS (a pool per local predict)
        try:
            present = {int(t) for t in os.listdir("/proc/self/task")}
        except OSError:
            present = set()
        _OWN_THREADS.intersection_update(present)


#: Per thread: the stop flag of the :func:`worker_pool` the thread belongs to (unset outside pools)
_POOL = threading.local()


def pool_stop() -> np.ndarray | None:
    """The stop flag of the :func:`worker_pool` this thread belongs to, or ``None`` outside pools."""
    return getattr(_POOL, "stop", None)


def stop_requested() -> bool:
    """Whether this thread's :func:`worker_pool` was told to stop (its block ended by an exception)."""
    stop = getattr(_POOL, "stop", None)
    return stop is not None and bool(stop[0])


class Stopped(Exception):
    """Raised by :func:`check_stop` in a :func:`worker_pool` thread told to stop: its work is abandoned."""


def check_stop() -> None:
    """Raise :class:`Stopped` if :func:`stop_requested`: between the stages of long work on a pool's thread (a
    factorisation of a shared local model), so Ctrl-C does not wait for the rest of it."""
    if stop_requested():
        raise Stopped


def _pool_thread_start(stop: np.ndarray) -> None:
    _GATE.join()
    _POOL.stop = stop
    remember_thread(threading.get_native_id())


def await_ended_threads(timeout: float = 1.0) -> None:
    """Wait (at most ``timeout`` s) until fastsm's ended threads are gone from the OS as well.

    ``Thread.join`` returns before the OS thread runs its thread-local
    destructors, where TBB lets go of the thread; until then TBB cannot
    shut down for ``fork()`` ("Unable to join threads to shut down before
    fork()") and the child's first parallel kernel may hang.
    """
    tasks = "/proc/self/task"
    if not os.path.isdir(tasks):
        _OWN_THREADS.clear()
        return
    alive = {t.native_id for t in threading.enumerate()}
    end = time.monotonic() + timeout
    for tid in list(_OWN_THREADS):
        if tid in alive:
            continue
        while os.path.exists(f"{tasks}/{tid}") and time.monotonic() < end:
            time.sleep(1e-4)
        _OWN_THREADS.discard(tid)


@contextlib.contextmanager
def worker_pool(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """A pool for concurrent fastsm calls, open for the ``with`` block; its threads are joined at the end.

    The pool counts as one kernel call in flight (its threads' calls are part
    of it), so ``fork()`` waits for the block to end: a live thread that used
    TBB keeps TBB from shutting down for the fork.  Numba's threading layer
    starts first, in the main thread (:func:`fastsm._layer.launch_in_main_thread`).

    The pool's threads run their :func:`run_interruptible` calls themselves (no helper thread:
    the pool's threads end with the block) and share one stop flag.  When the block ends by an
    exception (Ctrl-C in the caller), the flag is set, so the calls in flight return after their
    current evaluation round, and the calls not yet started are cancelled.
    """
    launch_in_main_thread()
    stop = np.zeros(1, dtype=np.int64)
    with _GATE.running(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name,
                                             initializer=_pool_thread_start, initargs=(stop,)) as pool:
        try:
            yield pool
        except BaseException:
            stop[0] = 1
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def chunk_bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` (at most ``n``) contiguous ranges covering ``range(n)``, sizes differing by at most one."""
    parts = max(1, min(parts, n))
    edges = [n * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts) if edges[i + 1] > edges[i]]


def run_chunks(n: int, threads: int, work: Callable[[int, int], Any], start: int = 0) -> None:
    """``work(s, e)`` for ``threads`` contiguous chunks of ``range(start, start + n)``, one per thread of a
    :func:`worker_pool` (in this thread when one chunk is all there is).

    How the prediction kernels use threads: each runs in one thread, on its own points, and a
    point's result depends on its own data only, so the split changes no bit.  ``work`` writes its
    chunk's results; an exception in a chunk is raised here once the chunks already running have
    ended (those not started are cancelled).
    """
    bounds = [(start + s, start + e) for s, e in chunk_bounds(n, threads)]
    if len(bounds) <= 1:
        for s, e in bounds:
            work(s, e)
        return
    with worker_pool(len(bounds), "fastsm-chunk") as pool:
        futures = [pool.submit(work, s, e) for s, e in bounds]
        for f in futures:
            f.result()
