"""Bad input gets a clear ValueError/TypeError naming the argument."""

import warnings

import numpy as np
import pytest

from fastsm import ExtrapolationWarning, datasets, shift, tgp
from tests.conftest import MANIFOLD_PARAMS


@pytest.fixture(scope="module")
def data():
    return datasets.toy1(0, n_train=30, n_test=5)


@pytest.fixture(scope="module")
def model(data):
    Xtr, _, Ytr, _ = data
    return tgp.fit(Xtr, Ytr)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"gamma_x": 0.0}, ValueError, "gamma_x"),
        ({"gamma_y": -1.0}, ValueError, "gamma_y"),
        ({"lambda_x": -1e-3}, ValueError, "lambda_x"),
        ({"alpha": 0.0}, ValueError, "alpha"),
        ({"alpha": 1.0}, ValueError, "alpha"),
        ({"beta": 0.0}, ValueError, "beta"),
        ({"beta": float("nan")}, ValueError, "beta"),
        ({"alpha": "0.5"}, TypeError, "alpha"),
    ],
)
def test_bad_params(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        tgp.TGPParams(**kwargs)


def test_bad_training_data(data):
    Xtr, _, Ytr, _ = data
    bad = Xtr.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="X contains NaN"):
        tgp.fit(bad, Ytr)
    with pytest.raises(ValueError, match="Y contains NaN"):
        tgp.fit(Xtr, np.where(Ytr > 0.5, np.inf, Ytr))
    with pytest.raises(ValueError, match="same number of rows"):
        tgp.fit(Xtr, Ytr[:-1])
    with pytest.raises(ValueError, match="X must not be empty"):
        tgp.fit(np.empty((0, 1)), np.empty((0, 1)))
    with pytest.raises(ValueError, match="X must be 1 or 2-dimensional"):
        tgp.fit(Xtr[:, :, None], Ytr)
    with pytest.raises(TypeError, match="X must hold real numbers"):
        tgp.fit(Xtr.astype(complex), Ytr)
    with pytest.raises(TypeError, match="params"):
        tgp.fit(Xtr, Ytr, {"alpha": 0.5})
    with pytest.raises(ValueError, match="methods"):
        tgp.fit(Xtr, Ytr, methods=("nope",))


def test_duplicate_points_without_regulariser_suggest_lambda(data):
    Xtr, _, Ytr, _ = data
    X = np.vstack([Xtr, Xtr[:1]])
    Y = np.vstack([Ytr, Ytr[:1]])
    with pytest.raises(ValueError, match="lambda_x > 0"):
        tgp.fit(X, Y, tgp.TGPParams(lambda_x=0.0))


def test_integer_and_float32_input_is_coerced(data):
    Xtr, Xte, Ytr, _ = data
    m32 = tgp.fit(Xtr.astype(np.float32), Ytr.astype(np.float32))
    assert m32.X.dtype == np.float64
    Xi = np.arange(10).reshape(-1, 1)
    mi = tgp.fit(Xi, Xi * 0.1, tgp.TGPParams(gamma_x=0.5, gamma_y=5.0))
    assert np.all(np.isfinite(tgp.predict(mi, Xi[:3], method="kl").y))
    # 1-D input is one column
    m1 = tgp.fit(Xtr.ravel(), Ytr.ravel())
    assert m1.X.shape == (30, 1)


def test_bad_predict_arguments(model, data):
    _, Xte, _, _ = data
    with pytest.raises(TypeError, match="model"):
        tgp.predict("model", Xte)
    with pytest.raises(ValueError, match="X must have 1 columns"):
        tgp.predict(model, np.hstack([Xte, Xte]))
    with pytest.raises(ValueError, match="method"):
        tgp.predict(model, Xte, method="rbf")
    with pytest.raises(ValueError, match="init"):
        tgp.predict(model, Xte, init="zeros")
    with pytest.raises(ValueError, match="init must have shape"):
        tgp.predict(model, Xte, init=np.zeros((2, 1)))
    with pytest.raises(ValueError, match="init contains NaN"):
        tgp.predict(model, Xte, init=np.full((5, 1), np.nan))
    with pytest.raises(ValueError, match="max_iter"):
        tgp.predict(model, Xte, max_iter=-1)
    with pytest.raises(TypeError, match="max_iter"):
        tgp.predict(model, Xte, max_iter=2.5)
    with pytest.raises(ValueError, match="trust_radius"):
        tgp.predict(model, Xte, trust_radius=0)
    with pytest.raises(ValueError, match="threads"):
        tgp.predict(model, Xte, threads=0)
    with pytest.raises(ValueError, match="optimizer"):
        tgp.predict(model, Xte, optimizer="adam")
    with pytest.raises(ValueError, match="Y must have shape"):
        tgp.objective(model, Xte, np.zeros((4, 1)))


