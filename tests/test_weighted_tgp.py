"""Importance-weighted TGP ([CS] §IV-B in the non-vacuous form of docs/math.md §6)."""

import warnings

import numpy as np
import pytest

from fastsm import datasets, reference, shift, tgp

#: The toy's model (chosen on seeds 0-9 of a grid over gamma_x, gamma_y, lambda; docs/shift.md).
TOY_PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=0.05, lambda_x=0.1, lambda_y=0.1, alpha=0.5, beta=1.5)


@pytest.fixture(scope="module")
def toy():
    d = datasets.covariate_shift_toy(n_train=120, n_test=60, seed=3)
    w = shift.estimate_weights(d.X_train, d.X_test, sigma=0.3).weights
    return d, w


def test_uniform_weights_reproduce_the_unweighted_model(toy):
    d, _ = toy
    m0 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS)
    m1 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=np.ones(len(d.X_train)))
    for name in ("Wx", "Wy", "Wxy", "G", "ridge_coef"):
        np.testing.assert_array_equal(getattr(m1, name), getattr(m0, name))
    for method in ("kl", "ikl", "sm"):
        p0, p1 = tgp.predict(m0, d.X_test, method=method), tgp.predict(m1, d.X_test, method=method)
        np.testing.assert_allclose(p1.y, p0.y, rtol=0, atol=1e-10)
        np.testing.assert_allclose(p1.objective, p0.objective, rtol=1e-10)
        np.testing.assert_allclose(p1.log_certainty, p0.log_certainty, rtol=1e-10)


def test_weights_change_the_model_and_match_the_dense_twin(toy):
    d, w = toy
    m = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w)
    r = reference.tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w)
    Y = d.Y_test + 0.1
    for method in ("kl", "ikl", "sm"):
        np.testing.assert_allclose(tgp.objective(m, d.X_test, Y, method=method),
                                   reference.tgp.objective(r, d.X_test, Y, method=method), rtol=1e-7, atol=1e-9)
    m0 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS)
    assert np.max(np.abs(tgp.predict(m, d.X_test).y - tgp.predict(m0, d.X_test).y)) > 1e-3


def test_dense_weighted_kernel(toy):
    """K_X = K0_X + lambda_x W^-1 built by brute force (docs/math.md §6), compared through its inverse."""
    d, w = toy
    m = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w)
    keep = w > 0
    X = d.X_train[keep]
    K0 = np.exp(-TOY_PARAMS.gamma_x * (X - X.T) ** 2)
    K = K0 + TOY_PARAMS.lambda_x * np.diag(1.0 / w[keep])
    np.testing.assert_allclose(m.Kx_inv @ K, np.eye(len(X)), atol=1e-8)


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_weighted_gradients_by_finite_differences(toy, method):
    d, w = toy
    m = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w)
    X, Y = d.X_test[:10], d.Y_test[:10] + 0.05
    _, g = tgp.objective(m, X, Y, method=method, return_gradient=True)
    h = 1e-6
    fd = (tgp.objective(m, X, Y + h, method=method) - tgp.objective(m, X, Y - h, method=method)) / (2 * h)
    err = np.abs(fd - g[:, 0]) / np.maximum(1.0, np.abs(g[:, 0]))
    assert err.max() <= 1e-5


def test_zero_weights_drop_points(toy):
    d, w = toy
    w0 = w.copy()
    w0[:10] = 0.0
    m = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w0)
    m_drop = tgp.fit(d.X_train[10:], d.Y_train[10:], TOY_PARAMS, sample_weight=w[10:])
    assert m.n_train == len(w) - 10
    np.testing.assert_array_equal(m.Wxy, m_drop.Wxy)
    model = tgp.TGPModel(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w0)  # the dataclass path
    np.testing.assert_array_equal(model.Wxy, m.Wxy)
    assert "weighted=True" in repr(model)


def test_importance_weighting_helps_under_shift():
    """[CS] §IV: IW-SMTGP and IW-KLTGP beat SMTGP and KLTGP on the toy under shift (>= 8 of 10 seeds)."""
    wins = {"kl": 0, "sm": 0}
    for seed in range(10):
        d = datasets.covariate_shift_toy(seed=seed)
        w = shift.estimate_weights(d.X_train, d.X_test, sigma=0.3).weights
        m0 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, methods=("kl", "sm"))
        m1 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, methods=("kl", "sm"), sample_weight=w)
        for method in wins:
            e0 = np.mean((tgp.predict(m0, d.X_test, method=method).y - d.Y_test) ** 2)
            e1 = np.mean((tgp.predict(m1, d.X_test, method=method).y - d.Y_test) ** 2)
            wins[method] += int(e1 < e0)
    assert wins["kl"] >= 8 and wins["sm"] >= 8, wins  # measured 10/10 for both


@pytest.mark.parametrize(
    "w, match",
    [
        (-np.ones(120), "sample_weight must be >= 0"),
        (np.full(120, np.nan), "sample_weight contains NaN"),
        (np.zeros(120), "at least one positive entry"),
        (np.ones(7), r"one entry per training point \(120\)"),
        (np.ones((120, 2)), "sample_weight must be 1-dimensional"),
        ("heavy", "sample_weight must hold real numbers"),
    ],
)
def test_bad_sample_weight(toy, w, match):
    d, _ = toy
    with pytest.raises((ValueError, TypeError), match=match):
        tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, sample_weight=w)


def test_weights_without_regulariser_warn(toy):
    d, w = toy
    p = tgp.TGPParams(gamma_x=0.5, gamma_y=0.05, lambda_x=0.0, lambda_y=0.0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        try:
            tgp.fit(d.X_train[:20], d.Y_train[:20], p, sample_weight=w[:20] + 0.1)
        except ValueError:
            pass  # K may be singular without a regulariser; the warning comes first
    assert any("no effect" in str(r.message) for r in rec)


def test_cs_eq12_to_17_read_literally_change_nothing(toy):
    """[CS] Eq. 12-17 literally (K_XW = W^1/2 K_X W^1/2, k_XW = W^1/2 k_x): the weights cancel in k^T K^-1 k.

    fastsm therefore adds the regulariser after weighting (docs/math.md §6);
    test_weights_change_the_model_and_match_the_dense_twin shows that its weights change the predictions.
    """
    d, w = toy
    w = np.where(w > 0, w, 0.5)
    X, x = d.X_train, d.X_test[:7]
    g, lam = TOY_PARAMS.gamma_x, TOY_PARAMS.lambda_x
    K = np.exp(-g * (X - X.T) ** 2) + lam * np.eye(len(X))
    k = np.exp(-g * (X - x.T) ** 2)  # (N, 7)
    s = np.sqrt(w)[:, None]
    plain = np.einsum("ij,ij->j", k, np.linalg.solve(K, k))
    literal = np.einsum("ij,ij->j", s * k, np.linalg.solve(s * K * s.T, s * k))
    np.testing.assert_allclose(literal, plain, rtol=1e-6)
