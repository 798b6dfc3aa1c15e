"""fastsm._threads: helper threads, worker pools and their stop flag on Ctrl-C."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from fastsm import datasets, tgp
from fastsm._interrupt import run_interruptible
from fastsm._threads import chunk_bounds, run_chunks, threading_layer, worker_pool
from tests.conftest import ROOT, run_python


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
    # glibc gives threads that contend for malloc an arena of their own (64 MB of address space each, up to
    # 8 a core): 145-282 MB of growth without any leak on an idle machine, before and after #55's row loops;
    # with two arenas at most, 18-27 MB.  A leak of the 100 callers' threads holds 800 MB of stacks alone.
    out = run_python(code, env=dict(os.environ, MALLOC_ARENA_MAX="2"))
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


@pytest.mark.determinism
def test_fit_is_bitwise_independent_of_threads(toy300):
    """Regression test of #6, item 1."""
    Xtr, Xte, Ytr, _ = toy300
    m1, m2 = tgp.fit(Xtr, Ytr, threads=1), tgp.fit(Xtr, Ytr, threads=2)
    for k in ("Wx", "Wy", "Wxy", "G", "ridge_coef"):
        np.testing.assert_array_equal(getattr(m1, k), getattr(m2, k))
    assert (m1.logdet_x, m1.logdet_y, m1.logdet_xy) == (m2.logdet_x, m2.logdet_y, m2.logdet_xy)
    p1 = tgp.predict(m1, Xte, method="sm", threads=1)
    p2 = tgp.predict(m2, Xte, method="sm", threads=2)
    np.testing.assert_array_equal(p1.y, p2.y)


def test_fork_spawn_and_executor_after_a_parallel_call():
    """Regression test of #6, item 3."""
    code = """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    import numpy as np
    from fastsm import datasets, shift, tgp, threading_layer

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=60, n_test=8)
    model = tgp.fit(Xtr, Ytr)

    def job(i):
        return float(tgp.predict(model, Xte[i:i + 2], method="kl").y.sum())

    ref = [job(i) for i in range(4)]
    with mp.get_context("fork").Pool(2) as pool:
        assert pool.map(job, range(4)) == ref
    with ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
        assert list(ex.map(job, range(4))) == ref
    print("ok", threading_layer())
    """
    out = run_python(code, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
    assert "omp" not in out.stdout


def _spawn_job(i):
    from fastsm import tgp

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=60, n_test=8)
    return float(tgp.predict(tgp.fit(Xtr, Ytr), Xte[i:i + 2], method="kl").y.sum())


def test_spawn_pool():
    """Regression test of #6, item 3."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        got = pool.map(_spawn_job, range(2))
    assert got == [_spawn_job(i) for i in range(2)]


def test_the_threading_layer_is_never_gnu_openmp():
    """Regression test of #6, item 3."""
    assert threading_layer() in ("tbb", "workqueue")


def _blas_threads():
    return sorted(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_concurrent_predicts_match_sequential_and_restore_blas(toy300):
    """Regression test of #6, item 4."""
    Xtr, Xte, Ytr, _ = toy300
    m = tgp.fit(Xtr, Ytr)
    before = _blas_threads()
    ref = {meth: tgp.predict(m, Xte, method=meth).y for meth in ("kl", "sm")}
    got, errors = [], []

    def work(meth):
        try:
            for _ in range(3):
                got.append((meth, tgp.predict(m, Xte, method=meth).y))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(meth,)) for meth in ("kl", "sm", "kl", "sm")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(got) == 12
    for meth, y in got:
        np.testing.assert_array_equal(y, ref[meth])
    assert _blas_threads() == before


def test_nested_thread_limits_keep_and_restore_the_outer_settings():
    """A thread_limits inside one of the same count changes nothing (it returns at once); one of another
    count sets its own Numba threads and gives the outer's back; BLAS stays at one thread inside and at the
    user's setting after.

    Regression test of #6, item 4.
    """
    import numba

    from fastsm._threads import thread_limits

    before, numba_before = _blas_threads(), numba.get_num_threads()
    with thread_limits(2) as n:
        inner_n = numba.get_num_threads()
        with thread_limits(2):
            assert numba.get_num_threads() == inner_n and set(_blas_threads()) == {1}
        with thread_limits(1):
            assert numba.get_num_threads() == 1 and set(_blas_threads()) == {1}
            with thread_limits(1):
                assert numba.get_num_threads() == 1
        assert numba.get_num_threads() == inner_n == n and set(_blas_threads()) == {1}
    assert _blas_threads() == before and numba.get_num_threads() == numba_before


