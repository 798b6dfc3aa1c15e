"""Regression tests for the hardening issue (#6): one test (or more) per numbered item."""

import dataclasses
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from fastsm import datasets, divergences, gmm, tgp
from fastsm._threads import threading_layer
from tests.conftest import interrupt_when_ready

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


@pytest.fixture(scope="module")
def toy():
    Xtr, Xte, Ytr, Yte = datasets.toy1(0, n_train=300, n_test=40)
    return Xtr, Xte, Ytr, Yte


# 1. determinism of fit and predict with respect to the thread count

@pytest.mark.determinism
def test_fit_is_bitwise_independent_of_threads(toy):
    Xtr, Xte, Ytr, _ = toy
    m1, m2 = tgp.fit(Xtr, Ytr, threads=1), tgp.fit(Xtr, Ytr, threads=2)
    for k in ("Wx", "Wy", "Wxy", "G", "ridge_coef"):
        np.testing.assert_array_equal(getattr(m1, k), getattr(m2, k))
    assert (m1.logdet_x, m1.logdet_y, m1.logdet_xy) == (m2.logdet_x, m2.logdet_y, m2.logdet_xy)
    p1 = tgp.predict(m1, Xte, method="sm", threads=1)
    p2 = tgp.predict(m2, Xte, method="sm", threads=2)
    np.testing.assert_array_equal(p1.y, p2.y)


# 2. batching

@pytest.mark.determinism
@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_batch_size_does_not_change_predictions(method):
    """Bitwise on every BLAS: each product row comes from call shapes checked by fastsm._products."""
    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=300, n_test=40)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(lambda_x=1e-4, lambda_y=1e-4))
    a = tgp.predict(m, Xte, method=method, batch_size=1)
    b = tgp.predict(m, Xte, method=method, batch_size=1024)
    c = tgp.predict(m, Xte, method=method, batch_size=7, threads=1)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(c.y, b.y)
    np.testing.assert_array_equal(a.n_eval, b.n_eval)


# 3. processes: fork, spawn, ProcessPoolExecutor after a fastsm call

def test_fork_spawn_and_executor_after_a_parallel_call():
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
    out = _run(code, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
    assert "omp" not in out.stdout


def _spawn_job(i):
    from fastsm import datasets, tgp

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=60, n_test=8)
    return float(tgp.predict(tgp.fit(Xtr, Ytr), Xte[i:i + 2], method="kl").y.sum())


def test_spawn_pool():
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(2) as pool:
        got = pool.map(_spawn_job, range(2))
    assert got == [_spawn_job(i) for i in range(2)]


def test_the_threading_layer_is_never_gnu_openmp():
    assert threading_layer() in ("tbb", "workqueue")


# 4. concurrent Python threads

