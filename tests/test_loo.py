"""Exact leave-one-out by downdates (fastsm.tgp.loo_predict) against brute-force refits."""


import numpy as np
import pytest

from fastsm import datasets, tgp
from tests.conftest import MANIFOLD_PARAMS

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)


def _data(n, dx=2, dy=3, seed=0):
    X, _, Y, _ = datasets.random_structured(seed, n_train=n, n_test=1, dx=dx, dy=dy)[:4]
    return X, Y


def _brute_force(X, Y, params, method, idx, sample_weight=None, init=None):
    """Refit without each point of ``idx`` and predict it."""
    ys, objs, lcs = [], [], []
    for i in idx:
        keep = np.arange(len(X)) != i
        w = None if sample_weight is None else sample_weight[keep]
        m = tgp.fit(X[keep], Y[keep], params, methods=(method,), sample_weight=w)
        start = None if init is None else init[i:i + 1]
        p = tgp.predict(m, X[i:i + 1], method=method, init=start)
        ys.append(p.y[0])
        objs.append(p.objective[0])
        lcs.append(p.log_certainty[0])
    return np.array(ys), np.array(objs), np.array(lcs)


@pytest.fixture(scope="module")
def data():
    return _data(80)


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_loo_equals_refit_and_predict(data, method):
    X, Y = data
    model = tgp.fit(X, Y, PARAMS)
    loo = tgp.loo_predict(model, method=method)
    idx = np.arange(0, len(X), 7)
    y_bf, f_bf, lc_bf = _brute_force(X, Y, PARAMS, method, idx)
    # factors projected vs refactorised: measured |dy| <= 1.6e-13 (1e-6 was needed with downdated inverses)
    np.testing.assert_allclose(loo.y[idx], y_bf, rtol=0, atol=1e-10)
    # the downdated objective at the brute-force outputs equals the refit model's objective there
    for i in idx:
        keep = np.arange(len(X)) != i
        m = tgp.fit(X[keep], Y[keep], PARAMS, methods=(method,))
        f_ref = tgp.objective(m, X[i:i + 1], loo.y[i:i + 1], method=method)[0]
        np.testing.assert_allclose(loo.objective[i], f_ref, rtol=1e-8, atol=1e-10)
        lc_ref = tgp.certainty(m, X[i:i + 1], loo.y[i:i + 1])[0]
        np.testing.assert_allclose(loo.log_certainty[i], lc_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(f_bf, loo.objective[idx], rtol=1e-10, atol=1e-12)
    assert loo.converged.mean() > 0.9


def test_loo_at_equal_outputs_equals_the_refit_objective_everywhere():
    """Downdate arithmetic alone (no optimiser): every point, N = 60, same fixed outputs."""
    X, Y = _data(60, seed=4)
    model = tgp.fit(X, Y, PARAMS)
    Yfix = Y + 0.05
    for method in ("kl", "ikl", "sm"):
        loo = tgp.loo_predict(model, method=method, init=Yfix, max_iter=0)
        np.testing.assert_array_equal(loo.y, Yfix)
        for i in range(len(X)):
            keep = np.arange(len(X)) != i
            m = tgp.fit(X[keep], Y[keep], PARAMS, methods=(method,))
            f_ref = tgp.objective(m, X[i:i + 1], Yfix[i:i + 1], method=method)[0]
            np.testing.assert_allclose(loo.objective[i], f_ref, rtol=1e-8, atol=1e-10, err_msg=f"{method} {i}")


def test_loo_start_and_spread_are_those_of_the_n_minus_1_models(data):
    from fastsm.tgp.loo import loo_ridge, loo_spread

    X, Y = data
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(X))
    model = tgp.fit(X, Y, PARAMS, sample_weight=w)
    starts, spreads = loo_ridge(model), loo_spread(Y)
    for i in range(0, len(X), 9):
        keep = np.arange(len(X)) != i
        m = tgp.fit(X[keep], Y[keep], PARAMS, sample_weight=w[keep])
        np.testing.assert_allclose(starts[i], np.append(X[i], 1.0) @ m.ridge_coef, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(spreads[i], m.y_spread, rtol=1e-12)


def test_weighted_loo_equals_refit():
    X, Y = _data(70, seed=2)
    w = np.random.default_rng(5).uniform(0.2, 3.0, len(X))
    model = tgp.fit(X, Y, PARAMS, sample_weight=w)
    loo = tgp.loo_predict(model, method="sm")
    idx = np.arange(3, len(X), 11)
    y_bf, _, _ = _brute_force(X, Y, PARAMS, "sm", idx, sample_weight=w)
    np.testing.assert_allclose(loo.y[idx], y_bf, rtol=0, atol=1e-10)


@pytest.mark.determinism
def test_loo_does_not_depend_on_batch_size_or_threads(data):
    X, Y = data
    model = tgp.fit(X, Y, PARAMS)
    a = tgp.loo_predict(model, batch_size=1024, threads=1)
    b = tgp.loo_predict(model, batch_size=13, threads=2)
    np.testing.assert_array_equal(a.y, b.y)


def test_loo_rejects_bad_input(data):
    X, Y = data
    model = tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))
    with pytest.raises(TypeError, match="model"):
        tgp.loo_predict("model")
    with pytest.raises(ValueError, match="method"):
        tgp.loo_predict(model, method="sm_cubic")
    with pytest.raises(ValueError, match="ikl"):
        tgp.loo_predict(model, method="ikl")
    with pytest.raises(ValueError, match="init"):
        tgp.loo_predict(model, init=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="at least 2"):
        tgp.loo_predict(tgp.fit(X[:1], Y[:1], PARAMS))


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_loo_of_some_rows_is_those_rows_of_the_full_loo(data, method):
    """``rows``: each row bitwise what the full leave-one-out gives it (a point's path is its own)."""
    X, Y = data
    model = tgp.fit(X, Y, PARAMS, methods=("kl", "ikl", "sm"))
    idx = np.array([5, 0, 79, 41, 5, 12])
    full = tgp.loo_predict(model, method=method)
    part = tgp.loo_predict(model, method=method, rows=idx)
    for field in ("y", "log_certainty", "objective", "n_iter", "n_eval", "converged", "extrapolated"):
        np.testing.assert_array_equal(getattr(part, field), getattr(full, field)[idx], err_msg=field)
    init = Y[::-1] + 0.1
    np.testing.assert_array_equal(tgp.loo_predict(model, method=method, rows=idx, init=init[idx]).y,
                                  tgp.loo_predict(model, method=method, init=init).y[idx])


