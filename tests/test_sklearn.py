"""scikit-learn estimators: the estimator checks, Pipeline, GridSearchCV, pickling, KLIEPWeights."""

import dataclasses
import pickle

import numpy as np
import pytest

pytest.importorskip("sklearn", minversion="1.6")


import pytest
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from fastsm import datasets, shift, tgp  # noqa: E402
from fastsm.sklearn import KLIEPWeights, TwinGPRegressor, TwinGPRegressorCV  # noqa: E402
from fastsm.tgp.regimes import REGIMES  # noqa: E402

# small grids keep the CV estimator's checks fast
CV_SMALL = dict(alphas=(0.3, 0.7), betas=(1.5,), gammas_x=0.5, gammas_y=1.0, lambdas_x=1e-2, lambdas_y=1e-2, cv=3)
FIXED = dict(method="sm", gamma_x=0.5, gamma_y=1.0, lambda_x=1e-2, lambda_y=1e-2)
EXPECTED_FAILURES = {
    "check_non_transformer_estimators_n_iter": "max_iter bounds the per-point optimiser of predict; fit is a "
                                               "closed-form factorisation with no iterations to report",
}
# The sample-weight check asks SMTGP's predictions of the weighted and the repeated-row fit (one model up to
# rounding) to agree to 1e-9; SMTGP's prediction is determined only to the flat bottom of its objective.
# Measured (test_weights_equal_repeats_to_rounding): the check passes on the SkylakeX and SandyBridge kernels
# and misses by 6e-10 on Nehalem and Haswell, with the defaults and with FIXED.  A KLTGP choice (the CV
# estimator's) passes everywhere.
SMTGP_FAILURES = EXPECTED_FAILURES | {
    "check_sample_weight_equivalence_on_dense_data": "SMTGP's predictions of the weighted and the repeated-row "
                                                     "fit differ by up to 1.6e-9 on some BLAS kernels (rounding "
                                                     "in a flat objective); the check's atol is 1e-9",
}


def _expected(est):
    return SMTGP_FAILURES if isinstance(est, TwinGPRegressor) and est.method == "sm" else EXPECTED_FAILURES


@parametrize_with_checks([TwinGPRegressor(**FIXED), TwinGPRegressorCV(**CV_SMALL)], expected_failed_checks=_expected)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@parametrize_with_checks([TwinGPRegressor(), TwinGPRegressorCV()], expected_failed_checks=_expected)
def test_sklearn_compatible_with_defaults(estimator, check):
    check(estimator)


def _repeated_and_weighted(kw: dict):
    """The data of ``check_sample_weight_equivalence_on_dense_data`` (15 points in 30-D, outputs in {0, 1, 2},
    integer weights), fitted once on repeated rows and once with the weights (rows shuffled)."""
    from sklearn.utils import shuffle

    rng = np.random.RandomState(42)
    n = 15
    X = rng.rand(n, 2 * n)
    y = rng.randint(0, 3, size=n)
    sw = rng.randint(0, 5, size=n)
    rep = TwinGPRegressor(**kw).fit(X.repeat(sw, axis=0), y.repeat(sw))
    Xw, yw, sww = shuffle(X, y, sw, random_state=0)
    wei = TwinGPRegressor(**kw).fit(Xw, yw, sample_weight=sww)
    return X, y, rep, wei


@pytest.mark.parametrize("kw", [{}, FIXED], ids=["defaults", "fixed"])
def test_weights_equal_repeats_to_rounding(kw):
    """scikit-learn's sample-weight check, asserting what float64 determines.

    The check's data: 15 points in 30-D, outputs in {0, 1, 2}, integer weights.  Weights are noise
    lambda / w (MATH 6) and the "scale" median weighs pairs by w_i w_j, so both fits are one model up
    to rounding; SMTGP's optimiser then stops within the flat bottom of the objective.  Measured
    (largest difference, Nehalem / SandyBridge / Haswell / SkylakeX): defaults 5.1e-10 / 2.7e-8 /
    4.9e-10 / 8.4e-10; FIXED 1.6e-9 / 1.0e-10 / 1.6e-9 / 8.7e-12.
    """
    X, _, rep, wei = _repeated_and_weighted(kw)
    assert rep.model_.params == wei.model_.params  # the widths are equal exactly
    np.testing.assert_allclose(wei.predict(X), rep.predict(X), rtol=0, atol=1e-6)


# Toy 1's widths, the defaults before "scale" (issue #23): the sample-weight check meets an undetermined case.
TOY1 = {k: getattr(tgp.TOY1_PARAMS, k) for k in ("gamma_x", "gamma_y", "lambda_x", "lambda_y")}


