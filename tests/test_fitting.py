"""fastsm.tgp.fitting: the ridge start's frame, its kernel twin and the leave-one-out starts; small models in
Cholesky form (KNN-local and region models, ``factorize_cholesky``); sample weights (importance-weighted TGP)."""

import dataclasses
import pickle
import warnings

import numpy as np
import pytest
from fused import msub

from fastsm import datasets, reference, shift, tgp
from fastsm._kernels.cholesky import CHOLESKY_MAX_N, cholesky_symmetric
from fastsm._kernels.linalg import potrf_symmetric
from fastsm._kernels.ridge import ridge_start, solve_ridge_start
from fastsm._threads import thread_limits
from fastsm.tgp import regions
from fastsm.tgp.fitting import factorize_cholesky, ridge, ridge_frame, weighted_gram
from fastsm.tgp.local_model import local_model
from fastsm.tgp.loo import loo_ridge
from fastsm.tgp.views import inverse_form, products_plan

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
    for coef in (ridge(X, Y), solve_ridge_start(X, Y, np.ones(1), False)[0]):
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
    for coef in (ridge(X, Y), solve_ridge_start(X, Y, np.ones(1), False)[0]):
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
    with pytest.raises((ValueError, TypeError), match="init=False"):  # TypeError from Python 3.13 on
        dataclasses.replace(m, Wx=m.Wx)


CHOLESKY_PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-3, lambda_y=1e-2, alpha=0.6, beta=1.5)


@pytest.fixture(scope="module")
def data():
    X, Xt, Y, _ = datasets.random_structured(1, n_train=120, n_test=12, dx=3, dy=2)
    return X, Xt, Y, CHOLESKY_PARAMS.resolve(X, Y, None)


def _cholesky_longdouble(K):
    """Cholesky factor of ``K`` in long double (a plain right-looking reference)."""
    A = np.array(K, dtype=np.longdouble)
    n = A.shape[0]
    L = np.zeros_like(A)
    for k in range(n):
        L[k, k] = np.sqrt(A[k, k])
        L[k + 1:, k] = A[k + 1:, k] / L[k, k]
        A[k + 1:, k + 1:] -= np.outer(L[k + 1:, k], L[k + 1:, k])
    return L


