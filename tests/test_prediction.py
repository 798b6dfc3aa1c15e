"""The one prediction pipeline (fastsm.tgp.prediction.predict_points, fastsm._kernels.predict.predict_rows)
against the staged prediction (tests/staged.py), bitwise, for global, leave-one-out and local models, every
method and start; and the point kernels (fastsm._kernels.points) against plain NumPy/SciPy (#54)."""

import copy

import numpy as np
import pytest
from scipy.linalg import solve_triangular
from scipy.spatial.distance import cdist

from fastsm import config, datasets, tgp
from fastsm._threads import thread_limits
from fastsm.exceptions import ExtrapolationWarning
from fastsm.tgp import prediction as P
from fastsm.tgp.local_model import local_model
from fastsm.tgp.loo import loo_points, loo_ridge, loo_spread
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.views import inverse_form, leave_one_out
from tests.staged import predict_staged

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-3, lambda_y=1e-2, alpha=0.6, beta=1.5)
OPTS = dict(max_iter=config.DEFAULT_MAX_ITER, tol=config.DEFAULT_TOL, threads=1, trust_radius=0.25, batch_size=7,
            progress=False, ftol=0.0)
FIELDS = ("y", "log_certainty", "n_iter", "n_eval", "converged", "objective", "criterion", "n_eta_floor",
          "extrapolated")


def _opts(**kw):
    return PredictOptions(**dict(OPTS, **kw))


def _same(a, b):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def _data(dy, seed=0, n=70):
    X, Xt, Y, _ = datasets.random_structured(seed, n_train=n, n_test=16, dx=3, dy=dy)
    # points whose ridge start leaves the outputs' box (the supported start acts), and one with no
    # kernel support (extrapolated: its start is kept)
    far = Xt[:3] * 3.0 + 2.0
    lost = np.full((1, 3), 1e3)
    return X, Y, PARAMS.resolve(X, Y, None), np.vstack([Xt, far, lost])


def _model(dy, seed=0, n=70):
    X, Y, p, Xt = _data(dy, seed, n)
    return local_model(X, Y, p, ("kl", "sm")), Xt


@pytest.mark.parametrize("dy", [1, 3, 40])
@pytest.mark.parametrize("method,init", [("sm", None), ("sm", "linear"), ("sm", "kl"), ("kl", None), ("kl", "kl"),
                                         ("sm", "array"), ("kl", "array")])
def test_a_local_models_prediction_is_the_staged_one_bitwise(dy, method, init):
    m, Xt = _model(dy)
    assert m.factor_form == "cholesky"
    if init == "array":
        init = np.random.default_rng(1).normal(size=(len(Xt), dy))
    with pytest.warns(ExtrapolationWarning):
        got = P.predict_global(m, Xt, _opts(method=method, init=init, optimizer="bfgs"))
    _same(got, predict_staged(m, Xt, _opts(method=method, init=init, optimizer="bfgs")))
    assert got.extrapolated[-1] and not got.extrapolated[:16].any()


@pytest.mark.parametrize("form", ["cholesky", "inverse"])
@pytest.mark.parametrize("method,init", [("sm", None), ("kl", None), ("ikl", None), ("ikl", "kl"), ("sm", "linear"),
                                         ("sm_cubic", None), ("sm_cubic", "linear"), ("kl", "array")])
def test_a_global_models_prediction_is_the_staged_one_bitwise(form, method, init):
    X, Y, p, Xt = _data(2, seed=5, n=60)
    m = tgp.fit(X, Y, p)
    m = inverse_form(m) if form == "inverse" else m
    if init == "array":
        init = np.random.default_rng(2).normal(size=(len(Xt), 2))
    for threads in (1, 2):  # batches of 7 points, split over threads: the bits do not move
        with pytest.warns(ExtrapolationWarning):
            got = P.predict_global(m, Xt, _opts(method=method, init=init, threads=threads))
        _same(got, predict_staged(m, Xt, _opts(method=method, init=init)))