def test_toy1_weights_equal_repeats_up_to_tied_mirror_modes():
    """scikit-learn's sample-weight check, with Toy 1's widths, asserting what float64 determines.

    The data of ``check_sample_weight_equivalence_on_dense_data``: 15 points in 30-D, outputs in
    {0, 1, 2}, integer weights.  Weights are noise lambda / w (MATH 6), so the weighted and the
    repeated fit are the same model; their objectives agree to ~4e-7 relative (measured), the
    rounding of an output kernel with three distinct values and lambda = 1e-4.  At a test input
    equal to a training input the SM objective has a local maximum at that point's output t and
    two mirror-image minima t -+ 0.0047 whose values differ by less than that rounding (the
    asymmetry was measured at 7e-8 relative); which one BFGS reaches is then undetermined.
    """
    X, y, rep, wei = _repeated_and_weighted(TOY1)
    n = len(X)
    pr, pw = rep.predict(X), wei.predict(X)
    grid = np.linspace(-0.5, 2.5, 151)[:, None]
    for i in range(n):
        xi = np.repeat(X[i:i + 1], grid.shape[0], axis=0)
        fr, fw = tgp.objective(rep.model_, xi, grid), tgp.objective(wei.model_, xi, grid)
        np.testing.assert_allclose(fw, fr, rtol=1e-5)  # measured 4e-7: the two fits are one model
        if abs(pr[i] - pw[i]) <= 1e-5:  # measured <= 4e-7 on the four kernel families
            continue
        t = float(y[i])
        assert abs(pr[i] + pw[i] - 2.0 * t) <= 1e-6, (i, pr[i], pw[i])  # mirror images around t
        both = np.array([[pr[i]], [pw[i]]])
        for model in (rep.model_, wei.model_):
            v = tgp.objective(model, np.repeat(X[i:i + 1], 2, axis=0), both)
            assert abs(v[0] - v[1]) <= 1e-6 * abs(v[0])  # a tie (measured 3e-9)
            assert tgp.objective(model, X[i:i + 1], [[t]])[0] > 2.0 * v[0]  # a hump at t between them


@pytest.fixture(scope="module")
def toy():
    X, Xt, Y, Yt = datasets.toy1(0, n_train=150, n_test=40)
    return X, Xt, Y, Yt


def test_estimator_equals_the_functional_api(toy):
    X, Xt, Y, _ = toy
    reg = TwinGPRegressor(method="sm", alpha=0.6, **REGIMES["sharp"]).fit(X, Y.ravel())
    # the estimator's default output kernel, the sharp regime's input kernel
    params = tgp.TGPParams(gamma_x="0.5*scale", gamma_y="0.5*scale", lambda_x=1e-3, lambda_y=1.0, alpha=0.6)
    p = tgp.predict(tgp.fit(X, Y, params), Xt, method="sm")
    assert reg.model_.params == tgp.fit(X, Y, params).params  # "scale" resolved alike
    y, lc = reg.predict(Xt, return_certainty=True)
    assert y.shape == (40,)
    np.testing.assert_array_equal(y, p.y[:, 0])
    np.testing.assert_array_equal(lc, p.log_certainty)
    assert reg.predict(Xt[:3]).ndim == 1 and TwinGPRegressor().fit(X, Y).predict(Xt[:3]).shape == (3, 1)
    default = TwinGPRegressor().fit(X, Y)  # the input kernel of its regime ("auto"), the rest as above
    chosen = dataclasses.replace(params, **REGIMES[default.regime_])
    np.testing.assert_array_equal(default.predict(Xt), tgp.predict(tgp.fit(X, Y, chosen), Xt, method="kl").y)


def test_pipeline_gridsearch_and_pickle(toy):
    X, Xt, Y, Yt = toy
    pipe = make_pipeline(StandardScaler(), TwinGPRegressor(method="sm", gamma_x=1.0, gamma_y=20.0))
    gs = GridSearchCV(pipe, {"twingpregressor__alpha": [0.3, 0.9], "twingpregressor__beta": [0.5, 1.5]}, cv=3,
                      n_jobs=2).fit(X, Y.ravel())
    assert len(gs.cv_results_["mean_test_score"]) == 4
    # beta changes nothing: scores of the two betas are equal for each alpha
    s = gs.cv_results_["mean_test_score"].reshape(2, 2)
    np.testing.assert_array_equal(s[:, 0], s[:, 1])
    best = gs.best_estimator_
    again = pickle.loads(pickle.dumps(best))
    np.testing.assert_array_equal(again.predict(Xt), best.predict(Xt))