@pytest.mark.parametrize("weighted", [False, True])
def test_factors_are_cholesky_factors_in_symmetric_storage(data, weighted):
    """Against a long-double reference: each factor is the Cholesky factor of the Gram matrix, as
    accurate as LAPACK's ``dpotrf`` (forward error within 4x, residual within n eps of ``K``),
    stored with ``L^T`` above the diagonal; its log-determinant is ``slogdet``'s."""
    X, _, Y, p = data
    w = np.random.default_rng(0).uniform(0.2, 3.0, len(X)) if weighted else None
    parts = factorize_cholesky(X, Y, p, w)
    Kx = weighted_gram(X, p.gamma_x, p.lambda_x, w)
    Ky = weighted_gram(Y, p.gamma_y, p.lambda_y, w)
    n = len(X)
    for name, K, ld in (("Wx", Kx, "logdet_x"), ("Wy", Ky, "logdet_y"),
                        ("Wxy", (1.0 - p.alpha) * Kx + p.alpha * Ky, "logdet_xy")):
        S = parts[name]
        L = np.tril(S)
        np.testing.assert_array_equal(np.triu(S), L.T, err_msg=name)
        ref = _cholesky_longdouble(K)
        with thread_limits(1):
            S_lapack = np.array(K, order="C", copy=True)
            assert potrf_symmetric(S_lapack) == 0
            lapack = np.tril(S_lapack)
        err, lapack_err = float(np.abs(L - ref).max()), float(np.abs(lapack - ref).max())
        assert err <= 4.0 * lapack_err + 1e-15, (name, err, lapack_err)
        residual = float(np.abs(L.astype(np.longdouble) @ L.T.astype(np.longdouble) - K).max())
        assert residual <= n * np.finfo(float).eps * np.abs(K).max(), (name, residual)
        np.testing.assert_allclose(parts[ld], np.linalg.slogdet(K)[1], rtol=1e-12)
    assert parts["factor_form"] == "cholesky" and parts["G"] is None


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 63, 64, 65, 120, 201, 401])
def test_the_cholesky_kernel_against_numpy(n):
    """``cholesky_symmetric`` on every shape of its loops (orders around multiples of eight, and
    above ``CHOLESKY_MAX_N``, where it calls ``dpotrf``): NumPy's factor to rounding, ``L^T``
    above the diagonal, whatever the strict lower triangle held (NaN here)."""
    rng = np.random.default_rng(n)
    Z = rng.standard_normal((n, 4))
    K = np.exp(-0.5 * ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)) + 1e-3 * np.eye(n)
    A = np.triu(K) + np.tril(np.full((n, n), np.nan), -1)
    assert cholesky_symmetric(A) == 0
    L = np.linalg.cholesky(K)
    np.testing.assert_allclose(np.tril(A), L, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(np.triu(A), np.tril(A).T)


def _cholesky_one_step(K):
    """The right-looking Cholesky factor ``U = L^T`` one pivot at a time in NumPy: the pivot's square root,
    its row scaled by the reciprocal (as ``dpotf2``), then every later entry of the upper triangle updated by
    one multiply-subtract (:func:`fused.msub`, as the kernels round it), each entry taking its terms in pivot
    order."""
    U = np.triu(K).astype(float)
    n = len(U)
    for k in range(n):
        r = np.sqrt(U[k, k])
        U[k, k] = r
        U[k, k + 1:] *= 1.0 / r
        u = U[k, k + 1:]
        U[k + 1:, k + 1:] = np.triu(msub(U[k + 1:, k + 1:], u[:, None], u[None, :]))
    return U


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 40, 47, 48, 49, 120, 200, 203])
def test_the_cholesky_kernel_is_bitwise_the_one_step_reference(n):
    """Below ``CHOLESKY_MAX_N`` the factor's bits are those of :func:`_cholesky_one_step` whatever tiles
    the kernel's loops take (eight and sixteen columns, a last partial vector): the bits depend on the
    matrix and on whether the compile target fuses, nothing else."""
    rng = np.random.default_rng(100 + n)
    Z = rng.standard_normal((n, 5))
    K = np.exp(-0.3 * ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)) + 1e-3 * np.eye(n)
    A = np.triu(K) + np.tril(np.full((n, n), np.nan), -1)
    assert cholesky_symmetric(A) == 0
    np.testing.assert_array_equal(np.triu(A), _cholesky_one_step(K))


@pytest.mark.parametrize("n, bad", [(5, 0), (10, 3), (50, 17), (200, 150), (200, 199), (401, 300)])
def test_the_cholesky_kernel_reports_lapacks_info(n, bad):
    """A matrix whose leading minor of order ``bad + 1`` is not positive: ``info`` is ``bad + 1``,
    as ``dpotrf``'s; a NaN pivot too (the callers also check the pivots and the log-determinant)."""
    rng = np.random.default_rng(bad)
    Z = rng.standard_normal((n, n))
    for value in (-1.0, np.nan):
        K = Z @ Z.T / n + np.eye(n)
        K[bad, bad] = value
        A, B = K.copy(), K.copy()
        with thread_limits(1):
            expected = potrf_symmetric(B)
        info = cholesky_symmetric(A)
        if value == -1.0:
            assert info == expected == bad + 1
        elif n <= CHOLESKY_MAX_N:  # above, dpotrf's: OpenBLAS's blocked dpotrf passes a NaN on (measured)
            assert info == bad + 1


