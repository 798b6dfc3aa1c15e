"""fastsm.tgp.fitting: the ridge start's frame, its kernel twin and the leave-one-out starts."""

import dataclasses

import numpy as np
import pytest

from fastsm import datasets, tgp
from fastsm._kernels.ridge import ridge_start
from fastsm.tgp.fitting import ridge, ridge_frame
from fastsm.tgp.loo import loo_ridge

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=0.5, lambda_x=0.1, lambda_y=0.1, alpha=0.5, beta=1.5)


def _identical_inputs(value, n=51, dx=3, dy=2, seed=0):
    rng = np.random.default_rng(seed)
    return np.full((n, dx), value), rng.standard_normal((n, dy))


def test_the_inexact_mean_of_a_constant_column_is_rounding():
    """#53 item 2: 0.64042265 repeated 51 times has an inexact mean; its spread is rounding, not data."""
    X, _ = _identical_inputs(0.64042265)
    assert np.abs(X.mean(axis=0) - X[0]).max() > 0.0  # the case: the mean is inexact
    mu, scale, Xc = ridge_frame(X)
    np.testing.assert_array_equal(Xc, 0.0)
    np.testing.assert_array_equal(scale, 1.0)


@pytest.mark.parametrize("value", [0.64042265, 0.7, -3.3e5])
def test_identical_inputs_start_at_the_mean_of_the_outputs(value):
    """#53 item 2: with every input equal, the ridge on the deduplicated rows (one row: the unpenalised
    bias alone) is the mean of ``Y``, everywhere.  Before: coefficients ~1e4 and starts of +-4e4."""
    X, Y = _identical_inputs(value)
    Xt = np.random.default_rng(1).uniform(-1.0, 1.0, (9, X.shape[1])) + value
    ref = Y.mean(axis=0)
    for coef in (ridge(X, Y), ridge_start(X, Y, np.ones(1), False)[0]):
        start = np.hstack([Xt, np.ones((len(Xt), 1))]) @ coef
        np.testing.assert_allclose(start, np.broadcast_to(ref, start.shape), rtol=0, atol=1e-14)
    model = tgp.fit(X, Y, PARAMS)
    loo = loo_ridge(model)
    ref_loo = (Y.sum(axis=0) - Y) / (len(Y) - 1)  # the mean of the other rows
    np.testing.assert_allclose(loo, ref_loo, rtol=0, atol=1e-13)


def test_one_constant_column_drops_out_of_the_ridge():
    """#53 item 2: a constant column (inexact mean) beside informative ones: the ridge is that of the
    other columns to the penalty's order (1e-6), and its coefficient is 0."""
    rng = np.random.default_rng(4)
    X = rng.standard_normal((80, 3))
    X[:, 1] = 0.64042265
    Y = X[:, [0, 2]] @ np.array([[1.0, -2.0], [0.5, 3.0]]) + 0.1 * rng.standard_normal((80, 2))
    A = np.hstack([X[:, [0, 2]], np.ones((80, 1))])
    ref = np.linalg.lstsq(A, Y, rcond=None)[0]  # plain least squares on the informative columns
    for coef in (ridge(X, Y), ridge_start(X, Y, np.ones(1), False)[0]):
        np.testing.assert_allclose(coef[1], 0.0, atol=1e-12)  # before: ~1e15 times the noise
        np.testing.assert_allclose(coef[[0, 2, 3]], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["kl", "sm"])
def test_identical_inputs_predict_as_translated_exact_ones(method):
    """#53 item 2: predictions do not depend on where the identical inputs sit: X = 0.64042265 (an
    inexact mean) predicts as X = 0.7 (an exact one) at test inputs moved by the same 0.05957735,
    global and local (K = N).  Before: |y| up to 1.0e5 (global) and 1.5e4 (local), all "converged"."""
    X, Y = _identical_inputs(0.64042265)
    Xt = np.random.default_rng(2).uniform(0.0, 1.0, (10, X.shape[1]))
    shift = 0.7 - 0.64042265
    ref = tgp.predict(tgp.fit(X + shift, Y, PARAMS), Xt + shift, method=method)
    assert np.abs(ref.y).max() < 3.0  # the exact-mean case is sane (measured 0.57)
    for model in (tgp.fit(X, Y, PARAMS), tgp.fit_local(X, Y, PARAMS, n_neighbors=len(X))):
        got = tgp.predict(model, Xt, method=method)
        # kernel values differ from the translated ones by rounding only (measured: 1e-12)
        np.testing.assert_allclose(got.y, ref.y, rtol=0, atol=1e-7)


