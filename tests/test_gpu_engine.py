"""The GPU engine (fastsm.cuda) run on the CPU (backend="numpy") against the Numba engine (#76).

The two run one algorithm with sums in different orders (LAPACK's TRSM and NumPy's reductions against
fastsm's row loops), so they agree to rounding, not bitwise.  A converged point's position is fixed to
about ``tol`` × the output spread (docs/threads.md), so two engines may stop up to about a tolerance apart
on either side of the minimum: converged predictions are compared at :data:`MARGIN` of the spread
(the largest difference measured on these problems and others, under OpenBLAS's Haswell, SandyBridge and
Nehalem kernels, was 1.55e-9: benchmarks/gpu_agreement.py, docs/gpu.md), and the converged flags must agree
on at least 99 % of the points.
"""

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from fastsm import cuda as fc
from fastsm import datasets, tgp
from fastsm.cuda import backend as backend_mod
from fastsm.cuda.evaluation import evaluate, kernels_of, point_data, shared_model, sm_hessian
from fastsm.cuda.linalg import batched_cholesky, inverse_from_cholesky
from fastsm.tgp.views import inverse_form
from tests.conftest import ROOT

MARGIN = 3e-9  # of the output spread, two converged runs of tol = 1e-9


def agree(a, b, spread, margin=MARGIN, flags=0.99):
    """Converged predictions within ``margin`` × ``spread``; the same converged flag on ``flags`` of the points;
    the extrapolated flags identical."""
    both = a.converged & b.converged
    assert both.mean() > 0.9
    err = np.abs(a.y - b.y)[both].max() / spread
    assert err <= margin, err
    assert np.mean(a.converged == b.converged) >= flags
    np.testing.assert_array_equal(a.extrapolated, b.extrapolated)
    lc = np.abs(a.log_certainty - b.log_certainty)[both]
    assert lc.max() <= 1e-6, lc.max()


@pytest.fixture(scope="module")
def toy():
    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=200, n_test=150)
    return tgp.fit(Xtr, Ytr), Xte


@pytest.fixture(scope="module")
def manifold16():
    Xtr, Xte, Ytr, _ = datasets.smooth_manifold(1, n_train=300, n_test=80, dy=16)
    return tgp.fit(Xtr, Ytr, methods=("kl", "sm")), Xte


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_engine_agrees_with_numba_on_toy1(toy, method):
    model, X = toy
    agree(tgp.predict(model, X, method=method), fc.predict(model, X, method=method, backend="numpy"), model.y_spread)


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_engine_agrees_with_numba_on_a_model_in_inverse_form(toy, method):
    model = inverse_form(toy[0])
    X = toy[1][:60]
    agree(tgp.predict(model, X, method=method), fc.predict(model, X, method=method, backend="numpy"), model.y_spread)


def test_sm_with_exact_curvature_agrees_at_dy16(manifold16):
    """dy = 16: SMTGP's KLTGP start, then BFGS seeded by the exact Hessian (the curvature schedule)."""
    model, X = manifold16
    a = tgp.predict(model, X, method="sm")
    b = fc.predict(model, X, method="sm", backend="numpy")
    agree(a, b, model.y_spread)
    np.testing.assert_allclose(b.n_eval.mean(), a.n_eval.mean(), rtol=0.05)


def test_sm_above_the_hessian_limit_and_given_starts_agree():
    """dy = 40 (no exact Hessian: BFGS alone) from given starts, and ``init="linear"``."""
    Xtr, Xte, Ytr, _ = datasets.smooth_manifold(5, n_train=300, n_test=40, dy=40)
    model = tgp.fit(Xtr, Ytr, methods=("kl", "sm"))
    start = tgp.predict(model, Xte, method="kl").y
    for init in (start, "linear"):
        agree(tgp.predict(model, Xte, init=init), fc.predict(model, Xte, init=init, backend="numpy"), model.y_spread)