def test_predictions_agree_with_the_inverse_form(data):
    """Substitutions with L against products with W = L^-1 (rounding apart: measured 6e-14 on y)."""
    X, Xt, Y, p = data
    inv = inverse_form(tgp.fit(X, Y, p, methods=("kl", "sm")))  # the inverse form of leave-one-out and updates
    chol = local_model(inv.X, inv.Y, inv.params, ("kl", "sm"))
    assert chol.factor_form == "cholesky" and products_plan(chol).solve and inv.factor_form == "inverse"
    for method in ("kl", "sm"):
        a, b = tgp.predict(inv, Xt, method=method), tgp.predict(chol, Xt, method=method)
        np.testing.assert_allclose(b.y, a.y, rtol=0, atol=1e-9)
        np.testing.assert_allclose(b.objective, a.objective, rtol=1e-9)
        np.testing.assert_allclose(b.log_certainty, a.log_certainty, rtol=1e-9, atol=1e-12)
    for prop in ("Kx_inv", "Ky_inv", "Kxy_inv"):
        np.testing.assert_allclose(getattr(chol, prop), getattr(inv, prop), rtol=1e-8,
                                   atol=1e-8 * np.abs(getattr(inv, prop)).max())
    W = chol.inverse_factor("Wy")  # the inverse of the stored L, lower triangular
    np.testing.assert_array_equal(W, np.tril(W))
    np.testing.assert_allclose(W @ np.tril(chol.Wy), np.eye(len(X)), rtol=0, atol=1e-10)
    np.testing.assert_allclose(W, inv.Wy, rtol=0, atol=1e-8 * np.abs(inv.Wy).max())


def test_every_local_model_is_in_cholesky_form_and_predicts_as_the_inverse_form(data):
    """IKLTGP, ``share="cluster"`` (``rows=False``) and models above ``ROW_PRODUCTS_MAX_N`` points are in
    Cholesky form too (LAPACK's factors, session 37): their predictions are those of the same model's
    inverse form to rounding (measured under the Nehalem, SandyBridge, Haswell and SkylakeX kernels: y
    1.8e-13, objective 1.2e-12 relative, log-certainty 9.2e-13 relative)."""
    from fastsm import config

    X, Xt, Y, p = data
    old = config.ROW_PRODUCTS_MAX_N
    models = [(local_model(X, Y, p, ("ikl",)), "ikl"), (local_model(X, Y, p, ("kl", "sm"), rows=False), "sm")]
    try:
        config.ROW_PRODUCTS_MAX_N = len(X) - 1
        models.append((local_model(X, Y, p, ("kl", "sm")), "kl"))
    finally:
        config.ROW_PRODUCTS_MAX_N = old
    for model, method in models:
        assert model.factor_form == "cholesky"
        a, b = tgp.predict(inverse_form(model), Xt, method=method), tgp.predict(model, Xt, method=method)
        np.testing.assert_allclose(b.y, a.y, rtol=0, atol=1e-9)
        np.testing.assert_allclose(b.objective, a.objective, rtol=1e-9)
        np.testing.assert_allclose(b.log_certainty, a.log_certainty, rtol=1e-9, atol=1e-12)


