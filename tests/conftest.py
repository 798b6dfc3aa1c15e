import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from fastsm import datasets, tgp


def problem(dy, n_train=60, n_test=8, seed=0, lam=1e-3, alpha=0.7, beta=1.5):
    """A small well-conditioned problem with dy outputs."""
    if dy == 1:
        Xtr, Xte, Ytr, Yte = datasets.toy1(seed, n_train=n_train, n_test=n_test)
        p = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=lam, lambda_y=lam, alpha=alpha, beta=beta)
    else:
        Xtr, Xte, Ytr, Yte = datasets.random_structured(seed, n_train=n_train, n_test=n_test, dx=4, dy=dy)
        p = tgp.TGPParams(gamma_x=0.3, gamma_y=1.0 / dy, lambda_x=lam, lambda_y=lam, alpha=alpha, beta=beta)
    return Xtr, Xte, Ytr, Yte, p


@pytest.fixture(autouse=True, scope="session")
def _kernels_compiled_in_this_process():
    """The suite's own process compiles every kernel it runs: its first prediction on a cold cache starts no
    helper process (fastsm._prefetch) compiling half of them into the cache for it.  Then every kernel of a
    cold run is compiled here, and test_cold_warm.py compares them with one second process that loads them all
    instead of a cold and a warm one.  The helper is tested in processes of its own: test_prefetch.py and the
    history step (CI)."""
    patch = pytest.MonkeyPatch()
    patch.setattr(tgp.prediction, "first_run", lambda helper, here: False)
    patch.setattr(tgp.prediction, "start_helpers", lambda helper: False)
    yield
    patch.undo()


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(code: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter with the repository on ``PYTHONPATH``; output captured."""
    env = dict(os.environ if env is None else env, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def interrupt_when_ready(code: str, *, timeout: float):
    """Run ``code`` in a subprocess; once it prints ``ready`` (and 1 s later), send SIGINT.

    ``code`` installs Python's SIGINT handler itself (a child of a backgrounded shell starts with
    SIGINT ignored).  Returns ``(returncode, stdout, stderr, latency)``, the latency from the signal
    to the exit.
    """
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=timeout)
        latency = time.perf_counter() - t0
    finally:
        proc.kill()
    return proc.returncode, out, err, latency


@pytest.fixture(scope="module")
def toy300():
    """Toy 1 with 300 training and 40 test points: ``Xtr, Xte, Ytr, Yte``."""
    Xtr, Xte, Ytr, Yte = datasets.toy1(0, n_train=300, n_test=40)
    return Xtr, Xte, Ytr, Yte


@pytest.fixture(scope="module")
def manifold300():
    """The smooth manifold with 300 training and 20 test points."""
    return datasets.smooth_manifold(0, n_train=300, n_test=20)


#: Parameters for :func:`manifold300`.
MANIFOLD_PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3)


@pytest.fixture(scope="module")
def mixtures_d7():
    """40 Gaussian mixtures in 7 dimensions (GMM-NPE's MAXDET problems)."""
    return datasets.gmm_manifold(d=7, K=2, n_gaussians=40, n_mixtures=40, seed=0)[0]
