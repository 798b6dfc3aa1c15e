"""Prediction behaviour: basins, starts, options, toy errors."""

import numpy as np
import pytest

from fastsm import datasets, tgp


@pytest.fixture(scope="module")
def toy1_model():
    Xtr, Xte, Ytr, Yte = datasets.toy1()
    return tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4, alpha=0.9,
                                           beta=1.5)), Xte, Yte  # [SM] Table 1, Toy 1


def test_toy1_errors_have_the_papers_magnitude(toy1_model):
    m, Xte, Yte = toy1_model
    errs = {meth: np.abs(tgp.predict(m, Xte, method=meth).y - Yte).mean() for meth in ("kl", "ikl", "sm")}
    # [SM] Table 2: KLTGP 0.116, IKLTGP 0.115, SMTGP 0.1126
    for meth, paper in (("kl", 0.116), ("ikl", 0.115), ("sm", 0.1126)):
        assert abs(errs[meth] - paper) < 0.015, (meth, errs[meth])


def test_predictions_stay_in_the_basin_of_their_start(toy1_model):
    """Each prediction must be a local minimiser reached downhill from its start, not a jump across
    a ridge: along the segment start -> prediction the objective never rises above the start's value
    by more than noise, and the prediction is a descent from the start."""
    m, Xte, _ = toy1_model
    pr = tgp.predict(m, Xte, method="ikl")
    Y0 = np.hstack([Xte, np.ones((len(Xte), 1))]) @ m.ridge_coef
    f0 = tgp.objective(m, Xte, Y0, method="ikl")
    assert np.all(pr.objective <= f0 + 1e-7)
    ts = np.linspace(0, 1, 41)
    jumps = 0
    for i in range(0, len(Xte), 5):
        seg = Y0[i] + ts[:, None] * (pr.y[i] - Y0[i])
        vals = tgp.objective(m, np.repeat(Xte[i : i + 1], len(ts), 0), seg, method="ikl")
        jumps += np.max(vals) > f0[i] + 1e-7  # IKL's objective noise is ~1e-8 at lambda = 1e-4
    assert jumps == 0
    # the steps are bounded: nothing wanders far outside the training outputs' range
    assert pr.y.min() > m.Y.min() - 0.5 and pr.y.max() < m.Y.max() + 0.5


def test_unbounded_steps_would_leave_the_basin(toy1_model):
    """The counter-example that motivates the trust radius: SciPy's plain BFGS jumps."""
    from scipy.optimize import minimize

    from fastsm.reference.tgp import _point_objective
    from fastsm.tgp.views import inverse_form

    m, Xte, _ = toy1_model
    i = 363
    y0 = (np.hstack([Xte[i : i + 1], [[1.0]]]) @ m.ridge_coef)[0]
    f, _ = _point_objective(inverse_form(m), Xte[i], "ikl")
    scipy_y = minimize(f, y0, jac=True, method="BFGS").x
    ours = tgp.predict(m, Xte[i : i + 1], method="ikl")
    assert tgp.objective(m, Xte[i : i + 1], ours.y, method="ikl")[0] < f(scipy_y)[0]
    assert abs(ours.y[0, 0] - y0[0]) < abs(scipy_y[0] - y0[0])


def test_prediction_fields_and_init_options(toy1_model):
    m, Xte, _ = toy1_model
    X = Xte[:20]
    pr = tgp.predict(m, X, method="sm")
    assert pr.y.shape == (20, 1) and pr.log_certainty.shape == (20,)
    assert pr.n_iter.dtype.kind == "i" and pr.n_eval.min() >= 1 and pr.converged.dtype == bool
    assert np.all(pr.n_eval >= pr.n_iter + 1)
    kl = tgp.predict(m, X, method="kl")
    explicit = tgp.predict(m, X, method="sm", init=kl.y)
    np.testing.assert_array_equal(pr.y, explicit.y)
    lin = tgp.predict(m, X, method="kl", init="linear")
    np.testing.assert_array_equal(lin.y, kl.y)
    none = tgp.predict(m, X, method="kl", max_iter=0)
    np.testing.assert_allclose(none.y, np.hstack([X, np.ones((20, 1))]) @ m.ridge_coef)
    np.testing.assert_allclose(pr.log_certainty, tgp.certainty(m, X, pr.y), rtol=1e-12)