def test_workqueue_fallback_serialises_threads_and_forks():
    """Regression test of #6, item 17."""
    code = """
    import multiprocessing as mp, threading
    import numpy as np
    from fastsm import datasets, shift, tgp, threading_layer

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=80, n_test=16)
    m = tgp.fit(Xtr, Ytr)
    ref = tgp.predict(m, Xte, method="sm").y
    got = []
    ts = [threading.Thread(target=lambda: got.append(tgp.predict(m, Xte, method="sm").y)) for _ in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    assert len(got) == 4 and all(np.array_equal(g, ref) for g in got)
    # every parallel kernel runs under the lock: the ridge start's nearest-output check, the region
    # models' pool, KLIEP's problem set-up and weights (before: "Concurrent access has been detected")
    loc = tgp.fit_local(Xtr, Ytr, n_neighbors=30, share="region", region_size=8, cache_bytes=0)
    lref = tgp.predict(loc, Xte, method="kl", max_iter=3).y
    wref = shift.estimate_weights(Xtr, Xte, sigma=1.0, max_iter=50).weights
    bad = []
    def mixed():
        for _ in range(6):
            bad.append(not np.array_equal(tgp.predict(loc, Xte, method="kl", max_iter=3).y, lref))
            bad.append(not np.array_equal(shift.estimate_weights(Xtr, Xte, sigma=1.0, max_iter=50).weights, wref))
    ts = [threading.Thread(target=mixed) for _ in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    assert len(bad) == 48 and not any(bad)
    def job(i):
        return float(tgp.predict(m, Xte[i:i + 2], method="kl").y.sum())

    with mp.get_context("fork").Pool(2) as pool:
        assert pool.map(job, range(3)) == [job(i) for i in range(3)]
    print(threading_layer())
    """
    env = dict(os.environ, PYTHONPATH=ROOT, NUMBA_THREADING_LAYER="workqueue")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         timeout=180, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "workqueue"


@pytest.mark.parametrize("how", ["os.fork", "multiprocessing"])
def test_fork_while_another_thread_predicts_never_hangs(how):
    """Before: the caller waited forever for work handed to a helper that was exiting for the fork.

    Regression test of #19, item 2.
    """
    code = f"""
    import os, sys, threading, time
    import multiprocessing as mp
    import numpy as np
    from fastsm import datasets, tgp

    X, Xt, Y, _ = datasets.toy1(0, n_train=200, n_test=60)   # large enough for the helper thread
    m = tgp.fit(X, Y)
    ref = tgp.predict(m, Xt, max_iter=3).y
    stop, done, bad = threading.Event(), [0], []

    def worker():
        while not stop.is_set():
            y = tgp.predict(m, Xt, max_iter=3).y
            done[0] += 1
            if not np.array_equal(y, ref):
                bad.append(1)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    end, forks = time.monotonic() + 3.0, 0
    while time.monotonic() < end:
        if "{how}" == "os.fork":
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        else:
            p = mp.get_context("fork").Process(target=int)
            p.start(); p.join()
        forks += 1
    stop.set()
    t.join(60)
    print("hung" if t.is_alive() else "ok", forks, done[0], len(bad))
    sys.stdout.flush()
    os._exit(0)
    """
    out = run_python(code, timeout=240)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith(("ok", "hung"))]
    assert out.returncode == 0 and last, out.stderr[-2000:]
    status, forks, done, bad = last[-1].split()
    assert status == "ok" and int(forks) > 10 and int(done) > 1 and bad == "0", last[-1]


