"""Hyperparameter selection (fastsm.tgp.select, fastsm.tgp.search) against brute-force cross-validation; the
scale-aware searches and TwinGPRegressorCV's defaults (issue #23)."""


import warnings

import numpy as np
import pytest

from fastsm import ExtrapolationWarning, config, datasets, shift, tgp

BASE = dict(gammas_x=0.5, gammas_y=2.0, lambdas_x=1e-2, lambdas_y=1e-2)


@pytest.fixture(scope="module")
def data():
    X, _, Y, _ = datasets.random_structured(3, n_train=40, n_test=1, dx=2, dy=2)
    return X, Y


def _params(alpha, beta=1.5):
    return tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-2, lambda_y=1e-2, alpha=alpha, beta=beta)


def test_loo_scores_equal_brute_force(data):
    X, Y = data
    sel = tgp.select(X, Y, alphas=[0.3, 0.8], betas=[1.5], cv="loo", **BASE)
    for row, a in enumerate([0.3, 0.8]):
        errs = []
        for i in range(len(X)):
            keep = np.arange(len(X)) != i
            m = tgp.fit(X[keep], Y[keep], _params(a))
            errs.append(np.abs(tgp.predict(m, X[i:i + 1]).y[0] - Y[i]).mean())
        np.testing.assert_allclose(sel.table["mean"][row], np.mean(errs), rtol=1e-6)
        np.testing.assert_allclose(sel.table["std"][row], np.std(errs), rtol=1e-5)
    assert sel.params.alpha == [0.3, 0.8][int(np.argmin(sel.table["mean"]))]
    np.testing.assert_array_equal(sel.model.X, X)
    assert sel.model.params == sel.params


def test_kfold_scores_equal_manual_folds(data):
    X, Y = data
    sel = tgp.select(X, Y, alphas=[0.5], betas=[0.99], cv=4, scoring="mse", random_state=7, **BASE)
    perm = np.random.default_rng(7).permutation(len(X))
    means = []
    for part in np.array_split(perm, 4):
        tr = np.setdiff1d(np.arange(len(X)), part)
        m = tgp.fit(X[tr], Y[tr], _params(0.5, 0.99))
        means.append(((tgp.predict(m, X[np.sort(part)]).y - Y[np.sort(part)]) ** 2).mean())
    np.testing.assert_allclose(sel.table["mean"][0], np.mean(means), rtol=1e-7)
    np.testing.assert_allclose(sel.table["std"][0], np.std(means), rtol=1e-6)
    assert sel.cv == 4 and sel.scoring == "mse"


def test_beta_changes_no_prediction(data):
    X, Y = data
    preds = [tgp.predict(tgp.fit(X, Y, _params(0.6, b)), X + 0.01) for b in (0.5, 0.99, 1.5)]
    for p in preds[1:]:
        np.testing.assert_array_equal(p.y, preds[0].y)
        np.testing.assert_array_equal(p.n_eval, preds[0].n_eval)
    sel = tgp.select(X, Y, alphas=[0.4, 0.6], betas=[0.5, 0.99, 1.5], **BASE)
    m = sel.table["mean"].reshape(2, 3)
    assert np.all(m == m[:, :1])
    assert sel.params.beta == 0.5  # ties go to the first beta


def test_with_alpha_equals_a_fit(data):
    X, Y = data
    m = tgp.fit(X, Y, _params(0.3))
    m2 = tgp.with_alpha(m, 0.7)
    ref = tgp.fit(X, Y, _params(0.7))
    np.testing.assert_allclose(m2.Kxy_inv, ref.Kxy_inv, rtol=0, atol=1e-10 * np.abs(ref.Kxy_inv).max())
    np.testing.assert_allclose(m2.logdet_xy, ref.logdet_xy, rtol=1e-12)
    assert m2.Wx is m.Wx and m2.G is m.G and m2.params.alpha == 0.7


