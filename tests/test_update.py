"""partial_fit (bordered updates) and remove (downdates) against refitting from scratch."""

import numpy as np
import pytest

from fastsm import datasets, tgp

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)
STORED = ("Kx_inv", "Ky_inv", "Kxy_inv", "C")


def _data(n, seed=0):
    X, Xt, Y, _ = datasets.random_structured(seed, n_train=n, n_test=20, dx=3, dy=4)
    return X, Y, Xt


def assert_same_model(a, b, rtol=1e-8):
    for name in STORED:
        A, B = getattr(a, name), getattr(b, name)
        np.testing.assert_allclose(A, B, rtol=0, atol=rtol * np.abs(B).max(), err_msg=name)
    for name in ("logdet_x", "logdet_y", "logdet_xy", "y_spread"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=rtol, atol=rtol, err_msg=name)
    np.testing.assert_allclose(a.ridge_coef, b.ridge_coef, rtol=1e-7, atol=1e-9)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.Y, b.Y)


@pytest.mark.parametrize("m", [1, 5])
def test_partial_fit_equals_refit(m):
    X, Y, Xt = _data(90)
    base = tgp.fit(X[:-m], Y[:-m], PARAMS)
    upd = tgp.partial_fit(base, X[-m:], Y[-m:])
    ref = tgp.fit(X, Y, PARAMS)
    assert_same_model(upd, ref)
    # the two models agree to rounding and the predictions follow: measured |dy| <= 1.4e-14 with factors
    # (with inverses IKLTGP's optimiser took another path in a flat objective: 4.4e-8 on Nehalem kernels)
    for method, atol in (("kl", 1e-10), ("ikl", 1e-10), ("sm", 1e-10)):
        np.testing.assert_allclose(tgp.predict(upd, Xt, method=method).y, tgp.predict(ref, Xt, method=method).y,
                                   rtol=0, atol=atol)
    assert base.n_train == 90 - m  # the input model is unchanged


def test_a_model_in_inverse_form_is_updated_in_cholesky_form():
    """partial_fit, remove and with_alpha refit a model in inverse form (``views.inverse_form``, or one
    pickled before #55) in Cholesky form first: the same models as from the Cholesky-form original."""
    from fastsm.tgp.views import inverse_form

    X, Y, _ = _data(60, seed=5)
    base = tgp.fit(X[:-3], Y[:-3], PARAMS)
    inv = inverse_form(base)
    assert inv.factor_form == "inverse"
    pairs = ((tgp.partial_fit(inv, X[-3:], Y[-3:]), tgp.partial_fit(base, X[-3:], Y[-3:])),
             (tgp.remove(inv, [0, 7]), tgp.remove(base, [0, 7])),
             (tgp.with_alpha(inv, 0.3), tgp.with_alpha(base, 0.3)))
    for got, ref in pairs:
        assert got.factor_form == "cholesky"
        assert_same_model(got, ref)
    assert tgp.with_alpha(inv, PARAMS.alpha, beta=2.0).factor_form == "inverse"  # nothing refactorised


def test_repeated_appends_and_weights():
    X, Y, Xt = _data(60, seed=3)
    w = np.random.default_rng(0).uniform(0.3, 2.0, 60)
    model = tgp.fit(X[:40], Y[:40], PARAMS, sample_weight=w[:40])
    for s in range(40, 60, 4):
        model = tgp.partial_fit(model, X[s:s + 4], Y[s:s + 4], sample_weight=w[s:s + 4])
    assert_same_model(model, tgp.fit(X, Y, PARAMS, sample_weight=w))
    # unweighted model + weights for the new points: the old points count with weight 1
    m = tgp.partial_fit(tgp.fit(X[:50], Y[:50], PARAMS), X[50:], Y[50:], sample_weight=w[50:])
    w1 = np.concatenate([np.ones(50), w[50:]])
    assert_same_model(m, tgp.fit(X, Y, PARAMS, sample_weight=w1))


