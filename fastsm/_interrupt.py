"""Interruptible kernel calls: long kernels run in a helper thread (they release the GIL) while the
calling thread waits; Ctrl-C in the caller sets a stop flag that the kernel polls, waits for it to
return, and re-raises ``KeyboardInterrupt``.

One helper per calling thread, closed when that thread ends.  A ``fork()`` from any thread closes
the helpers first (they finish the calls already handed to them), then :mod:`fastsm._threads`
holds kernel calls back until after the fork; a call that finds its helper closed runs in its own
thread.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from fastsm._layer import launch_in_main_thread
from fastsm._threads import Compute, pool_stop, remember_thread, resolve_threads, thread_limits

__all__ = ["run_interruptible", "INTERRUPTIBLE_FLOPS"]


class _Helper:
    """A persistent daemon thread that runs submitted calls one after another.

    Daemon, so a process that exits (or is interrupted) never waits for it.
    """

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.busy = False
        self.closed = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name="fastsm-kernel", daemon=True)
        self.thread.start()
        if self.thread.native_id is not None:
            remember_thread(self.thread.native_id)

    def submit(self, item) -> bool:
        """Queue ``item``; ``False`` if the helper is closed (an item queued here always runs)."""
        with self.lock:
            if self.closed:
                return False
            self.queue.put(item)
            return True

    def _loop(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            fn, done, box = item
            self.busy = True
            try:
                box["result"] = fn()
            except BaseException as exc:  # re-raised in the caller
                box["error"] = exc
            finally:
                self.busy = False
                done.set()

    def close(self) -> None:
        """Refuse new items; the queued ones run, then the thread ends."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.queue.put(None)

    def release(self) -> None:
        """:meth:`close` for a helper whose calling thread ended (no one submits any more): no lock, so
        that a finaliser run in a forked child never waits for a lock a vanished thread held."""
        self.closed = True
        self.queue.put(None)

    def stop(self) -> None:
        self.close()
        if self.thread is not threading.current_thread():
            self.thread.join()


class _Owner:
    """Held by a calling thread's :class:`_Helpers` slot only: collected when that thread ends, which
    closes the thread's helper (a finaliser), so ended callers leave no helper thread behind."""


class _Helpers(threading.local):
    """One helper per calling thread (created on first use), closed when the calling thread ends.

    A new OS thread per call cost ~1 ms alone and, with several busy
    processes, far more; a helper per *calling* thread keeps concurrent calls
    from different Python threads concurrent.
    """

    helper: _Helper | None = None
    owner: _Owner | None = None

    def get(self) -> _Helper | None:
        """This thread's open helper; ``None`` while a fork is being prepared (run inline then)."""
        if self.helper is None or self.helper.closed or not self.helper.thread.is_alive():
            with _HELPERS_LOCK:
                if _FORKING.is_set():
                    return None
                self.helper = _Helper()
                _ALL_HELPERS.add(self.helper)
            self.owner = _Owner()
            weakref.finalize(self.owner, self.helper.release)
        return self.helper


_ALL_HELPERS: weakref.WeakSet = weakref.WeakSet()
_HELPERS_LOCK = threading.Lock()
_FORKING = threading.Event()
_HELPERS = _Helpers()
_IN_FLIGHT: weakref.WeakSet = weakref.WeakSet()


def _before_fork() -> None:
    # TBB cannot shut its workers down for fork() while a live thread holds a
    # scheduler ("Unable to join threads to shut down before fork()"): no new
    # helpers, end the helpers (they finish what was handed to them); then
    # fastsm._threads waits for kernel calls in other threads (its hook runs next)
    with _HELPERS_LOCK:
        _FORKING.set()
        helpers = list(_ALL_HELPERS)
        _ALL_HELPERS.clear()
    for helper in helpers:
        helper.close()
    for helper in helpers:
        helper.stop()


def _after_fork_in_parent() -> None:
    _FORKING.clear()


def _after_fork_in_child() -> None:
    # the parent's helper threads do not exist in the child
    _HELPERS.__dict__.clear()
    _ALL_HELPERS.clear()
    _FORKING.clear()


def _stop_in_flight() -> None:
    for handle in list(_IN_FLIGHT):
        handle.stop[0] = 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
atexit.register(_stop_in_flight)


#: Calls estimated below this many flops run in the calling thread: a helper
#: thread's hand-offs cost little on a quiet machine but up to ~60 ms per call
#: with other processes busy (measured: 3 processes, 2 cores, 15x fewer calls).
INTERRUPTIBLE_FLOPS = 2e8


def run_interruptible(threads: int | None, body: Callable[[Compute], Any], *, flops: float = np.inf) -> Any:
    """Run ``body(handle)``; for large calls in this thread's helper thread, so Ctrl-C stops it promptly.

    ``body`` makes the kernel calls (they release the GIL) and passes
    ``handle.stop`` to the long ones.  On ``KeyboardInterrupt`` in the
    caller, the flag is set, the helper's work is awaited (it returns within
    one evaluation round) and the interrupt is re-raised.  Calls estimated
    at fewer than :data:`INTERRUPTIBLE_FLOPS` (milliseconds) run directly.
    Results do not depend on the thread that runs them.
    """
    n = resolve_threads(threads)
    launch_in_main_thread()  # the layer must not start in the helper (see launch_in_main_thread)
    handle = Compute(n)
    in_pool = pool_stop()
    if in_pool is not None:  # a worker_pool thread: its pool's flag, and no helper
        handle.stop = in_pool
    if flops < INTERRUPTIBLE_FLOPS or in_pool is not None:
        with thread_limits(n):
            return body(handle)

    def target() -> Any:
        with thread_limits(n):
            return body(handle)

    _IN_FLIGHT.add(handle)
    done = threading.Event()
    box: dict[str, Any] = {}
    helper = None
    try:
        helper = _HELPERS.get()
        if helper is None or not helper.submit((target, done, box)):
            helper = None  # closed for a fork: run here
            return target()
        while not done.wait(0.1):
            if not helper.thread.is_alive() and not done.is_set():
                raise RuntimeError("fastsm's kernel thread ended without running the call")  # pragma: no cover
    except BaseException:
        # Ctrl-C (or any exception) in the caller: stop the kernel and wait for
        # the helper to return -- unless the call never reached it
        handle.stop[0] = 1
        while helper is not None and not done.wait(0.05):
            if not helper.busy and helper.queue.empty():
                break  # never queued, or queued and about to return at once (stop is set)
        raise
    finally:
        _IN_FLIGHT.discard(handle)
    if "error" in box:
        raise box["error"]
    return box.get("result")