def test_gradient_descent_agrees(toy):
    """``optimizer="gd"``: steepest descent stops where a full step is below the tolerance, which fixes a
    position only to about the step over the curvature: converged points of KLTGP on Toy 1 agreed to 2.7e-9 to
    3.5e-9 of the spread under three kernel families (BFGS: 1.8e-11), so the margin is 1e-8."""
    model, X = toy
    a = tgp.predict(model, X, method="kl", optimizer="gd")
    b = fc.predict(model, X, method="kl", optimizer="gd", backend="numpy")
    agree(a, b, model.y_spread, margin=1e-8, flags=0.97)


def test_chunks_and_hessian_blocks_change_nothing_beyond_rounding(manifold16, monkeypatch):
    model, X = manifold16
    a = fc.predict(model, X, method="sm", backend="numpy")
    monkeypatch.setattr("fastsm.cuda.engine.HESSIAN_BLOCK", 3)
    b = fc.predict(model, X, method="sm", backend="numpy", chunk_size=7)
    agree(a, b, model.y_spread)


def test_extrapolated_points_are_flagged_as_on_the_cpu(toy):
    model, X = toy
    far = np.vstack([X[:5], np.full((3, X.shape[1]), 1e3)])
    with pytest.warns(RuntimeWarning):
        a = tgp.predict(model, far)
    b = fc.predict(model, far, backend="numpy")
    np.testing.assert_array_equal(b.extrapolated, a.extrapolated)
    assert b.extrapolated[-3:].all() and np.isneginf(b.log_certainty[-3:]).all()
    assert not b.converged[-3:].any()


@pytest.fixture(scope="module")
def local_problem():
    X, Xt, Y, _ = datasets.smooth_manifold(0, n_train=1500, n_test=60, dx=12, dy=10, latent=4)
    params = tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3)
    return X, Y, Xt, params, float(np.sqrt(Y.var(axis=0).sum()))


@pytest.mark.parametrize("method", ["kl", "sm"])
def test_knn_local_models_agree_with_the_cpu(local_problem, method):
    """share="none": each point's own model, fitted and predicted on the engine (tolerances are in each local
    model's spread, at most the whole set's, which the margin uses)."""
    X, Y, Xt, params, spread = local_problem
    model = tgp.fit_local(X, Y, params, n_neighbors=60)
    agree(tgp.predict(model, Xt, method=method), fc.predict(model, Xt, method=method, backend="numpy", chunk_size=25),
          spread)


def test_weighted_knn_local_models_and_given_starts_agree(local_problem):
    X, Y, Xt, params, spread = local_problem
    w = np.random.default_rng(3).uniform(0.5, 2.0, X.shape[0])
    model = tgp.fit_local(X, Y, params, n_neighbors=60, sample_weight=w)
    agree(tgp.predict(model, Xt[:30]), fc.predict(model, Xt[:30], backend="numpy"), spread)
    start = tgp.predict(model, Xt[:30], method="kl").y
    agree(tgp.predict(model, Xt[:30], init=start), fc.predict(model, Xt[:30], init=start, backend="numpy"), spread)


