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


TINY = (1e-300, 6.5e-315, 1e-320, 0.0)


def _tiny_weights(n, rng):
    w = rng.uniform(0.5, 2.0, n)
    w[[1, 4, 7, 9]] = TINY
    return w


@pytest.mark.parametrize("method", ["sm", "kl", "ikl"])
def test_negligible_weights_equal_leaving_the_points_out(method):
    """Before: infinite log-determinants; IKLTGP converged for no point and was 0.34 off the left-out model.

    Regression test of #19, item 6.
    """
    X, Xt, Y, _ = datasets.toy1(0, n_train=60, n_test=15)
    w = _tiny_weights(60, np.random.default_rng(1))
    keep = w > 1e-200
    full = tgp.fit(X, Y, sample_weight=w)
    left = tgp.fit(X[keep], Y[keep], sample_weight=w[keep])
    assert full.n_train == keep.sum()
    assert np.isfinite([full.logdet_x, full.logdet_y, full.logdet_xy]).all()
    a, b = tgp.predict(full, Xt, method=method), tgp.predict(left, Xt, method=method)
    np.testing.assert_array_equal(a.y, b.y)
    assert a.converged.all()


def test_negligible_weights_in_partial_fit_select_and_local():
    """Regression test of #19, item 6."""
    X, Xt, Y, _ = datasets.toy1(0, n_train=60, n_test=10)
    rng = np.random.default_rng(2)
    w = rng.uniform(0.5, 2.0, 60)
    p = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0)  # numbers: partial_fit keeps the first fit's widths
    model = tgp.fit(X[:50], Y[:50], p, sample_weight=w[:50])
    # before: "duplicates a training point" for w = 1e-320
    same = tgp.partial_fit(model, X[50:52], Y[50:52], sample_weight=[1e-320, 0.0])
    assert same.n_train == 50
    np.testing.assert_array_equal(tgp.predict(same, Xt).y, tgp.predict(model, Xt).y)
    grown = tgp.partial_fit(model, X[50:53], Y[50:53], sample_weight=[1e-320, 1.0, 6.5e-315])
    ref = tgp.fit(np.vstack([X[:50], X[51:52]]), np.vstack([Y[:50], Y[51:52]]), p,
                  sample_weight=np.append(w[:50], 1.0))
    np.testing.assert_allclose(tgp.predict(grown, Xt, method="kl").y, tgp.predict(ref, Xt, method="kl").y,
                               atol=1e-7)
    wt = _tiny_weights(60, rng)
    keep = wt > 1e-200
    opts = dict(alphas=(0.5,), betas=(1.5,), cv="loo", max_iter=20)
    a = tgp.select(X, Y, sample_weight=wt, **opts)
    b = tgp.select(X[keep], Y[keep], sample_weight=wt[keep], **opts)
    np.testing.assert_array_equal(a.table["mean"], b.table["mean"])
    la = tgp.predict(tgp.fit_local(X, Y, n_neighbors=20, sample_weight=wt), Xt)
    lb = tgp.predict(tgp.fit_local(X[keep], Y[keep], n_neighbors=20, sample_weight=wt[keep]), Xt)
    np.testing.assert_array_equal(la.y, lb.y)


def test_all_negligible_weights_are_rejected_clearly():
    """Regression test of #19, item 6."""
    X, _, Y, _ = datasets.toy1(0, n_train=20, n_test=2)
    with pytest.raises(ValueError, match="sample_weight must have an entry above"):
        tgp.fit(X, Y, sample_weight=np.full(20, 1e-310))


def test_huge_sample_weights_neither_overflow_nor_change_the_widths():
    """Before: w_i w_j overflowed in median_sq_distance for uniform weights >= ~1e154 (gamma_y 3.8 -> 1.1e6), and
    select with weights 1e307 scored every row NaN and still returned a selection.

    Regression test of #30, item 9.
    """
    from fastsm.tgp.loo import loo_ridge
    from fastsm.tgp.params import TGPParams

    X, _, Y, _ = datasets.random_structured(0, n_train=80, n_test=5, dx=3, dy=2)
    ref = TGPParams().resolve(X, Y)
    for c in (1e154, 1e200, 1e307, 1e-300):
        assert TGPParams().resolve(X, Y, np.full(len(X), c)) == ref
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    assert TGPParams().resolve(X, Y, w * 2.0**900) == TGPParams().resolve(X, Y, w)  # exact factor: exact
    a, b = TGPParams().resolve(X, Y, w * 1e300), TGPParams().resolve(X, Y, w)  # up to a tie-break by rounding
    np.testing.assert_allclose([a.gamma_x, a.gamma_y], [b.gamma_x, b.gamma_y], rtol=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for cv in ("loo", 3):
            sel = tgp.select(X, Y, sample_weight=np.full(len(X), 1e307), cv=cv, method="kl")
            assert np.isfinite(sel.table["mean"]).all()
        start = loo_ridge(tgp.fit(X, Y, sample_weight=np.full(len(X), 1e307)))
    np.testing.assert_allclose(start, loo_ridge(tgp.fit(X, Y)), rtol=0, atol=1e-9)


@pytest.mark.parametrize("n, k", [(1200, 2), (2500, 3)])
def test_integer_weights_give_the_widths_of_repeated_rows_above_the_thinning_threshold(n, k):
    """Before: 1200 rows x weight 2 gave gamma_x 0.026257, the rows repeated to 2400: 0.026219.

    Regression test of #30, item 10.
    """
    from fastsm.tgp.params import SCALE_MAX_ROWS, TGPParams

    rng = np.random.default_rng(5)
    X, Y = rng.standard_normal((n, 4)), rng.standard_normal((n, 2))
    assert n * k > SCALE_MAX_ROWS
    weighted = TGPParams().resolve(X, Y, np.full(n, float(k)))
    repeated = TGPParams().resolve(np.repeat(X, k, axis=0), np.repeat(Y, k, axis=0))
    assert weighted == repeated
    w = rng.integers(1, 4, n)
    assert TGPParams().resolve(X, Y, w.astype(float)) == TGPParams().resolve(np.repeat(X, w, axis=0),
                                                                           np.repeat(Y, w, axis=0))
