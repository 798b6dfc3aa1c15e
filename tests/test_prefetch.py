"""The first run's compile helper (fastsm._prefetch) and the compile lock across processes (fastsm._cache)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import numpy as np
import pytest
from numba import types

import fastsm._cache as kc
from fastsm import datasets, tgp
from fastsm._kernels.curvature import seed_inverse
from fastsm._kernels.hessian import hessian_rows
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.quasi_newton import accept, backtrack_step, next_iteration, start_step
from fastsm._kernels.shared import call
from fastsm.config import kernel as numba_kernel
from fastsm.tgp import prediction

fcntl = pytest.importorskip("fcntl")


def test_the_split_names_the_types_predictions_compile(monkeypatch):
    """The types :func:`first_run_split` derives — at a fit (any global model's) and at each prediction — are those the
    kernels are compiled for, for every method, leave-one-out and a given start in Fortran order (a wrong one would
    have the helper compile a kernel nobody calls)."""
    asked = []
    monkeypatch.setattr(prediction, "first_run", lambda helper, here: asked.extend(helper + here))
    monkeypatch.setattr(prediction, "start_helpers", lambda helper: asked.extend(helper))
    monkeypatch.setattr(prediction, "minimize_batch", SimpleNamespace(overloads={}))  # every call is a first run
    X, Xt, Y, _ = datasets.toy1(0, n_train=40, n_test=5)
    model = tgp.fit(X, Y)
    for method in ("kl", "ikl", "sm"):
        tgp.predict(model, Xt, method=method, max_iter=3)
    tgp.predict(model, Xt, method="sm", init=np.asfortranarray(np.zeros((5, Y.shape[1]))), max_iter=3)
    tgp.loo_predict(model, method="sm", max_iter=3)
    assert len(asked) == 6 + 5 * 7  # the fit's helper list, then each prediction's helper and own lists
    steps = {start_step, accept, backtrack_step, next_iteration}
    assert {kernel for kernel, _ in asked} == {minimize_batch, hessian_rows, seed_inverse} | steps
    for kernel, argtypes in asked:
        assert argtypes in kernel.signatures, kernel
    for argtypes, cres in minimize_batch.overloads.items():  # its declared result type (predict_rows types by it)
        assert minimize_batch.result_type(argtypes) == cres.signature.return_type


def test_a_knn_local_prediction_hands_the_helper_the_types_it_compiles(monkeypatch):
    """The KNN kernel (``share="none"``) calls the prediction with a global model's types (every array of its
    objectives read-only; its transposed outputs were writable once, and the prediction's kernels compiled twice),
    so its first run splits as a global model's does: the types handed over are those it compiles."""
    asked = []
    monkeypatch.setattr(prediction, "first_run", lambda helper, here: asked.extend(helper + here))
    monkeypatch.setattr(prediction, "minimize_batch", SimpleNamespace(overloads={}))  # every call is a first run
    X, Xt, Y, _ = datasets.random_structured(0, n_train=120, n_test=6, dx=3, dy=2)
    for method in ("kl", "sm"):
        tgp.predict(tgp.fit_local(X, Y, n_neighbors=20), Xt, method=method, max_iter=3)
    assert len(asked) == 2 * 7
    for kernel, argtypes in asked:
        assert argtypes in kernel.signatures, kernel
    for argtypes in minimize_batch.signatures:  # no second version for a writable array
        assert not any(isinstance(t, types.Array) and t.mutable for t in argtypes[0].types), argtypes[0]


@numba_kernel(result=lambda argtypes: types.float64)  # wrong for an integer argument
def _twice(x):
    return 2 * x


@numba_kernel()
def _calls_twice(x):
    return call(_twice, x)


def test_a_declared_result_type_is_checked_before_the_code_is_emitted():
    """A kernel with a declared result type is not compiled to type a call by symbol; it is compiled (or loaded)
    before the caller's code goes to the JIT, and a declared type that is not the compiled one fails the caller's
    compile, naming both."""
    with pytest.raises(Exception, match=r"returns int64, not its declared result type float64"):
        _calls_twice(3)
    assert (types.int64,) in _twice.overloads


def _locker(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_held_lock_is_waited_for_then_given_up(tmp_path):
    """Held elsewhere (another open file: flock's locks belong to it), the lock is waited for ``wait`` seconds and the
    body runs unlocked; released, it is taken at once; taken again inside itself, not waited for."""
    path = str(tmp_path / "k.lock")
    assert not kc.locked_elsewhere(path)
    fd = _locker(path)
    assert kc.locked_elsewhere(path)
    t0 = time.monotonic()
    with kc.compile_lock(path, wait=0.3) as held:
        assert not held
    assert time.monotonic() - t0 >= 0.3
    os.close(fd)
    t0 = time.monotonic()
    with kc.compile_lock(path, wait=5.0) as held:
        assert held
        with kc.compile_lock(path, wait=5.0) as inner:
            assert not inner
        assert time.monotonic() - t0 < 1.0
        with pytest.raises(BlockingIOError):  # while held, nobody else takes it
            fcntl.flock(_locker.__globals__["os"].open(path, os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert path not in kc._HELD


HELPER = textwrap.dedent("""
    import fcntl, os, sys, time
    import numba
    from numba import types
    from fastsm import _prefetch
    from fastsm._kernels.points import _column_extremes
    argtypes = (types.Array(types.float64, 2, "A"),)
    assert not _prefetch.ready(_column_extremes, argtypes)
    assert not _prefetch.in_progress(_column_extremes, argtypes)
    proc = _prefetch.prefetch([(_column_extremes, argtypes)])
    path = _column_extremes.lock_path(argtypes)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60 and not _prefetch.ready(_column_extremes, argtypes):  # the helper holds the lock
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            break
        finally:
            os.close(fd)
        time.sleep(0.01)
    _column_extremes.compile(argtypes)  # waits for the helper's entry, then loads it
    assert _column_extremes._cache_hits[argtypes] == 1, dict(_column_extremes._cache_hits)
    assert proc.wait(60) == 0
    assert _prefetch.ready(_column_extremes, argtypes)
    assert not _prefetch.start_helpers([(_column_extremes, argtypes)])  # compiled: no second helper
    print("ok")
""")


def test_a_helper_compiles_into_the_cache_and_this_process_loads_it(tmp_path):
    """End to end, in a fresh cache: the helper process compiles the kernel; this process, asking for it meanwhile,
    waits for the helper's save and loads the entry instead of compiling it too."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), FASTSM_COMPILE_HELPER="1")
    out = subprocess.run([sys.executable, "-c", HELPER], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "ok"


def test_no_helper_when_turned_off_or_on_one_core(monkeypatch):
    from fastsm import _prefetch

    monkeypatch.setenv(_prefetch.ENV, "0")
    assert not _prefetch.enabled()
    monkeypatch.setenv(_prefetch.ENV, "1")
    monkeypatch.setattr(_prefetch, "cores", lambda: 1)
    assert not _prefetch.enabled()


def test_no_first_run_work_once_this_process_holds_the_optimiser(monkeypatch):
    X, Xt, Y, _ = datasets.toy1(0, n_train=30, n_test=3)
    tgp.predict(tgp.fit(X, Y), Xt, method="kl", max_iter=2)

    def refuse(*args):
        raise AssertionError("a first-run helper looked for after the optimiser was compiled or loaded")

    monkeypatch.setattr(prediction, "first_run", refuse)
    monkeypatch.setattr(prediction, "start_helpers", refuse)
    tgp.predict(tgp.fit(X, Y), Xt, method="sm", max_iter=2)
