"""Scale-aware widths ("scale", fastsm.tgp.params): the median squared distance, the width strings, and
predictions that follow a change of units (issue #23)."""

import numpy as np
import pytest

from fastsm import datasets, tgp
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