def test_local_points_the_cpu_path_must_take_are_its_own():
    """A point whose neighbours' outputs have no spread is left to the CPU path, as the Numba kernel leaves it:
    the same bits."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (200, 1))
    Y = np.where(X < 0.5, 0.0, np.sin(6 * X))
    model = tgp.fit_local(X, np.hstack([Y, 2 * Y]), tgp.TGPParams(gamma_x=50.0, gamma_y=5.0, lambda_x=1e-3,
                                                                  lambda_y=1e-3), n_neighbors=20)
    Xt = np.array([[0.1], [0.2], [0.8], [0.9]])
    with np.errstate(divide="ignore", invalid="ignore"):
        a = tgp.predict(model, Xt)
        b = fc.predict(model, Xt, backend="numpy")
    np.testing.assert_array_equal(b.y[:2], a.y[:2])
    np.testing.assert_array_equal(b.n_eval[:2], a.n_eval[:2])
    agree(a, b, 1.0)


def test_host_starts_compile_one_version_whatever_the_arrays_flags():
    """Read-only and writeable models, weights, inputs and starts all reach the host kernel with one signature
    (three versions were compiled before, ~15 s each on 2 cores); the starts are the same bits either way."""
    from fastsm._kernels.ridge import ridge_starts
    from fastsm.cuda.local import host_starts

    rng = np.random.default_rng(1)
    X, Y, w = rng.uniform(size=(40, 3)), rng.uniform(size=(40, 2)), rng.uniform(0.5, 2.0, 40)
    params = tgp.TGPParams(gamma_x=1.0, gamma_y=1.0, lambda_x=1e-3, lambda_y=1e-3)
    model = tgp.fit_local(X, Y, params, n_neighbors=10, sample_weight=w)
    members = np.argsort(((X[:5, None, :] - X[None, :, :]) ** 2).sum(axis=2), axis=1)[:, :10]
    unfrozen = dataclasses.replace(model)
    for name in ("X", "Y", "sample_weight"):
        object.__setattr__(unfrozen, name, np.array(getattr(model, name)))
    assert unfrozen.X.flags.writeable and not model.X.flags.writeable
    Xq, Y0 = X[:5].copy(), Y[:5].copy()
    Xq_ro, Y0_ro = Xq.copy(), Y0.copy()
    Xq_ro.setflags(write=False)
    Y0_ro.setflags(write=False)
    out = [host_starts(model, Xq, members, Y0)]
    compiled = set(ridge_starts.signatures)
    inputs = ((Xq, Y0), (Xq_ro, Y0_ro), (Xq, None))
    out += [host_starts(m, q, members, y0) for m in (model, unfrozen) for q, y0 in inputs]
    assert set(ridge_starts.signatures) == compiled, ridge_starts.signatures
    out = out[1:]
    for a, b in zip(out[:3], out[3:], strict=True):
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(u, v)


def test_exact_hessian_matches_finite_differences_of_the_gradient(manifold16):
    model, X = manifold16
    be = backend_mod.numpy_backend()
    view, kern = shared_model(model, be, ("Wx", "Wy", "Wxy")), kernels_of(model)
    pd = point_data(np, view, kern, X[:4], ["sm"])
    Y = tgp.predict(model, X[:4], method="kl").y
    ev = evaluate(np, view, kern, "sm", 1.0, pd.F["sm"], pd.eta_x, Y)
    H = sm_hessian(np, view, kern, Y, ev, np.arange(4))
    h = 1e-5 * model.y_spread
    for c in range(Y.shape[1]):
        E = np.zeros_like(Y)
        E[:, c] = h
        gp = evaluate(np, view, kern, "sm", 1.0, pd.F["sm"], pd.eta_x, Y + E).grad
        gm = evaluate(np, view, kern, "sm", 1.0, pd.F["sm"], pd.eta_x, Y - E).grad
        fd = (gp - gm) / (2 * h)
        scale = np.abs(H).max(axis=(1, 2))
        assert (np.abs(fd - H[:, :, c]).max(axis=1) <= 1e-5 * scale).all()


def test_batched_cholesky_and_inverse_against_numpy(rng):
    A = rng.standard_normal((5, 6, 6))
    S = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(6)
    S[3] = np.diag([1.0, 2.0, -1.0, 1.0, 1.0, 1.0])  # indefinite
    S[4, 0, 0] = np.nan
    L, ok = batched_cholesky(np, S)
    np.testing.assert_array_equal(ok, [True, True, True, False, False])
    np.testing.assert_allclose(L[:3], np.linalg.cholesky(S[:3]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(inverse_from_cholesky(np, L[:3]), np.linalg.inv(S[:3]), rtol=1e-9, atol=1e-12)


def test_without_cupy_the_error_names_the_extra(toy, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "cupyx", None)
    monkeypatch.setitem(sys.modules, "cupyx.scipy.linalg", None)
    with pytest.raises(ImportError, match=r"pip install 'fastsm\[cuda\]'"):
        fc.predict(*toy)
    assert not fc.available()


def test_import_fastsm_and_fastsm_cuda_import_no_gpu_package():
    code = ("import sys, fastsm, fastsm.cuda; "
            "print(sorted(m for m in ('cupy', 'cupyx', 'torch', 'numba.cuda') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_bad_arguments_get_named_errors(toy):
    model, X = toy
    with pytest.raises(ValueError, match="method"):
        fc.predict(model, X, method="sm_cubic", backend="numpy")
    with pytest.raises(ValueError, match="backend"):
        fc.predict(model, X, backend="torch")
    with pytest.raises(ValueError, match="chunk_size"):
        fc.predict(model, X, backend="numpy", chunk_size=0)
    with pytest.raises(ValueError, match="columns"):
        fc.predict(model, np.ones((3, 4)), backend="numpy")
    with pytest.raises(TypeError, match="TGPModel"):
        fc.predict("model", X, backend="numpy")
    local = tgp.fit_local(*datasets.toy1(0, n_train=60, n_test=1)[::2], n_neighbors=20, share="exact")
    with pytest.raises(ValueError, match="share='none'"):
        fc.predict(local, X, backend="numpy")
    with pytest.raises(ValueError, match="ikl"):
        fc.predict(dataclasses.replace(local, share="none"), X, method="ikl", backend="numpy")
    kl_only = tgp.fit(*datasets.toy1(0, n_train=60, n_test=1)[::2], methods=("kl", "sm"))
    with pytest.raises(ValueError, match="ikl"):
        fc.predict(kl_only, X, method="ikl", backend="numpy")


def test_a_job_that_cannot_fit_is_refused_before_any_work(toy, monkeypatch):
    model, X = toy
    monkeypatch.setattr(backend_mod, "available_bytes", lambda: 1000)
    calls = []
    monkeypatch.setattr("fastsm.cuda.engine.predict_chunk", lambda *a, **k: calls.append(1))
    with pytest.raises(MemoryError, match="GiB"):
        fc.predict(model, X, backend="numpy")
    assert calls == []


def test_chunks_follow_the_free_memory(toy, monkeypatch):
    from fastsm.cuda.engine import chunk_bytes, fixed_bytes, plan_chunks

    model, X = toy
    N, dy = model.Y.shape
    factors = fixed_bytes(N, dy, 4)
    monkeypatch.setattr(backend_mod, "available_bytes", lambda: factors + 2 * 10 * chunk_bytes(N))
    assert plan_chunks(backend_mod.numpy_backend(), model, 1000, "ikl", None) == 10
    res = fc.predict(model, X[:25], method="ikl", backend="numpy")
    ref = fc.predict(model, X[:25], method="ikl", backend="numpy", chunk_size=10)
    assert dataclasses.asdict(res).keys() == dataclasses.asdict(ref).keys()
    np.testing.assert_array_equal(res.y, ref.y)


def test_the_device_check_runs_every_section_on_the_cpu():
    """benchmarks/device_check.py at toy sizes with the engine on the CPU: every section prints its figures
    (device time is not spent finding a bug in the script)."""
    out = subprocess.run([sys.executable, "benchmarks/device_check.py", "--quick", "--backend", "numpy"],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "FAILED" not in out.stdout, out.stdout
    for line in ("== 1.", "== 2.", "== 3.", "GPU engine / CPU", "== 4.", "1 thread", "== 5.", "ridge starts", "== 6.",
                 "device check done"):
        assert line in out.stdout
    assert out.stdout.count(": agree") == 3, out.stdout
