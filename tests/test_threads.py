"""fastsm._threads: helper threads, worker pools and their stop flag on Ctrl-C."""

import time

import pytest

from fastsm._interrupt import run_interruptible
from fastsm._threads import worker_pool
from tests.conftest import run_python


def test_ended_callers_and_worker_pools_leave_no_threads_behind():
    """#53 item 1: before, every ended calling thread left its helper ("fastsm-kernel") alive, and
    every local prediction's pool threads each left one: 100 short-lived callers left 101 helpers,
    and a loop of region-model predictions grew by two threads (and ~8 MB of address space) a call
    until thread creation failed.  Every call here uses a helper (the size threshold set to 0)."""
    code = """
    import gc, threading, time
    from fastsm import datasets, tgp
    import fastsm._interrupt as th
    th.INTERRUPTIBLE_FLOPS = 0.0
    X, Xt, Y, _ = datasets.toy1(0, n_train=100, n_test=10)
    m = tgp.fit(X, Y)
    local = tgp.fit_local(X, Y, n_neighbors=40, share="region")
    tgp.predict(local, Xt, threads=2, max_iter=3)
    vm = lambda: int([ln for ln in open("/proc/self/status") if ln.startswith("VmSize")][0].split()[1]) // 1024
    helpers = lambda: sum(t.name == "fastsm-kernel" for t in threading.enumerate())
    def settle():
        gc.collect()
        end = time.monotonic() + 10.0
        while helpers() > 1 and time.monotonic() < end:
            time.sleep(0.01)
    settle()
    before = vm()
    for _ in range(100):
        t = threading.Thread(target=lambda: tgp.predict(m, Xt, max_iter=3))
        t.start()
        t.join()
    settle()
    print("callers", helpers(), threading.active_count(), vm() - before)
    for _ in range(200):
        tgp.predict(local, Xt, threads=2, max_iter=3)
    settle()
    print("region", helpers(), threading.active_count(), vm() - before)
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in out.stdout.splitlines():
        name, helpers, threads, grown = line.split()
        # the main thread's own helper at most; before: 101 after the callers, 501 after the loop
        assert int(helpers) <= 1 and int(threads) <= 2, line
        assert int(grown) < 256, line  # MB of address space; before: ~1.6 GB after the callers


def test_an_exception_in_a_worker_pool_stops_its_calls_and_cancels_its_queue():
    """#53 item 9: Ctrl-C in a ``share="cluster"`` prediction waited for the groups in flight to finish
    (their calls polled a stop flag of their own that nothing set) and ran the groups queued by ``submit``:
    N = 8000, K = 800, groups of 128: 5.2-7.2 s from the signal to ``KeyboardInterrupt``, 1.6-1.9 s after
    (the group stage in flight).  Here: two calls in flight stop, four queued ones never start."""
    seen = []

    def job(i):
        def body(handle):
            end = time.monotonic() + 3.0
            while not handle.stop[0] and time.monotonic() < end:
                time.sleep(0.005)
            return bool(handle.stop[0])

        seen.append(run_interruptible(1, body))  # a large call: before, in a helper thread with its own flag
        return i

    with pytest.raises(KeyboardInterrupt):
        with worker_pool(2, "fastsm-test") as pool:
            [pool.submit(job, i) for i in range(6)]
            time.sleep(0.2)
            raise KeyboardInterrupt
    assert seen == [True, True], seen  # True: stopped by the flag before its 3 s; before: [False] * 6, after 9 s