def test_progress_callback_and_weights(data):
    X, Y = data
    calls = []
    w = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    sel = tgp.select(X, Y, alphas=[0.5], betas=[1.0], gammas_x=[0.5, 1.0], gammas_y=2.0, lambdas_x=1e-2,
                     lambdas_y=1e-2, cv=3, sample_weight=w, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(k, 12) for k in range(1, 13)]  # 2 kernels × 3 folds × (fit + 1 alpha)
    assert sel.model.sample_weight is not None and len(sel.table["mean"]) == 2
    assert "alpha" in sel.format_table(top=1)


def test_select_rejects_bad_input(data):
    X, Y = data
    with pytest.raises(ValueError, match="alphas must not be empty"):
        tgp.select(X, Y, alphas=[])
    with pytest.raises(ValueError, match="alphas must be < 1"):
        tgp.select(X, Y, alphas=[0.5, 1.0])
    with pytest.raises(ValueError, match="betas must be > 0"):
        tgp.select(X, Y, betas=[0.0])
    with pytest.raises(ValueError, match="cv must be >= 2"):
        tgp.select(X, Y, cv=1)
    with pytest.raises(ValueError, match="cv must be at most"):
        tgp.select(X, Y, cv=41)
    with pytest.raises(ValueError, match="cv must be one of"):
        tgp.select(X, Y, cv="kfold")
    with pytest.raises(ValueError, match="scoring"):
        tgp.select(X, Y, scoring="r2")
    with pytest.raises(ValueError, match="method"):
        tgp.select(X, Y, method="sm_cubic")
    with pytest.raises(TypeError, match="progress"):
        tgp.select(X, Y, progress="yes")
    with pytest.raises(ValueError, match="same number of rows"):
        tgp.select(X, Y[:-1])
    with pytest.raises(ValueError, match="one error per validation point"):
        tgp.select(X, Y, alphas=[0.5], betas=[1.0], scoring=lambda a, b: 0.0, **BASE)


def test_coordinate_search_scores_each_converged_kltgp_once(data, monkeypatch):
    """The alpha stage re-ran the converged KLTGP leave-one-out of the kernel the search chose (its score
    unused): one such pass per kernel setting now, the table bitwise the same as before."""
    import importlib

    sel_mod = importlib.import_module("fastsm.tgp.select")
    X, Y = data
    converged_kl = []
    real = sel_mod.loo_predict

    def counted(model, **kw):
        if kw["method"] == "kl" and kw["max_iter"] is None:
            converged_kl.append(model.params)
        return real(model, **kw)

    monkeypatch.setattr(sel_mod, "loo_predict", counted)
    grid = dict(gammas_x=(0.25, 0.5, 1.0), gammas_y=(1.0, 2.0), lambdas_x=(1e-3, 1e-2), lambdas_y=1e-2)
    sel = tgp.select(X, Y, method="auto", search="coordinate", alphas=(0.3, 0.7), betas=(1.0,), **grid)
    kl_rows = np.flatnonzero(sel.table["method"] == "kl")
    assert len(converged_kl) == kl_rows.size and kl_rows.size == len(set(converged_kl))
    # the alpha rows: SMTGP from the 5-iteration KLTGP start, as predict's init="kl"
    sm_rows = np.flatnonzero(sel.table["method"] == "sm")
    monkeypatch.setattr(sel_mod, "loo_predict", real)
    for row in sm_rows:
        p = tgp.TGPParams(**{k: float(sel.table[k][row]) for k in ("gamma_x", "gamma_y", "lambda_x", "lambda_y",
                                                                  "alpha", "beta")})
        pred = tgp.loo_predict(tgp.fit(X, Y, p), method="sm")
        assert sel.table["mean"][row] == float(np.abs(pred.y - Y).mean(axis=1).mean())