def test_packs_pickles_and_serves_the_inverse_form_operations(data):
    X, Xt, Y, p = data
    chol = local_model(X, Y, p, ("kl", "sm"))
    from fastsm._kernels.tri_rows import pack_lower, unpack_lower

    M = np.random.default_rng(1).standard_normal((7, 7))
    np.testing.assert_array_equal(pack_lower(M), M[np.tri(7, dtype=bool)])  # NumPy's order, row by row
    np.testing.assert_array_equal(unpack_lower(pack_lower(M), 7, False), np.tril(M))
    np.testing.assert_array_equal(unpack_lower(pack_lower(M), 7, True), np.tril(M) + np.tril(M, -1).T)
    back = regions.CompactModel.pack(chol).unpack()
    assert back.factor_form == "cholesky"
    for name in ("Wx", "Wy", "Wxy", "ridge_coef"):
        np.testing.assert_array_equal(getattr(back, name), getattr(chol, name), err_msg=name)
    assert regions.CompactModel.pack(chol).nbytes < 0.6 * regions.model_nbytes(chol)
    again = pickle.loads(pickle.dumps(chol))  # the fused-path flag and the storage stay in the process
    np.testing.assert_allclose(tgp.predict(again, Xt).y, tgp.predict(chol, Xt).y, rtol=0, atol=1e-12)
    # leave-one-out runs on either form (substitutions with L, or products with W), equal to rounding
    # (measured 2.2e-14); the updates keep the Cholesky form
    inv = inverse_form(chol)
    rows = [0, 5, 17]
    np.testing.assert_allclose(tgp.loo_predict(chol, rows=rows).y, tgp.loo_predict(inv, rows=rows).y, rtol=0,
                               atol=1e-11)
    grown, fewer = tgp.partial_fit(chol, Xt[:2], Y[:2]), tgp.remove(chol, [0, 7])
    for up, X_up, Y_up in ((grown, np.vstack([X, Xt[:2]]), np.vstack([Y, Y[:2]])),
                           (fewer, np.delete(X, [0, 7], 0), np.delete(Y, [0, 7], 0))):
        refit = local_model(X_up, Y_up, p, ("kl", "sm"))
        assert up.factor_form == "cholesky"
        for name in ("Wx", "Wy", "Wxy"):
            np.testing.assert_allclose(getattr(up, name), getattr(refit, name), rtol=0, atol=1e-12, err_msg=name)
    moved = tgp.with_alpha(chol, 0.3)
    assert moved.factor_form == "cholesky" and moved.Wx is chol.Wx
    refit = tgp.fit(X, Y, dataclasses.replace(p, alpha=0.3), methods=("kl", "sm"))
    np.testing.assert_allclose(moved.Wxy, refit.Wxy, rtol=0, atol=1e-12)


def test_bad_factorisations_raise_as_the_inverse_form_does(data):
    X, _, Y, p = data
    Xd, Yd = np.vstack([X, X[:1]]), np.vstack([Y, Y[:1]])
    zero = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=0.0, lambda_y=1e-2, alpha=0.6, beta=1.5)
    with pytest.raises(ValueError, match="K_X is not positive definite .* need lambda_x > 0"):
        factorize_cholesky(Xd, Yd, zero)
    from fastsm.tgp import fitting

    with pytest.MonkeyPatch.context() as mp:  # a pivot below the floor: K^-1 would overflow
        mp.setattr(fitting, "MIN_PIVOT", 2.0)
        with pytest.raises(ValueError, match="K_X is numerically singular; .*need a larger lambda_x"):
            factorize_cholesky(X, Y, p)


