"""TwinGPRegressor()'s "auto" input kernel: the exact leave-one-out choice between two regimes."""

import numpy as np
import pytest

pytest.importorskip("sklearn", minversion="1.6")

from fastsm import tgp  # noqa: E402
from fastsm.sklearn import TwinGPRegressor  # noqa: E402
from fastsm.tgp.regimes import REGIMES, choose_regime, distinct_rows, regime_params  # noqa: E402

AUTO = {"gamma_x": "auto", "gamma_y": "0.5*scale", "lambda_x": "auto", "lambda_y": 1.0, "alpha": 0.9, "beta": 1.5}


def _linnerud():
    """Linnerud z-scored: 20 men, three exercise counts -> three body measurements (little signal)."""
    from sklearn.datasets import load_linnerud

    d = load_linnerud()
    X, Y = d.data.astype(float), d.target.astype(float)
    return (X - X.mean(0)) / X.std(0), (Y - Y.mean(0)) / Y.std(0)


def _digits(n=200):
    """The right half of 8x8 digits from their left half (pixels / 16)."""
    from sklearn.datasets import load_digits

    im = load_digits().images[:n] / 16.0
    return im[:, :, :4].reshape(n, -1), im[:, :, 4:].reshape(n, -1)


def _refit_loo_mse(X, Y, params, w=None):
    """Brute force: each distinct pair left out with its copies, the rest refitted at the full fit's numbers."""
    numbers = tgp.fit(X, Y, params, methods=("kl",), sample_weight=w).params
    key = [tuple(r) for r in np.hstack([X, Y])]
    err, wt = [], []
    for i in range(len(X)):
        if key[i] in key[:i]:
            continue  # a copy: scored with its first occurrence
        out = np.array([k != key[i] for k in key])
        m = tgp.fit(X[out], Y[out], numbers, methods=("kl",), sample_weight=None if w is None else w[out])
        p = tgp.predict(m, X[i:i + 1], method="kl").y
        err.append(((p - Y[i]) ** 2).mean())
        wt.append((~out).sum() if w is None else w[~out].sum())
    return float(np.average(err, weights=wt))


def test_scores_equal_brute_force_refits_and_copies_leave_together():
    X, Y = _linnerud()
    X, Y = np.vstack([X, X[:3]]), np.vstack([Y, Y[:3]])  # three pairs twice
    choice = choose_regime(X, Y, AUTO, max_iter=200, tol=1e-10)
    for name, params in regime_params(AUTO).items():
        ref = _refit_loo_mse(X, Y, params)
        # measured: 3.7e-10 (sharp) and 3.4e-9 (smooth) relative, the optimiser's tolerance
        np.testing.assert_allclose(choice.scores[name], ref, rtol=1e-6)


def test_weak_signal_takes_smooth_and_signal_takes_sharp():
    X, Y = _linnerud()
    r = TwinGPRegressor().fit(X, Y)
    assert r.regime_ == "smooth"
    assert r.regime_scores_["sharp"] > 1.2 * r.regime_scores_["smooth"]  # measured 1.34
    assert r.model_.params == tgp.TGPParams(**{**AUTO, **REGIMES["smooth"]}).resolve(X, Y)
    X, Y = _digits()
    r = TwinGPRegressor().fit(X, Y)
    assert r.regime_ == "sharp"
    assert r.regime_scores_["smooth"] > 1.2 * r.regime_scores_["sharp"]  # measured 1.40


def test_the_chosen_regime_predicts_as_its_fixed_setting():
    X, Y = _linnerud()
    for method in ("kl", "sm", "ikl"):
        auto = TwinGPRegressor(method=method).fit(X, Y)
        fixed = TwinGPRegressor(method=method, **REGIMES[auto.regime_]).fit(X, Y)
        assert fixed.regime_ is None and fixed.regime_scores_ == {}
        assert auto.model_.params == fixed.model_.params and auto.model_.methods == fixed.model_.methods
        np.testing.assert_array_equal(auto.predict(X[:5]), fixed.predict(X[:5]))


def test_one_auto_parameter_keeps_the_other():
    X, Y = _linnerud()
    r = TwinGPRegressor(gamma_x=0.05, lambda_x="auto").fit(X, Y)
    assert r.model_.params.gamma_x == 0.05
    assert r.model_.params.lambda_x == REGIMES[r.regime_]["lambda_x"]
    r = TwinGPRegressor(gamma_x="auto", lambda_x=0.02).fit(X, Y)
    assert r.model_.params.lambda_x == 0.02
    assert set(r.regime_scores_) == set(REGIMES)


def test_repeated_rows_choose_as_integer_weights():
    rng = np.random.default_rng(3)
    X, Y = _linnerud()
    counts = rng.integers(0, 4, size=len(X))
    rep = TwinGPRegressor().fit(X.repeat(counts, axis=0), Y.repeat(counts, axis=0))
    wei = TwinGPRegressor().fit(X, Y, sample_weight=counts)
    assert rep.regime_ == wei.regime_
    for name in REGIMES:  # the same leave-one-out, rows in another order: measured 1e-15 relative
        np.testing.assert_allclose(rep.regime_scores_[name], wei.regime_scores_[name], rtol=1e-9)


def test_distinct_rows_sums_the_copies_in_first_occurrence_order():
    X = np.array([[1.0], [0.0], [1.0], [2.0], [1.0]])
    Y = np.array([[5.0], [6.0], [5.0], [7.0], [9.0]])  # rows 0 and 2 are copies; row 4 has another y
    Xd, Yd, w, collapsed = distinct_rows(X, Y, None)
    assert collapsed
    np.testing.assert_array_equal(Xd[:, 0], [1.0, 0.0, 2.0, 1.0])
    np.testing.assert_array_equal(Yd[:, 0], [5.0, 6.0, 7.0, 9.0])
    np.testing.assert_array_equal(w, [2.0, 1.0, 1.0, 1.0])
    _, _, w, _ = distinct_rows(X, Y, np.array([0.5, 1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(w, [2.5, 1.0, 3.0, 4.0])
    assert distinct_rows(X[:2], Y[:2], None)[3] is False


def test_fewer_than_two_points_take_the_first_regime():
    X, Y = _linnerud()
    r = TwinGPRegressor().fit(X[:1], Y[:1])
    assert r.regime_ == "sharp" and all(np.isnan(v) for v in r.regime_scores_.values())
    r = TwinGPRegressor().fit(X[:3], Y[:3], sample_weight=[1.0, 0.0, 0.0])
    assert r.regime_ == "sharp"


def test_bad_values_name_the_parameter():
    X, Y = _linnerud()
    with pytest.raises(ValueError, match="gamma_x.*'auto'"):
        TwinGPRegressor(gamma_x="Auto").fit(X, Y)
    with pytest.raises(ValueError, match="lambda_x.*'auto'"):
        TwinGPRegressor(lambda_x="scale").fit(X, Y)
    with pytest.raises(ValueError, match="gamma_x"):
        TwinGPRegressor(gamma_x=-1.0, lambda_x="auto").fit(X, Y)