def test_the_loo_ridge_start_is_computed_once_per_training_set(data, monkeypatch):
    """The linear start's ridge depends on the data and weights only: one per kept set, not per kernel."""
    import importlib

    sel_mod = importlib.import_module("fastsm.tgp.select")  # the module (fastsm.tgp.select is the function)
    X, Y = data
    calls = []
    real = sel_mod.loo_ridge
    monkeypatch.setattr(sel_mod, "loo_ridge", lambda m: calls.append(m.n_train) or real(m))
    grid = dict(gammas_x=(0.25, 0.5, 1.0), gammas_y=(1.0, 2.0), lambdas_x=(1e-3, 1e-2), lambdas_y=1e-2)
    once = tgp.select(X, Y, method="kl", search="grid", **grid)
    assert calls == [len(X)]
    monkeypatch.setattr(sel_mod, "loo_ridge", real)
    # the scores are those of loo_predict's own start (init="linear"), computed per setting
    for row in (0, 5, 11):
        p = tgp.TGPParams(**{k: float(once.table[k][row]) for k in ("gamma_x", "gamma_y", "lambda_x", "lambda_y")})
        pred = tgp.loo_predict(tgp.fit(X, Y, p, methods=("kl",)), method="kl")
        assert once.table["mean"][row] == float(np.abs(pred.y - Y).mean(axis=1).mean())


def test_alpha_screen_scores_a_subsample_then_the_best_on_every_point(data, monkeypatch):
    """Above ALPHA_SCREEN_POINTS the alphas are scored on a subsample (the 'screen' rows: the means over those
    points of the full leave-one-out errors) and the best of them on every point (bitwise the unscreened row)."""
    from fastsm.tgp.select import _screen

    X, Y = data
    alphas = (0.2, 0.5, 0.8)
    grid = dict(gammas_x=(0.5, 1.0), gammas_y=2.0, lambdas_x=1e-2, lambdas_y=1e-2, alphas=alphas, betas=(0.99, 1.5),
                method="auto", search="descent", scoring="mse", random_state=3)
    plain = tgp.select(X, Y, **grid)
    assert not plain.table["screen"].any()
    monkeypatch.setattr(config, "ALPHA_SCREEN_POINTS", 15)
    sel = tgp.select(X, Y, **grid)
    t = sel.table
    idx = _screen(len(X), len(alphas), 3)
    assert idx.size == 15 and np.unique(idx).size == 15
    screened = np.flatnonzero(t["screen"])
    assert screened.size == len(alphas) * 2 and (t["method"][screened] == "sm").all()
    sm_plain = plain.table["method"] == "sm"
    kern = tuple(plain.table[c][sm_plain][0] for c in ("gamma_x", "gamma_y", "lambda_x", "lambda_y"))
    for a in alphas:
        p = tgp.TGPParams(gamma_x=kern[0], gamma_y=kern[1], lambda_x=kern[2], lambda_y=kern[3], alpha=a)
        m = tgp.fit(X, Y, p)
        err = ((tgp.loo_predict(m, method="sm").y - Y) ** 2).mean(axis=1)
        rows = screened[t["alpha"][screened] == a]
        np.testing.assert_allclose(t["mean"][rows], err[idx].mean(), rtol=1e-12)
    best_a = alphas[int(np.argmin([t["mean"][screened][t["alpha"][screened] == a][0] for a in alphas]))]
    final = np.flatnonzero((t["method"] == "sm") & ~t["screen"])
    assert (t["alpha"][final] == best_a).all() and final.size == 2
    same = np.flatnonzero(sm_plain & (plain.table["alpha"] == best_a))
    np.testing.assert_array_equal(t["mean"][final], plain.table["mean"][same])
    assert not t["screen"][sel.best_index]
    from fastsm.sklearn import TwinGPRegressorCV

    est = TwinGPRegressorCV(alphas=alphas, gammas_x=(0.5, 1.0), gammas_y=2.0, lambdas_x=1e-2, lambdas_y=1e-2).fit(X, Y)
    st = est.selection_.table
    assert st["screen"].any()
    res = est.cv_results_
    assert len(res["params"]) == int((~st["screen"]).sum())  # every row a candidate but the screen's
    sm_alpha = st["alpha"][(st["method"] == "sm") & ~st["screen"]]
    assert np.unique(sm_alpha).size == 1
    assert all(r["method"] == "kl" or r["alpha"] == sm_alpha[0] for r in res["params"])
    assert res["rank_test_score"][est.best_index_] == 1