def test_ikl_needs_c(data):
    Xtr, Xte, Ytr, _ = data
    m = tgp.fit(Xtr, Ytr, methods=("kl", "sm"))
    assert m.G is None and m.C is None
    with pytest.raises(ValueError, match="ikl"):
        tgp.predict(m, Xte, method="ikl")


def test_overflowing_outputs_are_rejected(toy300):
    """Regression test of #6, item 8."""
    Xtr, _, Ytr, _ = toy300
    with pytest.raises(ValueError, match="Y is too large"):
        tgp.fit(Xtr, Ytr * 1e300)


def test_certainty_validates_batch_size(toy300):
    """Regression test of #6, item 9."""
    Xtr, Xte, Ytr, Yte = toy300
    m = tgp.fit(Xtr, Ytr)
    with pytest.raises(ValueError, match="batch_size"):
        tgp.certainty(m, Xte, Yte, batch_size=-1)


def test_numpy_ints_none_methods_and_huge_max_iter_are_accepted(toy300):
    """Regression test of #6, item 9."""
    Xtr, Xte, Ytr, _ = toy300
    m = tgp.fit(Xtr, Ytr, methods=None, threads=np.int64(2))
    assert m.methods == ("kl", "ikl", "sm")
    p = tgp.predict(m, Xte[:5], method="kl", max_iter=2**63, threads=np.int32(1))
    assert p.converged.all()
    with pytest.raises(TypeError, match="methods"):
        tgp.fit(Xtr, Ytr, methods=3)


def test_errors_name_the_argument():
    """Regression test of #19, item 14."""
    d = datasets.covariate_shift_toy(seed=0)
    with pytest.raises(ValueError, match="sigma = 1e-300 is too small"):  # before: ZeroDivisionError
        shift.estimate_weights(d.X_train, d.X_test, sigma=1e-300)
    with pytest.raises(ValueError, match="no width in sigmas"):
        shift.select_sigma(d.X_train, d.X_test, sigmas=[1e-300])
    with pytest.raises(TypeError, match="random_state must be"):  # before: a SeedSequence error
        shift.estimate_weights(d.X_train, d.X_test, sigma=0.3, centers=10, random_state="x")
    with pytest.raises(TypeError, match="random_state must be"):
        tgp.select(d.X_train, d.Y_train, cv=3, random_state="x", alphas=(0.5,), betas=(1.5,))
    with pytest.raises(TypeError, match="seed must be"):
        from fastsm import gmm

        mix = datasets.gmm_manifold(d=2, K=2, n_gaussians=4, n_mixtures=2, seed=0)[0]
        gmm.pairwise(mix, method="mc", seed="x", n_samples=10)
    for cv in (True, None, 2.0):  # before: "'bool' object is not iterable"
        with pytest.raises(TypeError, match="cv must be 'loo', an int >= 2"):
            tgp.select(d.X_train, d.Y_train, cv=cv, alphas=(0.5,), betas=(1.5,))
    with pytest.raises(ValueError, match="X_train has values up to .* standardise"):  # before: overflow
        shift.estimate_weights(d.X_train * 1e160, d.X_test * 1e160)


def test_inputs_near_float64_max_give_a_value_error_or_a_finite_prediction():
    """Before: an input of 1.7e308 per coordinate was predicted as y = inf (the linear start overflowed).

    Regression test of #30, item 15.
    """
    X, Xt, Y, _ = datasets.toy1(0, n_train=150, n_test=4)
    big = Xt.copy()
    big[1] = 1.7e308
    for model in (tgp.fit(X, Y, MANIFOLD_PARAMS), tgp.fit_local(X, Y, MANIFOLD_PARAMS, n_neighbors=40, share="region",
                                                        region_size=20)):
        for method in ("kl", "sm"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ExtrapolationWarning)
                    y = tgp.predict(model, big, method=method).y
            except ValueError as err:
                assert "X" in str(err)
            else:
                assert np.isfinite(y).all()