def test_cv_estimator_selects_like_select(toy):
    X, Xt, Y, _ = toy
    cv = TwinGPRegressorCV(alphas=(0.2, 0.5, 0.9), betas=(1.5,), method="sm", scoring="mae", gammas_x=0.2,
                           gammas_y=20.0, lambdas_x=1e-4, lambdas_y=1e-4).fit(X, Y)
    sel = tgp.select(X, Y, alphas=(0.2, 0.5, 0.9), betas=(1.5,), gammas_x=0.2, gammas_y=20.0, lambdas_x=1e-4,
                     lambdas_y=1e-4)
    assert cv.alpha_ == sel.params.alpha and cv.best_score_ == -sel.best_score
    np.testing.assert_array_equal(cv.predict(Xt), tgp.predict(sel.model, Xt).y)


def test_partial_fit_equals_fit(toy):
    X, Xt, Y, _ = toy
    # widths as numbers: "scale" is resolved by the first fit and kept by partial_fit
    kw = dict(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-2, lambda_y=1e-2)
    a = TwinGPRegressor(**kw).partial_fit(X[:100], Y[:100, 0]).partial_fit(X[100:], Y[100:, 0])
    b = TwinGPRegressor(**kw).fit(X, Y[:, 0])
    # the models agree to rounding; the objective fixes a prediction to ~1e-8 near its minimum
    # (measured 1.0e-8 in one clean-clone run): compare to 1e-6
    np.testing.assert_allclose(a.predict(Xt), b.predict(Xt), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="features"):
        a.partial_fit(np.hstack([X, X]), Y[:, 0])


def test_kliep_weights_feed_sample_weight():
    d = datasets.covariate_shift_toy(n_train=120, n_test=60, seed=3)
    kw = KLIEPWeights(sigma=0.3)
    w = kw.fit_weights(d.X_train, d.X_test)
    ref = shift.estimate_weights(d.X_train, d.X_test, sigma=0.3)
    np.testing.assert_array_equal(w, ref.weights)
    np.testing.assert_allclose(kw.weights(d.X_train), w, rtol=1e-10)
    reg = TwinGPRegressor(gamma_x=0.5, gamma_y=0.05, lambda_x=0.1, lambda_y=0.1, alpha=0.5)
    reg.fit(d.X_train, d.Y_train, sample_weight=w)
    assert reg.model_.sample_weight is not None


def test_estimators_reject_bad_parameters(toy):
    X, _, Y, _ = toy
    with pytest.raises(ValueError, match="method"):
        TwinGPRegressor(method="gp").fit(X, Y)
    with pytest.raises(ValueError, match="alpha"):
        TwinGPRegressor(alpha=1.5).fit(X, Y)
    with pytest.raises(ValueError, match="n_jobs"):
        TwinGPRegressor(n_jobs=0).fit(X, Y)
    with pytest.raises(ValueError, match="alphas"):
        TwinGPRegressorCV(alphas=()).fit(X, Y)
    with pytest.raises(ValueError, match="search"):
        TwinGPRegressorCV(search="random").fit(X, Y)
    with pytest.raises(ValueError, match="gamma_x"):
        TwinGPRegressor(gamma_x="wide").fit(X, Y)
    with pytest.raises(ValueError, match="lambda_x"):
        TwinGPRegressor(lambda_x="big").fit(X, Y)
    with pytest.raises(ValueError, match="gammas_y"):
        TwinGPRegressorCV(gammas_y=("scale", "wide")).fit(X, Y)


@pytest.mark.parametrize("method", ["sm", "auto", "kl"])
def test_cv_results_follow_gridsearchcv_conventions(method):
    """Before (method="sm"): rank_test_score[best_index_] was 6 and a KLTGP search row with alpha NaN had the best
    mean_test_score; (method="auto"): best_params_ != cv_results_["params"][best_index_] (NaN alpha).

    Regression test of #30, item 4.
    """
    from fastsm.sklearn import TwinGPRegressorCV

    X, _, Y, _ = datasets.random_structured(1, n_train=60, n_test=5, dx=3, dy=2)
    est = TwinGPRegressorCV(method=method, alphas=(0.3, 0.7), cv=3).fit(X, Y)
    res, i = est.cv_results_, est.best_index_
    assert res["rank_test_score"][i] == 1
    assert res["params"][i] == est.best_params_
    assert est.best_score_ == res["mean_test_score"][i] == np.nanmax(res["mean_test_score"])
    for params in res["params"]:
        assert not any(isinstance(v, float) and np.isnan(v) for v in params.values())
        assert params["method"] in (("kl", "sm") if method == "auto" else (method,))
    n = len(res["params"])
    assert all(len(v) == n for v in res.values())