def _shift_weights():
    d = datasets.covariate_shift_toy(seed=0)
    w = shift.estimate_weights(d.X_train, d.X_test, sigma=0.02).weights
    assert (w == 0).sum() >= 1  # measured: 8 of 500
    return d, w


@pytest.mark.parametrize("method", ["sm", "kl"])
def test_loo_select_with_zero_weights_scores_the_weighted_points(method):
    """Before: a raw broadcast error (500 vs 492 rows).

    Regression test of #19, item 4.
    """
    d, w = _shift_weights()
    keep = w > 0
    opts = dict(alphas=(0.5, 0.9), betas=(1.5,), method=method, cv="loo", max_iter=20)
    a = tgp.select(d.X_train, d.Y_train, sample_weight=w, **opts)
    b = tgp.select(d.X_train[keep], d.Y_train[keep], sample_weight=w[keep], **opts)
    for c in ("alpha", "mean", "std", "converged"):
        np.testing.assert_array_equal(a.table[c], b.table[c])
    assert a.params == b.params


def test_cv_estimator_fits_with_kliep_zero_weights():
    """Regression test of #19, item 4."""
    from fastsm.sklearn import TwinGPRegressorCV

    d, w = _shift_weights()
    reg = TwinGPRegressorCV(alphas=(0.5, 0.9), betas=(1.5,), max_iter=20).fit(d.X_train, d.Y_train.ravel(),
                                                                               sample_weight=w)
    assert reg.predict(d.X_test[:5]).shape == (5,)


def test_kfold_select_skips_validation_folds_of_zero_weight():
    """Before: ZeroDivisionError from numpy.average.

    Regression test of #19, item 13.
    """
    X, _, Y, _ = datasets.toy1(0, n_train=40, n_test=2)
    w = np.ones(40)
    w[:10] = 0.0
    splits = [(np.arange(10, 40), np.arange(10)), (np.arange(0, 30), np.arange(30, 40)),
              (np.r_[0:20, 30:40], np.arange(20, 30))]
    opts = dict(alphas=(0.5,), betas=(1.5,), max_iter=20)
    a = tgp.select(X, Y, sample_weight=w, cv=splits, **opts)
    b = tgp.select(X, Y, sample_weight=w, cv=splits[1:], **opts)
    np.testing.assert_array_equal(a.table["mean"], b.table["mean"])
    assert np.isfinite(tgp.select(X, Y, sample_weight=w, cv=4, random_state=0, **opts).table["mean"]).all()
    with pytest.raises(ValueError, match="zero on every validation fold"):
        tgp.select(X, Y, sample_weight=w, cv=splits[:1], **opts)
    with pytest.raises(ValueError, match="every training point of the fold"):
        tgp.select(X, Y, sample_weight=w, cv=[(np.arange(10), np.arange(10, 40))], **opts)


@pytest.fixture(scope="module")
def data3():
    """Three inputs, two outputs, 40 points: the scale-aware searches' data (issue #23)."""
    X, _, Y, _ = datasets.random_structured(3, n_train=40, n_test=1, dx=3, dy=2)
    return X, Y