def _blas_threads():
    return sorted(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_concurrent_predicts_match_sequential_and_restore_blas(toy):
    Xtr, Xte, Ytr, _ = toy
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
    user's setting after."""
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


# 6. Ctrl-C

def test_ctrl_c_interrupts_predict_promptly():
    code = """
    import signal, sys, time
    # a child of a backgrounded shell starts with SIGINT ignored, and Python then keeps it
    # ignored: install Python's own handler, as in an interactive session
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import numpy as np
    from fastsm import datasets, tgp
    Xtr, Xte, Ytr, _ = datasets.random_structured(0, n_train=1500, n_test=4000, dx=8, dy=16)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=1 / 8, gamma_y=1 / 16, lambda_x=1e-2, lambda_y=1e-2), methods="kl")
    tgp.predict(m, Xte[:2], method="kl")
    print("ready", flush=True)
    t0 = time.perf_counter()
    try:
        tgp.predict(m, Xte, method="kl", max_iter=10_000, tol=0.0, batch_size=4000)
    except KeyboardInterrupt:
        print(f"interrupted {time.perf_counter() - t0:.2f}", flush=True)
        sys.exit(0)
    print("finished", flush=True)
    """
    returncode, out, err, latency = interrupt_when_ready(code, timeout=60)
    assert returncode == 0, err[-2000:]
    assert out.startswith("interrupted"), (out, err[-2000:])
    assert "SystemError" not in err
    assert latency < 10.0  # measured ~0.1 s; generous for a loaded machine


# 7. large beta and alpha -> 1

@pytest.mark.parametrize("beta", [50.0, 1000.0])
def test_large_beta_optimises_the_beta_free_transform(toy, beta):
    Xtr, Xte, Ytr, _ = toy
    X = Xte[:20]
    ref = tgp.predict(tgp.fit(Xtr, Ytr, tgp.TGPParams(beta=1.5)), X, method="sm")
    p = tgp.predict(tgp.fit(Xtr, Ytr, tgp.TGPParams(beta=beta)), X, method="sm")
    kl = tgp.predict(tgp.fit(Xtr, Ytr, tgp.TGPParams(beta=beta)), X, method="kl")
    assert np.all(np.isfinite(p.criterion))
    assert p.n_iter.sum() > 0 and not np.array_equal(p.y, kl.y)
    np.testing.assert_array_equal(p.y, ref.y)  # [SM] Lemma 4.2: the argmin does not depend on beta


def test_alpha_near_one_gives_finite_criteria(toy):
    Xtr, Xte, Ytr, _ = toy
    p = tgp.predict(tgp.fit(Xtr, Ytr, tgp.TGPParams(alpha=1 - 1e-12)), Xte[:20], method="sm")
    assert np.all(np.isfinite(p.criterion)) and np.all(np.isfinite(p.y))


def test_sm_divergence_is_continuous_at_alpha_one():
    mp, Sp, mq, Sq = np.zeros(1), np.eye(1), np.array([1.5]), np.array([[4.0]])
    kl = divergences.kl(mp, Sp, mq, Sq)
    for a in (1 - 1e-16, 1 - 1e-12, 1 + 1e-12):
        assert abs(divergences.renyi(mp, Sp, mq, Sq, a) - kl) < 1e-9
        np.testing.assert_allclose(divergences.sm(mp, Sp, mq, Sq, a, 1.5), np.expm1(0.5 * kl) / 0.5, rtol=1e-9)
    # the two evaluation paths meet at |1 - a| = NEAR_ONE: R_a is smooth (slope ~0.2 here)
    lo = divergences.renyi(mp, Sp, mq, Sq, 1 - (divergences.NEAR_ONE + 1e-9))
    hi = divergences.renyi(mp, Sp, mq, Sq, 1 - (divergences.NEAR_ONE - 1e-9))
    assert abs(lo - hi) < 1e-9
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((2, 3, 3))
    Sp3, Sq3 = A @ A.T + np.eye(3), B @ B.T + np.eye(3)
    m3, n3 = rng.standard_normal((2, 3))
    np.testing.assert_allclose(divergences.renyi(m3, Sp3, n3, Sq3, 1 - 1e-14), divergences.kl(m3, Sp3, n3, Sq3),
                               rtol=1e-10)


# 8. non-finite steps are never "converged"

def test_huge_trust_radius_is_not_converged_at_the_start(toy):
    Xtr, Xte, Ytr, _ = toy
    m = tgp.fit(Xtr, Ytr)
    p = tgp.predict(m, Xte[:10], method="kl", trust_radius=1e300)
    assert np.all(np.isfinite(p.y))
    assert not np.any(p.converged & (p.n_iter == 0))


def test_overflowing_outputs_are_rejected(toy):
    Xtr, _, Ytr, _ = toy
    with pytest.raises(ValueError, match="Y is too large"):
        tgp.fit(Xtr, Ytr * 1e300)


# 9. validation

def test_certainty_validates_batch_size(toy):
    Xtr, Xte, Ytr, Yte = toy
    m = tgp.fit(Xtr, Ytr)
    with pytest.raises(ValueError, match="batch_size"):
        tgp.certainty(m, Xte, Yte, batch_size=-1)


def test_numpy_ints_none_methods_and_huge_max_iter_are_accepted(toy):
    Xtr, Xte, Ytr, _ = toy
    m = tgp.fit(Xtr, Ytr, methods=None, threads=np.int64(2))
    assert m.methods == ("kl", "ikl", "sm")
    p = tgp.predict(m, Xte[:5], method="kl", max_iter=2**63, threads=np.int32(1))
    assert p.converged.all()
    with pytest.raises(TypeError, match="methods"):
        tgp.fit(Xtr, Ytr, methods=3)


# 10. one training point, identical inputs

def test_one_point_and_identical_inputs_fit_and_predict():
    m = tgp.fit([[0.5]], [[1.0]])
    assert np.isfinite(tgp.predict(m, [[0.5]], method="kl").y).all()
    X = np.ones((5, 2))
    Y = np.arange(5.0)[:, None]
    m = tgp.fit(X, Y)
    np.testing.assert_allclose(np.hstack([X[:1], [[1.0]]]) @ m.ridge_coef, [[2.0]])  # the mean of Y
    assert np.isfinite(tgp.predict(m, X[:2], method="sm").y).all()


# 11. zero-weight components

def test_zero_weight_component_gives_finite_measures():
    f = gmm.GaussianMixture([0.0, 1.0], [[0.0], [1.0]], [[[1.0]], [[2.0]]])
    g = gmm.GaussianMixture([1.0], [[0.5]], [[[1.5]]])
    f1 = gmm.GaussianMixture([1.0], [[1.0]], [[[2.0]]])
    for method in ("we", "mb", "mbs", "var"):
        v = gmm.divergence(f, g, method=method)
        assert np.isfinite(v)
        np.testing.assert_allclose(v, gmm.divergence(f1, g, method=method), rtol=1e-12)
        assert np.isfinite(gmm.divergence(g, f, method=method))


# 12. overflowing NPE embedding

def test_fit_npe_rejects_overflowing_components_quickly():
    mix = [gmm.GaussianMixture([0.5, 0.5], [[1e200, 0.0], [0.0, 1.0]], [np.eye(2), np.eye(2)]),
           gmm.GaussianMixture([1.0], [[0.0, 0.0]], [np.eye(2)])]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="overflows"):
        gmm.fit_npe(mix)
    assert time.perf_counter() - t0 < 30