def test_a_matrix_made_singular_by_large_weights_names_sample_weight():
    """#53 item 6: uniform weights 1e12 and more (noise lambda / w at rounding level) were blamed on lambda_x, with the
    wrong advice "need lambda_x > 0" although lambda_x = 1e-3."""

    X, _, Y, _ = datasets.toy1(0, n_train=100, n_test=1)
    p = tgp.TGPParams(lambda_x=1e-3, lambda_y=1e-3)
    for w in (1e14, 1e200):
        weights = np.full(100, w)
        with pytest.raises(ValueError, match=r"sample_weight\[i\].*normalise sample_weight to mean 1 or increase"):
            tgp.fit(X, Y, p, sample_weight=weights)
        with pytest.raises(ValueError, match=r"sample_weight\[i\].*normalise sample_weight to mean 1 or increase"):
            tgp.predict(tgp.fit_local(X, Y, p, sample_weight=weights, n_neighbors=20), X[:2])
    Xd = np.repeat(X[:50], 2, axis=0)
    with pytest.raises(ValueError, match=r"need a larger lambda_x \(now 1e-20\)"):
        tgp.fit(Xd, Y, tgp.TGPParams(lambda_x=1e-20, lambda_y=1e-3))
    with pytest.raises(ValueError, match=r"need lambda_x > 0"):
        tgp.fit(Xd, Y, tgp.TGPParams(lambda_x=0.0, lambda_y=1e-3))


@pytest.mark.parametrize("case", ["plain", "weighted", "constant column", "scaled", "one point"])
def test_the_ridge_start_against_the_reference_twin(case):
    """``fastsm.reference``'s own NumPy ridge (no code shared with the fast path since #54 item 5)."""
    from fastsm.reference import tgp as ref

    rng = np.random.default_rng(8)
    X, Y, w = rng.standard_normal((50, 4)), rng.standard_normal((50, 2)), None
    if case == "weighted":
        w = rng.uniform(0.1, 4.0, 50)
    elif case == "constant column":
        X[:, 1] = 0.64042265
    elif case == "scaled":
        X = X * 1e14
    elif case == "one point":
        X, Y = X[:1], Y[:1]
    got = ridge(X, Y, w)
    np.testing.assert_allclose(ref._ridge(X, Y, w), got, rtol=1e-9, atol=1e-12 * max(1.0, np.abs(got).max()))


def test_one_point_and_identical_inputs_fit_and_predict():
    """Regression test of #6, item 10."""
    m = tgp.fit([[0.5]], [[1.0]])
    assert np.isfinite(tgp.predict(m, [[0.5]], method="kl").y).all()
    X = np.ones((5, 2))
    Y = np.arange(5.0)[:, None]
    m = tgp.fit(X, Y)
    np.testing.assert_allclose(np.hstack([X[:1], [[1.0]]]) @ m.ridge_coef, [[2.0]])  # the mean of Y
    assert np.isfinite(tgp.predict(m, X[:2], method="sm").y).all()


def test_model_owns_read_only_copies(toy300):
    """Regression test of #6, item 14."""
    Xtr, Xte, Ytr, _ = toy300
    X, Y = Xtr.copy(), Ytr.copy()
    m = tgp.fit(X, Y)
    before = tgp.predict(m, Xte[:10], method="kl").y
    X += 1.0
    Y *= 2.0
    np.testing.assert_array_equal(tgp.predict(m, Xte[:10], method="kl").y, before)
    for k in ("X", "Y", "Wx", "Wy", "Wxy", "G", "ridge_coef"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(m, k)[0, 0] += 1.0


def test_replace_refits(toy300):
    """Regression test of #6, item 14."""
    Xtr, Xte, Ytr, _ = toy300
    m = tgp.fit(Xtr, Ytr)
    p2 = tgp.TGPParams(gamma_x=0.5, alpha=0.5)
    r = dataclasses.replace(m, params=p2)
    fresh = tgp.fit(Xtr, Ytr, p2)
    np.testing.assert_array_equal(r.Wxy, fresh.Wxy)
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(m, Wx=m.Wx)