def test_cv_estimator_does_not_depend_on_units():
    from fastsm.sklearn import TwinGPRegressorCV

    X, Xt, Y, _ = datasets.random_structured(6, n_train=80, n_test=20, dx=3, dy=2)
    a = TwinGPRegressorCV().fit(X, Y)
    b = TwinGPRegressorCV().fit(1000.0 * X + 5.0, 1000.0 * Y - 4.0)
    score = np.sort(a.cv_results_["mean_test_score"])[::-1]
    assert score[0] - score[1] > 1e-3 * abs(score[0])  # the choice is clear of rounding (measured 2e-6 relative)
    assert a.best_index_ == b.best_index_ and a.method_ == b.method_
    np.testing.assert_allclose(b.cv_results_["mean_test_score"], 1e6 * a.cv_results_["mean_test_score"], rtol=1e-4)
    np.testing.assert_allclose((b.predict(1000.0 * Xt + 5.0) + 4.0) / 1000.0, a.predict(Xt),
                               atol=2e-5 * np.sqrt(Y.var(0).sum()))


GRID = dict(gammas_x=("0.25*scale", "scale", "4*scale"), gammas_y=("0.5*scale", "scale", "2*scale"),
            lambdas_x=(1e-3, 1e-1), lambdas_y=(1e-3, 1e-1), alphas=(0.5,), betas=(1.5,), method="kl", scoring="mse")


def test_coordinate_search_is_a_coordinate_minimum_of_the_grid(data3):
    X, Y = data3
    grid = tgp.select(X, Y, search="grid", **GRID)
    coord = tgp.select(X, Y, search="coordinate", **GRID)
    cols = ("gamma_x", "gamma_y", "lambda_x", "lambda_y")
    key = {tuple(grid.table[c][i] for c in cols): grid.table["mean"][i] for i in range(len(grid.table["mean"]))}
    assert len(coord.table["mean"]) < len(grid.table["mean"])
    desc = tgp.select(X, Y, search="descent", **GRID)
    for sel in (coord, desc):  # each setting of either search scores bitwise as in the grid
        for i in range(len(sel.table["mean"])):
            assert sel.table["mean"][i] == key[tuple(sel.table[c][i] for c in cols)]
    assert desc.best_score >= grid.best_score
    best = tuple(coord.table[c][coord.best_index] for c in cols)
    axes = [np.unique(grid.table[c]) for c in cols]
    for d, axis in enumerate(axes):  # no single-axis move improves
        for v in axis:
            assert key[(*best[:d], v, *best[d + 1:])] >= coord.best_score
    assert coord.best_score >= grid.best_score


def test_auto_takes_the_better_of_kl_and_sm(data3):
    X, Y = data3
    sel = tgp.select(X, Y, **{**GRID, "method": "auto", "alphas": (0.2, 0.8)}, search="coordinate")
    kl, sm = sel.table["method"] == "kl", sel.table["method"] == "sm"
    assert kl.any() and sm.any() and np.isnan(sel.table["alpha"][kl]).all()
    assert sel.best_score == min(sel.table["mean"][kl].min(), sel.table["mean"][sm].min())
    assert sel.method == str(sel.table["method"][sel.best_index])
    # the grid's KLTGP rows come from SMTGP's start: bitwise the scores of a KLTGP search
    auto = tgp.select(X, Y, **{**GRID, "method": "auto", "alphas": (0.2, 0.8)}, search="grid")
    kl_only = tgp.select(X, Y, **GRID, search="grid")
    np.testing.assert_array_equal(auto.table["mean"][auto.table["method"] == "kl"], kl_only.table["mean"])


def test_cv_results_like_gridsearch(data3):
    from fastsm.sklearn import TwinGPRegressorCV

    X, Y = data3
    est = TwinGPRegressorCV().fit(X, Y)
    res = est.cv_results_
    n = len(res["params"])
    for k in ("mean_test_score", "std_test_score", "rank_test_score", "param_gamma_x", "param_method"):
        assert len(res[k]) == n
    assert res["rank_test_score"][est.best_index_] == 1
    assert est.best_score_ == res["mean_test_score"][est.best_index_] == res["mean_test_score"].max()
    assert est.best_params_["method"] == est.method_ == res["param_method"][est.best_index_]
    for c in ("gamma_x", "gamma_y", "lambda_x", "lambda_y"):
        assert est.best_params_[c] == res["params"][est.best_index_][c] == getattr(est, c + "_")
    np.testing.assert_array_equal(est.predict(X), tgp.predict(est.model_, X, method=est.method_).y)