@pytest.mark.parametrize("method,init", [("sm", None), ("kl", None), ("ikl", None), ("sm", "linear"), ("kl", "kl")])
def test_leave_one_out_is_the_staged_prediction_bitwise(method, init):
    X, Y, p, _ = _data(2, seed=6, n=50)
    m = tgp.fit(X, Y, p)
    held = np.array([0, 3, 7, 11, 20, 49], dtype=np.int64)
    loo = leave_one_out(m)
    for certainty in (True, False):
        opts = _opts(method=method, init=init, batch_size=4)
        got = loo_points(m, held, opts, certainty=certainty, loo=loo)
        ref = predict_staged(m, X[held], opts, Y0=loo_ridge(m)[held], held=held, spread=loo_spread(Y)[held], loo=loo,
                             certainty=certainty)
        _same(got, ref)
        assert np.isnan(got.log_certainty).all() == (not certainty and method != "sm")


def test_gradient_descent_and_a_model_predicting_through_predict():
    m, Xt = _model(2, seed=3)
    a = P.predict_global(m, Xt[:16], _opts(method="sm", init=None, optimizer="gd"))
    _same(a, predict_staged(m, Xt[:16], _opts(method="sm", init=None, optimizer="gd")))
    c = tgp.predict(m, Xt[:16], method="sm", threads=1)
    np.testing.assert_array_equal(c.y, predict_staged(m, Xt[:16], _opts(method="sm", init=None, optimizer="bfgs",
                                                                        batch_size=1024)).y)


def test_the_prediction_checks_its_start():
    m, Xt = _model(2)
    with pytest.raises(ValueError, match="init must have shape"):
        P.predict_global(m, Xt, _opts(method="sm", init=np.zeros((3, 2)), optimizer="bfgs"))
    with pytest.raises(ValueError, match="init must be one of"):
        P.predict_global(m, Xt, _opts(method="sm", init="ridge", optimizer="bfgs"))
    big = copy.copy(m)
    object.__setattr__(big, "ridge_coef", np.full_like(m.ridge_coef, 1e300))
    for init in (None, "kl"):
        with pytest.raises(ValueError, match=r"linear \(ridge\) start overflows float64 at 1 row\(s\), first row 1"):
            P.predict_global(big, np.vstack([Xt[:1] * 0.0, Xt[:1] * 0.0 + 1e10]),
                             _opts(method="kl", init=init, optimizer="bfgs"))


def _supported_reference(model, X, Y0, method, held=None, spread=None):
    """The supported start written with NumPy (the Python form before fastsm._kernels.points)."""
    Y = model.Y
    if held is None:
        lo, hi = Y.min(axis=0), Y.max(axis=0)
    else:
        srt = np.sort(Y, axis=0)
        lo = np.where(Y[held] == srt[0], srt[min(1, len(Y) - 1)], srt[0])
        hi = np.where(Y[held] == srt[-1], srt[max(-2, -len(Y))], srt[-1])
    unit = model.y_spread if spread is None else np.asarray(spread)[:, None]
    margin = 1e-3 * unit + 1e-9 * np.abs(Y).max(axis=0)
    out = np.flatnonzero(((Y0 < lo - margin) | (Y0 > hi + margin)).any(axis=1))
    Y0 = Y0.copy()
    beta = 1.0 if method == "sm" else None
    Xo = X[out]
    ho = None if held is None else held[out]
    loo = None if held is None else leave_one_out(model)
    F, eta_x, _, ex = P.prepare_points(model, Xo, method, ho, loo)
    Kx = np.exp(-model.params.gamma_x * cdist(Xo, model.X, "sqeuclidean"))
    if ho is not None:
        Kx[np.arange(out.size), ho] = -1.0
    nearest = Y[np.argmax(Kx, axis=1)]
    f_lin, f_near, g = np.empty(out.size), np.empty(out.size), np.empty(nearest.shape)
    P.evaluate(model, method, F, eta_x, Y0[out], f_lin, g, beta=beta, held=ho, loo=loo)
    P.evaluate(model, method, F, eta_x, nearest, f_near, g, beta=beta, held=ho, loo=loo)
    take = (f_near < f_lin) & ~ex
    Y0[out[take]] = nearest[take]
    return Y0, out.size