def test_fork_beside_a_region_model_prediction_never_hangs():
    """Before: the child inherited the region cache's locks held by the predicting thread and hung.

    25 forks, each child predicting with the inherited model (which needs the cache's locks) within a
    60 s timeout; on 977cd67..5145bb0 the first hang came within the first few forks.  Under TBB, also
    that TBB shut down for every fork: on 5d4c55b the layer started in a pool thread ("Attempted to fork
    from a non-main thread" at every fork) and a clean-clone CI run saw a child hang in 1 of 25 forks;
    threads that had just ended kept TBB from shutting down ("Unable to join threads", 1-2 in 100).

    Regression test of #30, item 1.
    """
    code = """
    import os, sys, threading, time
    import numpy as np
    from fastsm import datasets, tgp

    X, Xt, Y, _ = datasets.smooth_manifold(0, n_train=600, n_test=40)
    params = tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3)
    # cache_bytes=0: every prediction factorises its regions again, so the locks are busy all the time
    m = tgp.fit_local(X, Y, params, n_neighbors=60, share="region", region_size=10, cache_bytes=0)
    ref = tgp.predict(m, Xt, method="kl", max_iter=2).y
    stop, done = threading.Event(), [0]

    def worker():
        while not stop.is_set():
            tgp.predict(m, Xt, method="kl", max_iter=2)
            done[0] += 1

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    while done[0] == 0:
        time.sleep(0.01)
    hung = forks = bad = 0
    for _ in range(25):
        time.sleep(0.005 * (forks % 7))
        pid = os.fork()
        if pid == 0:
            y = tgp.predict(m, Xt, method="kl", max_iter=2).y
            os._exit(0 if np.array_equal(y, ref) else 3)
        forks += 1
        end = time.monotonic() + 60
        while True:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid:
                bad += os.waitstatus_to_exitcode(status) != 0
                break
            if time.monotonic() > end:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                hung += 1
                break
            time.sleep(0.01)
    stop.set()
    t.join(60)
    print("result", forks, hung, bad, done[0])
    sys.stdout.flush()
    os._exit(0)
    """
    out = run_python(code, timeout=1800)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("result")]
    assert out.returncode == 0 and last, out.stderr[-2000:]
    _, forks, hung, bad, done = last[-1].split()
    assert int(forks) == 25 and hung == "0" and bad == "0" and int(done) > 1, last[-1]
    for message in ("non-main thread", "Unable to join threads"):
        assert message not in out.stdout + out.stderr, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("n, parts", [(0, 2), (1, 4), (5, 2), (7, 3), (1000, 16)])
def test_chunk_bounds_cover_the_range_in_near_equal_contiguous_parts(n, parts):
    bounds = chunk_bounds(n, parts)
    covered = [i for s, e in bounds for i in range(s, e)]
    assert covered == list(range(n))
    sizes = [e - s for s, e in bounds]
    assert len(bounds) == min(parts, n) and (not sizes or max(sizes) - min(sizes) <= 1)


def test_run_chunks_runs_every_chunk_on_its_own_thread_and_raises_a_chunks_error():
    """``run_chunks``: each chunk once, offset by ``start``, one pool thread each; a chunk's exception
    reaches the caller once the chunks already running have ended (those not started are cancelled)."""
    seen, names = [], set()
    both = threading.Barrier(2)

    def work(s, e):
        seen.append((s, e))
        names.add(threading.current_thread().name)
        both.wait(timeout=30)  # the two chunks are in flight at once, on two threads

    run_chunks(10, 2, work, start=100)
    assert sorted(seen) == [(100, 105), (105, 110)]
    assert len(names) == 2 and all(n.startswith("fastsm-chunk") for n in names)
    started, ended = [], []

    def failing(s, e):
        started.append(s)
        time.sleep(0.05 if s else 0.0)
        ended.append(s)
        if s == 0:
            raise ValueError("chunk 0")

    with pytest.raises(ValueError, match="chunk 0"):
        run_chunks(4, 2, failing)
    assert 0 in ended and sorted(ended) == sorted(started)  # nothing still running when it is raised
    seen.clear()
    run_chunks(3, 1, lambda s, e: seen.append((s, e, threading.current_thread().name)))  # one chunk: this thread
    assert seen == [(0, 3, threading.current_thread().name)]