def _count(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return sum(issubclass(w.category, ExtrapolationWarning) for w in caught)


def test_one_warning_per_search(data3):
    """Every validation input of a 1e6 width extrapolates: one warning for the whole search, not one per fit."""
    from fastsm.sklearn import TwinGPRegressorCV

    X, Y = data3
    kw = dict(gammas_x=(1e6, "scale"), lambdas_x=1e-3, lambdas_y=1e-3, alphas=(0.3, 0.6), betas=(1.5,))
    assert _count(lambda: tgp.select(X, Y, gammas_x=1e6, **{k: v for k, v in kw.items() if k != "gammas_x"})) == 1
    assert _count(lambda: tgp.select(X, Y, **kw, cv=3, search="grid")) == 0  # "scale" wins: nothing extrapolated
    assert _count(lambda: TwinGPRegressorCV(gammas_x=1e6).fit(X, Y)) == 1
    sel = tgp.select(X, Y, **kw, search="grid", method="auto")
    assert (sel.table["extrapolated"][sel.table["gamma_x"] == 1e6] == 1.0).all()


def test_descent_search_is_a_neighbour_minimum_with_fewer_scores():
    """search="descent" on a score with two minima along an axis: it stops at the one its start descends
    into (no one-step move improves), scoring fewer settings than the full sweeps; ties keep the lower
    neighbour."""
    from fastsm.tgp.search import coordinate_search, descent_search

    axes = [tuple(range(9)), tuple(range(5)), tuple(range(5))]

    def make(calls):
        def score(ix):
            calls.append(ix)
            a, b, c = ix
            bowl = min(0.5 + (a - 5) ** 2, float(a) ** 2)  # local minimum at a = 5, global at a = 0
            return bowl + (b - 1) ** 2 + 0.5 * (c - 3) ** 2 + 0.1 * (a - 5) * (b - 1)
        return score

    c_desc, c_coord = [], []
    seen: dict = {}

    def memo(calls):
        f = make(calls)

        def score(ix):
            if ix not in seen:
                seen[ix] = f(ix)
            return seen[ix]
        return score

    desc = descent_search(axes, [6, 2, 2], memo(c_desc))
    seen.clear()
    coord = coordinate_search(axes, [6, 2, 2], memo(c_coord))
    assert desc == (5, 1, 3) and coord[0] == 0
    f = make([])
    for d, axis in enumerate(axes):  # a minimum along each axis's neighbours
        for step in (-1, 1):
            j = desc[d] + step
            if 0 <= j < len(axis):
                assert f((*desc[:d], j, *desc[d + 1:])) >= f(desc)
    assert len(c_desc) < len(c_coord)
    # a tie between the two neighbours goes to the lower one
    assert descent_search([tuple(range(3))], [1], lambda ix: [0.0, 1.0, 0.0][ix[0]]) == (0,)


def test_auto_search_sweeps_small_sets_and_descends_above(data3, monkeypatch):
    X, Y = data3
    grid = {**GRID, "gammas_x": ("0.0625*scale", "0.125*scale", "0.25*scale", "0.5*scale", "scale", "2*scale")}
    for limit, same in ((len(X), "coordinate"), (len(X) - 1, "descent")):
        monkeypatch.setattr(config, "DESCENT_MIN_POINTS", limit)
        auto = tgp.select(X, Y, search="auto", **grid)
        ref = tgp.select(X, Y, search=same, **grid)
        np.testing.assert_array_equal(auto.table["mean"], ref.table["mean"])