# 13. extrapolation

def test_far_test_inputs_are_flagged(toy):
    Xtr, Xte, Ytr, _ = toy
    m = tgp.fit(Xtr, Ytr)
    X = np.vstack([Xte[:3], [[1e4]]])
    with pytest.warns(RuntimeWarning, match="1 of 4 test inputs"):
        p = tgp.predict(m, X, method="sm")
    np.testing.assert_array_equal(p.extrapolated, [False, False, False, True])
    assert not p.converged[3] and p.log_certainty[3] == -np.inf
    assert np.all(np.isfinite(p.log_certainty[:3]))


# 14. state safety

def test_model_owns_read_only_copies(toy):
    Xtr, Xte, Ytr, _ = toy
    X, Y = Xtr.copy(), Ytr.copy()
    m = tgp.fit(X, Y)
    before = tgp.predict(m, Xte[:10], method="kl").y
    X += 1.0
    Y *= 2.0
    np.testing.assert_array_equal(tgp.predict(m, Xte[:10], method="kl").y, before)
    for k in ("X", "Y", "Wx", "Wy", "Wxy", "G", "ridge_coef"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(m, k)[0, 0] += 1.0


def test_replace_refits(toy):
    Xtr, Xte, Ytr, _ = toy
    m = tgp.fit(Xtr, Ytr)
    p2 = tgp.TGPParams(gamma_x=0.5, alpha=0.5)
    r = dataclasses.replace(m, params=p2)
    fresh = tgp.fit(Xtr, Ytr, p2)
    np.testing.assert_array_equal(r.Wxy, fresh.Wxy)
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(m, Wx=m.Wx)


def test_mixture_owns_read_only_copies():
    w, mu, S = np.array([0.5, 0.5]), np.zeros((2, 2)), np.stack([np.eye(2)] * 2)
    f = gmm.GaussianMixture(w, mu, S)
    mu[0, 0] = 5.0
    assert f.means[0, 0] == 0.0
    with pytest.raises(ValueError, match="read-only"):
        f.means[0, 0] = 1.0


# 15. memory of broadcast divergence stacks

def test_broadcast_divergences_are_chunked(monkeypatch):
    import tracemalloc

    rng = np.random.default_rng(0)
    n, d = 300, 3
    A = rng.standard_normal((n, d, d))
    S = A @ A.transpose(0, 2, 1) + np.eye(d)
    mu = rng.standard_normal((n, d))
    full = divergences.sm(mu[:, None], S[:, None], mu[None], S[None], 0.5, 1.5)
    monkeypatch.setattr(divergences, "CHUNK", 1000)
    tracemalloc.start()
    chunked = divergences.sm(mu[:, None], S[:, None], mu[None], S[None], 0.5, 1.5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(chunked, full)
    # output 0.7 MB; materialised inputs would be 2 * 90 000 * 12 doubles = 17 MB
    assert peak < 4e6
    np.testing.assert_allclose(divergences.kl(mu[:, None], S[:, None], mu[None], S[None])[3, 7],
                               divergences.kl(mu[3], S[3], mu[7], S[7]))


# 17. first use and the README

def test_readme_use_snippet_runs():
    text = open(os.path.join(ROOT, "README.md")).read()
    block = text.split("## Use", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        exec(compile(block, "README.md", "exec"), {})


def test_version_and_reprs(toy):
    import fastsm

    out = _run("import runpy, sys; sys.argv = ['fastsm', '--version']; runpy.run_module('fastsm', run_name='__main__')")
    assert out.stdout.strip() == f"fastsm {fastsm.__version__}"
    Xtr, Xte, Ytr, _ = toy
    m = tgp.fit(Xtr, Ytr)
    assert len(repr(m)) < 300 and len(repr(tgp.predict(m, Xte[:3], method="kl"))) < 200
    assert "toy1" in datasets.__all__ and "gmm_manifold" in datasets.__all__


def test_workqueue_fallback_serialises_threads_and_forks():
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