def test_loo_without_certainty_changes_nothing_else(data):
    X, Y = data
    model = tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))
    for method in ("kl", "sm"):
        a = tgp.loo_predict(model, method=method)
        b = tgp.loo_predict(model, method=method, certainty=False)
        np.testing.assert_array_equal(a.y, b.y)
        np.testing.assert_array_equal(a.n_eval, b.n_eval)
        if method == "kl":
            assert np.isnan(b.log_certainty).all() and np.isfinite(a.log_certainty).all()
        else:  # SMTGP's comes from its last evaluation
            np.testing.assert_array_equal(a.log_certainty, b.log_certainty)


def test_loo_rows_reject_bad_input(data):
    X, Y = data
    model = tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))
    with pytest.raises(TypeError, match="rows"):
        tgp.loo_predict(model, rows=np.array([0.0, 1.0]))
    with pytest.raises(TypeError, match="rows"):
        tgp.loo_predict(model, rows=np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="rows must index"):
        tgp.loo_predict(model, rows=[0, 80])
    with pytest.raises(ValueError, match="rows must index"):
        tgp.loo_predict(model, rows=[-1])
    assert tgp.loo_predict(model, rows=np.array([], dtype=int)).y.shape == (0, Y.shape[1])  # #53 item 8
    with pytest.raises(ValueError, match="init"):
        tgp.loo_predict(model, rows=[1, 2], init=np.zeros((80, 3)))


def test_no_rows_give_an_empty_result_as_remove_accepts_none():
    """#53 item 8: ``rows=[]`` (float64 to NumPy) raised a TypeError about its dtype."""
    X, Y = _data(40, seed=3)
    model = tgp.fit(X, Y, PARAMS)
    for method in ("sm", "kl", "ikl"):
        res = tgp.loo_predict(model, method=method, rows=[])
        assert res.y.shape == (0, Y.shape[1]) and res.converged.shape == (0,)
    assert tgp.remove(model, []).n_train == model.n_train
    with pytest.raises(TypeError, match="rows must be a 1-D array of training-point indices"):
        tgp.loo_predict(model, rows=[0.5])


