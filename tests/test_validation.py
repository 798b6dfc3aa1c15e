"""Bad input gets a clear ValueError/TypeError naming the argument."""

import numpy as np
import pytest

from fastsm import datasets, tgp


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
