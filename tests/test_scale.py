"""Scale-aware widths ("scale"), the coordinate search and TwinGPRegressorCV's defaults (issue #23)."""

import warnings

import numpy as np
import pytest

from fastsm import ExtrapolationWarning, datasets, tgp
from fastsm.tgp.params import SCALE_MAX_ROWS, SCALE_X, SCALE_Y, TGPParams, median_sq_distance, scale_factor


def _lower_median_reference(Z, w=None):
    """Every pair i < j at a positive distance, written out w_i * w_j times; the lower median."""
    d = []
    for i in range(len(Z)):
        for j in range(i + 1, len(Z)):
            dd = float(np.sum((Z[i] - Z[j]) ** 2))
            if dd > 0.0:
                d += [dd] * (1 if w is None else int(w[i] * w[j]))
    d.sort()
    return d[(len(d) - 1) // 2]


@pytest.fixture
def data():
    X, _, Y, _ = datasets.random_structured(3, n_train=40, n_test=1, dx=3, dy=2)
    return X, Y


def test_median_matches_brute_force_with_duplicates_and_weights(data):
    X, _ = data
    Xd = np.vstack([X, X[:7]])  # duplicate rows: their zero distances are left out
    np.testing.assert_allclose(median_sq_distance(Xd), _lower_median_reference(Xd), rtol=1e-14)
    w = np.random.default_rng(0).integers(0, 4, len(X))
    np.testing.assert_allclose(median_sq_distance(X, w), _lower_median_reference(X, w), rtol=1e-14)
    # integer weights are repeated rows, exactly (scikit-learn's sample-weight equivalence)
    assert median_sq_distance(X, w.astype(float)) == median_sq_distance(X.repeat(w, axis=0))


def test_median_ignores_order_and_offset_and_scales_with_the_square(data):
    X, _ = data
    m = median_sq_distance(X)
    assert median_sq_distance(X[::-1]) == m
    np.testing.assert_allclose(median_sq_distance(1000.0 * X + 7.0), 1e6 * m, rtol=1e-9)
    big = np.random.default_rng(1).normal(size=(SCALE_MAX_ROWS + 333, 3))
    perm = np.random.default_rng(2).permutation(len(big))
    assert median_sq_distance(big[perm]) == median_sq_distance(big)  # thinned, still order-free
    np.testing.assert_allclose(median_sq_distance(big), 2 * 2.366, rtol=0.05)  # 2 x the median of chi2(3)
    assert median_sq_distance(np.ones((5, 2))) == 1.0
    assert median_sq_distance(np.full((5, 2), -3.0)) == 9.0  # all rows equal: max |z|^2, relative (#30)
    assert median_sq_distance(np.zeros((5, 2))) == 1.0


@pytest.mark.parametrize("text, factor", [("scale", 1.0), ("0.5*scale", 0.5), (" 2 * scale ", 2.0),
                                          ("1e-2*scale", 0.01)])
def test_scale_strings(text, factor):
    assert scale_factor("gamma_x", text) == factor


@pytest.mark.parametrize("bad", ["Scale", "scale*2", "-1*scale", "0*scale", "auto", ""])
def test_bad_scale_strings_name_the_argument(bad):
    with pytest.raises(ValueError, match="gamma_y"):
        TGPParams(gamma_y=bad)
    with pytest.raises(TypeError, match="gamma_x"):
        TGPParams(gamma_x=None)


def test_fit_resolves_scale(data):
    X, Y = data
    m = tgp.fit(X, Y)
    assert m.params.resolved and not TGPParams().resolved
    assert m.params.gamma_x == SCALE_X / median_sq_distance(X)
    assert m.params.gamma_y == SCALE_Y / median_sq_distance(Y)
    half = tgp.fit(X, Y, TGPParams(gamma_x="0.5*scale", gamma_y=3.0))
    assert half.params.gamma_x == 0.5 * SCALE_X / median_sq_distance(X) and half.params.gamma_y == 3.0
    assert tgp.TGPModel(X, Y).params == m.params


def _rescaled(X, Y, ax, bx, ay, by):
    return ax * X + bx, ay * Y + by


@pytest.mark.parametrize("method", ["sm", "kl"])
def test_default_predictions_do_not_depend_on_units(method):
    """x1000 and an offset on X and on Y: the defaults' predictions follow the output's change of units."""
    from fastsm.sklearn import TwinGPRegressor

    X, Xt, Y, _ = datasets.random_structured(5, n_train=120, n_test=40, dx=4, dy=3)
    base = TwinGPRegressor(method=method).fit(X, Y).predict(Xt)
    spread = np.sqrt(Y.var(0).sum())
    for ax, bx, ay, by in [(1000.0, 7.0, 1.0, 0.0), (1.0, 0.0, 1000.0, -3.0), (1000.0, -50.0, 1e-3, 2.0)]:
        Xs, Ys = _rescaled(X, Y, ax, bx, ay, by)
        pred = TwinGPRegressor(method=method).fit(Xs, Ys).predict(ax * Xt + bx)
        # back in the original units.  Rounding moves a prediction within the flat bottom of its objective:
        # measured <= 1.5e-6 of the spread for SMTGP, 8e-8 for KLTGP (seeds 5-7, tol = 1e-8)
        np.testing.assert_allclose((pred - by) / ay, base, rtol=0, atol=(2e-5 if method == "sm" else 1e-6) * spread)


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


def test_coordinate_search_is_a_coordinate_minimum_of_the_grid(data):
    X, Y = data
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


def test_auto_takes_the_better_of_kl_and_sm(data):
    X, Y = data
    sel = tgp.select(X, Y, **{**GRID, "method": "auto", "alphas": (0.2, 0.8)}, search="coordinate")
    kl, sm = sel.table["method"] == "kl", sel.table["method"] == "sm"
    assert kl.any() and sm.any() and np.isnan(sel.table["alpha"][kl]).all()
    assert sel.best_score == min(sel.table["mean"][kl].min(), sel.table["mean"][sm].min())
    assert sel.method == str(sel.table["method"][sel.best_index])
    # the grid's KLTGP rows come from SMTGP's start: bitwise the scores of a KLTGP search
    auto = tgp.select(X, Y, **{**GRID, "method": "auto", "alphas": (0.2, 0.8)}, search="grid")
    kl_only = tgp.select(X, Y, **GRID, search="grid")
    np.testing.assert_array_equal(auto.table["mean"][auto.table["method"] == "kl"], kl_only.table["mean"])


def test_cv_results_like_gridsearch(data):
    from fastsm.sklearn import TwinGPRegressorCV

    X, Y = data
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


def test_one_warning_per_search(data):
    """Every validation input of a 1e6 width extrapolates: one warning for the whole search, not one per fit."""
    from fastsm.sklearn import TwinGPRegressorCV

    X, Y = data
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


def test_auto_search_sweeps_small_sets_and_descends_above(data, monkeypatch):
    from fastsm import config

    X, Y = data
    grid = {**GRID, "gammas_x": ("0.0625*scale", "0.125*scale", "0.25*scale", "0.5*scale", "scale", "2*scale")}
    for limit, same in ((len(X), "coordinate"), (len(X) - 1, "descent")):
        monkeypatch.setattr(config, "DESCENT_MIN_POINTS", limit)
        auto = tgp.select(X, Y, search="auto", **grid)
        ref = tgp.select(X, Y, search=same, **grid)
        np.testing.assert_array_equal(auto.table["mean"], ref.table["mean"])