@pytest.mark.parametrize("indices", [[0], [7, 3, 50], [-1]])
def test_remove_equals_refit(indices):
    X, Y, Xt = _data(80, seed=1)
    model = tgp.fit(X, Y, PARAMS)
    keep = np.setdiff1d(np.arange(80), np.asarray(indices) % 80)
    out = tgp.remove(model, indices)
    ref = tgp.fit(X[keep], Y[keep], PARAMS)
    assert_same_model(out, ref)
    # the models agree to rounding and so do the predictions: measured |dy| <= 2.3e-14, criteria 5.4e-14
    # relative (with downdated inverses 3.1e-8 and 4.3e-12)
    a, b = tgp.predict(out, Xt), tgp.predict(ref, Xt)
    np.testing.assert_allclose(a.y, b.y, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.criterion, b.criterion, rtol=1e-12)


def test_remove_then_append_round_trips():
    X, Y, _ = _data(70, seed=2)
    model = tgp.fit(X, Y, PARAMS)
    back = tgp.partial_fit(tgp.remove(model, np.arange(60, 70)), X[60:], Y[60:])
    assert_same_model(back, model)


def test_update_rejects_bad_input():
    X, Y, _ = _data(30)
    model = tgp.fit(X, Y, PARAMS)
    with pytest.raises(ValueError, match="X_new must have 3 columns"):
        tgp.partial_fit(model, np.zeros((2, 2)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="Y_new must have 4 columns"):
        tgp.partial_fit(model, np.zeros((2, 3)), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="same number of rows"):
        tgp.partial_fit(model, np.zeros((2, 3)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="finite|NaN"):
        tgp.partial_fit(model, np.full((1, 3), np.nan), np.zeros((1, 4)))
    with pytest.raises(ValueError, match="sample_weight"):
        tgp.partial_fit(model, X[:2], Y[:2], sample_weight=[1.0])
    with pytest.raises(TypeError, match="model"):
        tgp.partial_fit(None, X[:2], Y[:2])
    with pytest.raises(ValueError, match="indices must lie in"):
        tgp.remove(model, [30])
    with pytest.raises(TypeError, match="integer"):
        tgp.remove(model, [1.5])
    with pytest.raises(ValueError, match="no training points"):
        tgp.remove(model, np.arange(30))
    exact = tgp.fit(X, Y, tgp.TGPParams(lambda_x=0.0, lambda_y=0.0, gamma_x=0.5, gamma_y=2.0))
    with pytest.raises(ValueError, match="positive definite"):
        tgp.partial_fit(exact, X[:1], Y[:1])


@pytest.mark.parametrize("n", [1, 2, 9, 40])
def test_dropping_a_row_from_a_cholesky_factor_is_the_reduced_matrix_factor(n):
    """``drop_index_cholesky`` (column rotations of ``L``, #55) against NumPy's Cholesky factor of ``K`` without
    row and column ``i``, and ``rotate_and_drop`` of ``G = L_Y^-1 L_X`` against a dense solve; measured at most
    8.9e-16 (``L'``) and 2.2e-16 (``G'``) at n = 9."""
    from scipy.linalg import solve_triangular

    from fastsm._kernels.factor_update import drop_index_cholesky, rotate_and_drop

    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((n + 1, n + 1)), rng.standard_normal((n + 1, n + 1))
    Kx, Ky = A @ A.T + (n + 1) * np.eye(n + 1), B @ B.T + (n + 1) * np.eye(n + 1)
    Lx, Ly = np.linalg.cholesky(Kx), np.linalg.cholesky(Ky)
    Sx, Sy = Lx + np.tril(Lx, -1).T, Ly + np.tril(Ly, -1).T  # symmetric storage
    G = solve_triangular(Ly, Lx, lower=True)
    for i in sorted({0, n // 2, n}):
        keep = np.delete(np.arange(n + 1), i)
        Sx2, cx, sx = drop_index_cholesky(Sx, i)
        Sy2, cy, sy = drop_index_cholesky(Sy, i)
        ref_x, ref_y = np.linalg.cholesky(Kx[np.ix_(keep, keep)]), np.linalg.cholesky(Ky[np.ix_(keep, keep)])
        np.testing.assert_array_equal(Sx2, Sx2.T)
        np.testing.assert_allclose(np.tril(Sx2), ref_x, rtol=0, atol=1e-13 * np.abs(ref_x).max())
        np.testing.assert_allclose(np.tril(Sy2), ref_y, rtol=0, atol=1e-13 * np.abs(ref_y).max())
        G2 = rotate_and_drop(G, i, cy, sy, cx, sx)
        np.testing.assert_allclose(G2, solve_triangular(ref_y, ref_x, lower=True), rtol=0, atol=1e-13)