def test_gradient_descent_reaches_the_same_minima():
    Xtr, Xte, Ytr, _ = datasets.random_structured(0, n_train=100, n_test=10, dx=4, dy=3)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.3, gamma_y=0.3, lambda_x=1e-2, lambda_y=1e-2, alpha=0.5))
    q = tgp.predict(m, Xte, method="kl", max_iter=500, tol=1e-10)
    g = tgp.predict(m, Xte, method="kl", optimizer="gd", max_iter=5000, tol=1e-10)
    assert q.converged.all() and g.converged.all()
    np.testing.assert_allclose(g.y, q.y, atol=1e-4)
    assert q.n_iter.mean() < g.n_iter.mean()


def test_batch_size_does_not_change_results_beyond_rounding():
    Xtr, Xte, Ytr, _ = datasets.random_structured(0, n_train=100, n_test=30, dx=4, dy=3)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.3, gamma_y=0.3, lambda_x=1e-2, lambda_y=1e-2, alpha=0.5))
    a = tgp.predict(m, Xte, method="sm", batch_size=30, tol=1e-12, max_iter=300)
    b = tgp.predict(m, Xte, method="sm", batch_size=7, tol=1e-12, max_iter=300)
    np.testing.assert_allclose(a.y, b.y, atol=1e-8)


def test_eta_floor_is_hit_and_counted_on_training_outputs():
    """Exactly on a training output with lambda = 0 the Schur complement eta_y is 0 in exact
    arithmetic; it must be floored (finite objective) and counted."""
    Ytr = np.array([[0.0], [0.3], [0.55], [0.8], [1.0]])
    Xtr = Ytr + 0.3 * np.sin(2 * np.pi * Ytr)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(lambda_x=1e-3, lambda_y=0.0))
    pr = tgp.predict(m, Xtr, method="kl", init=Ytr, max_iter=0)
    assert np.all(np.isfinite(pr.objective))
    assert pr.n_eta_floor.sum() >= 1


def test_smtgp_starts_from_kltgp_stopped_after_sm_start_iter():
    """init="kl" (SMTGP's default) is KLTGP from the ridge start stopped after config.SM_START_ITER
    iterations, for predict and for exact leave-one-out; a smaller max_iter bounds it too."""
    from fastsm import config

    Xtr, Xte, Ytr, _ = datasets.random_structured(2, n_train=120, n_test=40, dx=3, dy=4)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.3, gamma_y=0.5, lambda_x=1e-3, lambda_y=1e-3, alpha=0.6))
    k = config.SM_START_ITER
    kl = tgp.predict(m, Xte, method="kl", init="linear", max_iter=k)
    assert kl.n_iter.max() == k and not kl.converged.all()  # the start really is cut short here
    for init in (None, "kl"):
        np.testing.assert_array_equal(tgp.predict(m, Xte, method="sm", init=init).y,
                                      tgp.predict(m, Xte, method="sm", init=kl.y).y)
    loo_kl = tgp.loo_predict(m, method="kl", init="linear", max_iter=k)
    np.testing.assert_array_equal(tgp.loo_predict(m, method="sm").y,
                                  tgp.loo_predict(m, method="sm", init=loo_kl.y).y)
    short = tgp.predict(m, Xte, method="kl", init="linear", max_iter=2)
    np.testing.assert_array_equal(tgp.predict(m, Xte, method="sm", max_iter=2).y,
                                  tgp.predict(m, Xte, method="sm", init=short.y, max_iter=2).y)