@pytest.mark.parametrize("case", ["plain", "weighted", "constant column", "one point", "scaled", "collinear"])
def test_the_ridge_kernel_solves_numpys_ridge_problem(case):
    """:func:`fastsm._kernels.ridge.ridge_start` against :func:`fastsm.tgp.fitting.ridge` and
    ``output_spread`` (NumPy): the same minimal-norm least-squares solution, to rounding."""
    from fastsm._kernels.ridge import ridge_start, solve_ridge_start
    from fastsm.tgp.fitting import output_spread, ridge

    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((60, 5)), rng.standard_normal((60, 3))
    w = None
    if case == "weighted":
        w = rng.uniform(0.1, 5.0, 60)
    elif case == "constant column":
        X[:, 2] = 4.0
    elif case == "one point":
        X, Y = X[:1], Y[:1]
    elif case == "scaled":
        X = X * 1e14
    elif case == "collinear":  # two equal columns: full rank only through the penalty rows
        X[:, 3] = X[:, 1]
    coef, spread = solve_ridge_start(X, Y, np.ones(1) if w is None else w, w is not None)
    solved = ridge_start(X, Y, np.ones(1) if w is None else w, w is not None)[2]
    assert solved == (case not in ("one point",)), solved  # else the minimal-norm solution, in NumPy
    ref = ridge(X, Y, w)
    np.testing.assert_allclose(coef, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    if case != "one point":
        np.testing.assert_allclose(spread, output_spread(Y), rtol=1e-13)
    else:
        assert spread == 0.0  # factorize_cholesky then asks output_spread


def test_householder_least_squares_against_numpy():
    """:func:`fastsm._kernels.ridge.householder_lstsq` against NumPy's ``lstsq`` (an SVD), and its
    refusals: a zero column, columns dependent to rounding (``R``'s diagonal spans > 2^26)."""
    from fastsm._kernels.ridge import householder_lstsq

    rng = np.random.default_rng(5)
    for m, n, k in ((50, 6, 3), (13, 13, 1), (212, 13, 10), (9, 1, 2)):
        A, b = rng.standard_normal((m, n)), rng.standard_normal((m, k))
        A[:, 0] *= 1e3  # columns of different scales
        z, ok = householder_lstsq(A, b)
        assert ok
        ref = np.linalg.lstsq(A, b, rcond=None)[0]
        np.testing.assert_allclose(z, ref, rtol=1e-11, atol=1e-13 * np.abs(ref).max())
    A, b = rng.standard_normal((30, 4)), rng.standard_normal((30, 2))
    A[:, 2] = 0.0
    assert not householder_lstsq(A, b)[1]
    A[:, 2] = A[:, 1] * (1.0 + 1e-12)
    assert not householder_lstsq(A, b)[1]


# Importance-weighted TGP ([CS] §IV-B in the non-vacuous form of docs/math.md §6): the weights enter
# at the fit.

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


@pytest.mark.parametrize("weighted", [False, True])
def test_ridge_starts_are_ridge_start_of_each_points_members(weighted):
    """``_kernels/ridge.py::ridge_starts`` (the GPU engine's local starts, #76) gathers each point's members as
    ``knn_rows`` does and calls :func:`ridge_start`: bitwise its coefficients' starts and spreads; a point whose
    members' outputs have no spread, or whose inputs are one point (the QR refuses), is refused; given starts are
    passed through."""
    from fastsm._kernels.points import linear_rows
    from fastsm._kernels.ridge import ridge_starts

    rng = np.random.default_rng(11)
    X, Y, Xq = rng.standard_normal((80, 3)), rng.standard_normal((80, 2)), rng.standard_normal((6, 3))
    Y[:12] = 0.25  # the first 12 rows' outputs are one value
    w = rng.uniform(0.5, 2.0, 80) if weighted else np.ones(1)
    members = np.sort(rng.permuted(np.tile(np.arange(80), (6, 1)), axis=1)[:, :12], axis=1)
    members[0] = np.arange(12, 24)
    members[5] = np.arange(12)
    X[24:36] = X[24]  # identical inputs: the ridge is the outputs' mean, dgelsd's minimal-norm solution
    members[4] = np.arange(24, 36)
    given = rng.standard_normal((6, 2))
    for a in (X, Y, w, members, Xq, given):  # as fastsm.cuda.local.host_starts passes them: one compiled version
        a.setflags(write=False)
    starts, spread, refused = ridge_starts(X, Y, w, weighted, members, Xq, given[:0], False)
    for q in range(6):
        idx = members[q]
        coef, s, solved = ridge_start(X[idx], Y[idx], w[idx] if weighted else np.ones(1), weighted)
        assert spread[q] == s and solved == (q != 4)
        if q < 4:
            np.testing.assert_array_equal(starts[q], linear_rows(Xq[q:q + 1], coef)[0])
    np.testing.assert_array_equal(refused, [False] * 4 + [True] * 2)
    starts, _, _ = ridge_starts(X, Y, w, weighted, members, Xq, given, True)
    np.testing.assert_array_equal(starts, given)