@pytest.mark.parametrize("form", ["global", "local"])
@pytest.mark.parametrize("method", ["kl", "sm"])
def test_the_supported_start_kernel_matches_numpy(form, method):
    X, Xt, Y, _ = datasets.random_structured(2, n_train=60, n_test=30, dx=3, dy=2)
    p = PARAMS.resolve(X, Y, None)
    model = tgp.fit(X, Y, p, methods=("kl", "sm")) if form == "global" else local_model(X, Y, p, ("kl", "sm"))
    Y0 = P.linear_start(Xt, model.ridge_coef)
    np.testing.assert_allclose(Y0, np.c_[Xt, np.ones(len(Xt))] @ model.ridge_coef, rtol=1e-13, atol=1e-13)
    box = Y.max(axis=0) - Y.min(axis=0)
    with thread_limits(1):
        for Xq, held, spread in ((Xt, None, None),  # and the leave-one-out form: each training point without itself
                                 (X, np.arange(len(X)), np.full(len(X), 0.1 * model.y_spread))):
            Y0 = P.linear_start(Xq, model.ridge_coef)
            Y0[::2] += 1.5 * box  # starts beyond the outputs' box, most of them replaced
            ref, moved = _supported_reference(model, Xq, Y0, method, held, spread)
            assert moved > 0 and (ref != Y0).any(axis=1).sum() >= 5  # the test reaches the replacement
            loo = None if held is None else leave_one_out(model)
            got = P.supported_start(model, Xq, Y0, method, held, spread, threads=1, loo=loo)
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_the_bounds_without_the_held_row_match_numpy(n):
    """The supported start's per-column bounds, each row's own output left out, against NumPy,
    with extremes present twice (leaving one copy out keeps the other) and a single row."""
    from tests.entries import column_bounds as _column_bounds
    from tests.entries import column_extremes as _column_extremes

    rng = np.random.default_rng(n)
    Y = rng.integers(0, 3, size=(n, 4)).astype(float)  # ties in every column
    Y[:, 3] = rng.standard_normal(n)
    ext = _column_extremes(Y)
    held = np.arange(n)
    srt = np.sort(Y, axis=0)
    lo, hi = np.empty(4), np.empty(4)
    for r in range(n):
        _column_bounds(Y, ext, held, r, lo, hi)
        np.testing.assert_array_equal(lo, np.where(Y[r] == srt[0], srt[min(1, n - 1)], srt[0]))
        np.testing.assert_array_equal(hi, np.where(Y[r] == srt[-1], srt[max(-2, -n)], srt[-1]))
        if n > 1:
            rest = np.delete(Y, r, axis=0)
            np.testing.assert_array_equal(lo, rest.min(axis=0))
            np.testing.assert_array_equal(hi, rest.max(axis=0))
        _column_bounds(Y, ext, np.full(n, -1), r, lo, hi)  # no row left out
        np.testing.assert_array_equal(lo, Y.min(axis=0))
        np.testing.assert_array_equal(hi, Y.max(axis=0))


def test_point_data_matches_scipy():
    X, Xt, Y, _ = datasets.random_structured(4, n_train=50, n_test=9, dx=3, dy=2)
    p = PARAMS.resolve(X, Y, None)
    m = local_model(X, Y, p, ("kl", "sm"))
    Kx = np.exp(-p.gamma_x * cdist(Xt, X, "sqeuclidean"))
    Lx, Lxy = np.tril(m.Wx), np.tril(m.Wxy)
    Hx = solve_triangular(Lx, Kx.T, lower=True).T
    with thread_limits(1):
        F, eta_x, Gxy, ex = P.prepare_points(m, Xt, "kl")
        Fs, _, _, _ = P.prepare_points(m, Xt, "sm")
    np.testing.assert_allclose(Gxy, solve_triangular(Lxy, Kx.T, lower=True).T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(F, solve_triangular(Lx.T, Hx.T, lower=False).T, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(eta_x, 1.0 + p.lambda_x - (Hx**2).sum(axis=1), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(Fs, Gxy)
    assert not ex.any()