def test_loo_spread_of_a_constant_remainder_is_the_refits():
    """Before: the spread downdate cancelled to ~5e-9 instead of 0 (354 of 1000 random n = 2 sets).

    Regression test of #30, item 3.
    """
    from fastsm.tgp.fitting import output_spread
    from fastsm.tgp.loo import loo_spread

    rng = np.random.default_rng(0)
    sets = [rng.standard_normal((2, 2)) for _ in range(300)]
    sets += [np.vstack([np.full((3, 2), 0.1 * k), rng.standard_normal((1, 2))]) for k in range(50)]
    for Y in sets:
        s = loo_spread(Y)
        for i in range(len(Y)):
            m_y = np.delete(Y, i, axis=0)
            ref = float(np.sqrt(np.sum(np.var(m_y, axis=0))))
            if ref == 0.0:  # no spread of its own: the refit's relative unit (item 8), exactly
                assert s[i] == output_spread(m_y) < 1e-15 * max(1.0, np.abs(m_y).max())
            else:
                np.testing.assert_allclose(s[i], ref, rtol=1e-12)


def test_loo_on_two_points_equals_the_refit():
    """Before (n = 2): LOO 0.0767 vs refit -0.432 for this kind of set: the trust radius became 1e-9.

    Regression test of #30, item 3.
    """
    rng = np.random.default_rng(3)
    for _ in range(20):
        X, Y = rng.standard_normal((2, 2)), rng.standard_normal((2, 3))
        model = tgp.fit(X, Y, MANIFOLD_PARAMS)
        loo = tgp.loo_predict(model, method="kl")
        for i in range(2):
            m = tgp.fit(X[[1 - i]], Y[[1 - i]], MANIFOLD_PARAMS, methods=("kl",))
            ref = tgp.predict(m, X[[i]], method="kl")
            np.testing.assert_allclose(loo.y[i], ref.y[0], rtol=0, atol=1e-10)


def test_projections_are_the_columns_of_the_inverse_factors(data):
    """``views.leave_one_out``: row ``h`` of each ``V`` is column ``h`` of ``W = L^-1`` (upper triangle; SciPy's
    triangular solve as the reference), in parallel as in series; ``shared`` (a ``with_alpha`` model) keeps
    ``Vx`` and ``Vy`` and forms ``Vxy`` as a fresh call does; passing them to ``loo_predict`` changes no bit."""
    from scipy.linalg import solve_triangular

    from fastsm.tgp import views

    X, Y = data
    model = tgp.fit(X, Y, PARAMS)
    lv = views.leave_one_out(model)
    for name, V in zip(("Wx", "Wy", "Wxy"), lv, strict=True):
        W = solve_triangular(np.tril(getattr(model, name)), np.eye(len(X)), lower=True)
        np.testing.assert_allclose(V, np.triu(W.T), rtol=0, atol=1e-12 * np.abs(W).max(), err_msg=name)
        assert not V.flags.writeable and V.flags.c_contiguous
    for a, b in zip(views.leave_one_out(model, threads=1), lv, strict=True):
        np.testing.assert_array_equal(a, b)
    moved = tgp.with_alpha(model, 0.3)
    both = views.leave_one_out(moved, shared=lv)
    assert both.Vx is lv.Vx and both.Vy is lv.Vy
    np.testing.assert_array_equal(both.Vxy, views.leave_one_out(moved).Vxy)
    rows = [3, 40]
    np.testing.assert_array_equal(tgp.loo_predict(moved, rows=rows, projections=both).y,
                                  tgp.loo_predict(moved, rows=rows).y)


def test_left_out_points_need_the_projections(data):
    """The kernels read the projections of every left-out point: without them a clear error, not garbage."""
    from fastsm.tgp import prediction

    X, Y = data
    model = tgp.fit(X, Y, PARAMS)
    with pytest.raises(ValueError, match="leave_one_out"):
        prediction.prepare_points(model, X[:2], "sm", np.array([0, 1]))


def test_projections_of_another_model_are_refused(data):
    """``loo_predict(projections=...)`` checks what it is given: another model's projections (another
    ``N``) or another object raise before any kernel reads them."""
    from fastsm.tgp import views

    X, Y = data
    model = tgp.fit(X, Y, PARAMS)
    other = views.leave_one_out(tgp.fit(X[:-1], Y[:-1], PARAMS))
    with pytest.raises(ValueError, match=r"projections.Vx must be .* shape \(80, 80\)"):
        tgp.loo_predict(model, rows=[0], projections=other)
    with pytest.raises(TypeError, match="projections must be"):
        tgp.loo_predict(model, rows=[0], projections=(other.Vx, other.Vy, other.Vxy))

