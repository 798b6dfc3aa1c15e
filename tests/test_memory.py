"""fastsm._memory: a fit that cannot fit in memory is refused before any work (#53 item 5)."""

import os
import subprocess
import sys
import textwrap

import pytest

from fastsm import _memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_available_memory_is_known_on_linux():
    free = _memory.available_bytes()
    if sys.platform.startswith("linux"):
        assert free is not None and free > 0


def test_a_call_that_needs_more_than_is_available_is_refused(monkeypatch):
    monkeypatch.setattr(_memory, "available_bytes", lambda: 2**30)
    with pytest.raises(MemoryError, match=r"the thing needs about 2.0 GiB, but this process can allocate 1.0 GiB; "
                                          r"do less"):
        _memory.check_memory(2.0 * 2**30, "the thing", "do less")
    _memory.check_memory(0.5 * 2**30, "the thing", "do less")
    monkeypatch.setenv("FASTSM_NO_MEMORY_CHECK", "1")
    _memory.check_memory(2.0 * 2**30, "the thing", "do less")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_fit_and_loo_beyond_an_address_space_limit_are_refused_at_once():
    """Before: under a 5 GB cap, ``tgp.fit`` at N = 20 000 computed for 18 s and then raised Numba's bare
    "Allocation failed (probably too large)".  Here the cap is 3 GiB above what the process uses."""
    code = """
    import resource, time
    import numpy as np
    from fastsm import datasets, tgp
    X, _, Y, _ = datasets.random_structured(0, n_train=20000, n_test=1, dx=3, dy=2)
    small = tgp.fit(X[:300], Y[:300])
    used = int([ln for ln in open("/proc/self/status") if ln.startswith("VmSize")][0].split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + 3 * 2**30, resource.RLIM_INFINITY))
    for call in (lambda: tgp.fit(X, Y), lambda: tgp.fit_local(X, Y, n_neighbors=15000)):
        t0 = time.perf_counter()
        try:
            call()
            print("no error")
        except MemoryError as exc:
            print(f"{time.perf_counter() - t0:.2f}", exc)
    """
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("FASTSM_NO_MEMORY_CHECK", None)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stdout
    for line, what, advice in zip(lines, ("N = 20000 training points", "n_neighbors = 15000 points"),
                                  ("fastsm.tgp.fit_local", "fewer n_neighbors"), strict=True):
        seconds, message = line.split(" ", 1)
        assert float(seconds) < 10.0, line  # before any work (measured 0.0 s)
        assert what in message and advice in message, line
