"""What the performance work must not change: tiling, continuous batching, the stopping rule, the certainty.

Bitwise checks: a row's products come from the row loops of fastsm._kernels.tri_rows, whose every row
gets the same operations whatever the other rows are, so they hold on every BLAS and CPU kernel family.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastsm import config, datasets, tgp
from fastsm._kernels import objectives as obj
from fastsm._threads import thread_limits
from fastsm.tgp import prediction as api
from fastsm.tgp import views

PARAMS = tgp.TGPParams(gamma_x=0.2, gamma_y=0.125, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6)


@pytest.fixture(scope="module")
def problem():
    Xtr, Xte, Ytr, _ = datasets.random_structured(1, n_train=200, n_test=100, dx=5, dy=8)
    return tgp.fit(Xtr, Ytr, PARAMS), Xte


def _evaluate(model, X, Y, method):
    m = len(X)
    out = obj.Evaluations(np.empty(m), np.empty(Y.shape), np.empty(m), np.empty(m), np.zeros(m, dtype=np.int64))
    plan = views.products_plan(model, method)
    with thread_limits(None):  # BLAS at one thread, as in a prediction (OpenBLAS splits a threaded call by its size)
        F, eta_x, _, _ = api.prepare_points(model, X, method)
        obj.evaluate_batch(views.objective_view(model, method, 1.0), obj.Points(F, eta_x, np.full(m, -1)),
                           np.arange(m), np.ascontiguousarray(Y), out,
                           obj.Products(obj.workspace(m, model.n_train), plan), None)
    return out.value, out.grad


@pytest.mark.determinism
@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_a_row_evaluates_alike_whatever_rows_share_its_call(method):
    """Threads split a prediction's points into chunks (``fastsm._threads.run_chunks``): a row's evaluation
    must not depend on the rows evaluated with it.  All 60 rows in one call and in chunks of 1, 7 and 52
    rows (other four-row sets, other rows left over) give the same bits."""
    Xtr, Xte, Ytr, _ = datasets.random_structured(1, n_train=700, n_test=60, dx=5, dy=8)
    model = tgp.fit(Xtr, Ytr, PARAMS)
    Y = tgp.predict(model, Xte, method="kl").y + 0.01
    v1, g1 = _evaluate(model, Xte, Y, method)
    parts = [_evaluate(model, Xte[s:e], Y[s:e], method) for s, e in ((0, 1), (1, 8), (8, 60))]
    np.testing.assert_array_equal(v1, np.concatenate([v for v, _ in parts]))
    np.testing.assert_array_equal(g1, np.concatenate([g for _, g in parts]))


@pytest.mark.determinism
def test_window_does_not_change_predictions(problem, monkeypatch):
    """Continuous batching: a point's path depends on its own evaluations only."""
    model, X = problem
    wide = tgp.predict(model, X, method="sm")
    monkeypatch.setattr(config, "DEFAULT_WINDOW", 3)
    narrow = tgp.predict(model, X, method="sm", threads=1)
    np.testing.assert_array_equal(narrow.y, wide.y)
    np.testing.assert_array_equal(narrow.n_eval, wide.n_eval)


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_objective_stop_loses_no_quality(problem, method):
    """The ftol stops (measured and predicted decrease) end points at the rounding floor: objectives
    no worse than the step rule alone, with fewer evaluations.

    Measured (this problem, 100 points, ftol 1e-12): at most 2.2e-12 relative above the ftol=0 run (1e-9
    allowed), 11–14 % fewer evaluations.
    """
    model, X = problem
    fast = tgp.predict(model, X, method=method, ftol=1e-12)
    slow = tgp.predict(model, X, method=method, ftol=0.0)
    worse = fast.criterion > slow.criterion + 1e-9 * np.abs(slow.criterion)
    assert worse.mean() <= 0.01
    assert fast.n_eval.sum() <= slow.n_eval.sum()
    assert fast.converged.mean() >= slow.converged.mean()


def test_certainty_comes_from_the_last_evaluation(problem):
    """predict's certainty reuses eta_y, eta_xy of the optimiser's last accepted evaluation.

    ``certainty`` recomputes them through the same kernel compiled into another caller, where
    LLVM may contract other multiply-adds: measured 2.6e-12 apart, 1e-10 allowed.
    """
    model, X = problem
    pred = tgp.predict(model, X, method="sm")
    np.testing.assert_allclose(pred.log_certainty, tgp.certainty(model, X, pred.y), rtol=0, atol=1e-10)


@pytest.mark.determinism
def test_predictions_are_bitwise_the_same_for_one_and_two_threads(problem):
    model, X = problem
    for method in ("kl", "sm"):
        a = tgp.predict(model, X, method=method, threads=1)
        b = tgp.predict(model, X, method=method, threads=2)
        np.testing.assert_array_equal(a.y, b.y)
        np.testing.assert_array_equal(a.log_certainty, b.log_certainty)


def test_vectorised_exponential_matches_numpy():
    from fastsm._kernels.rbf import exp_neg_scaled

    x = np.concatenate([np.linspace(0.0, 720.0, 20001), [0.0, 1e-300, 699.99, 700.0, 700.01, 1e300, np.inf, np.nan]])
    got = x.copy()
    exp_neg_scaled(got, 1.0, np.empty_like(x), np.empty_like(x))
    want = np.exp(-x)
    normal = want >= np.exp(-700.0)
    # measured: 2.2e-16 relative (one ulp) over [0, 700]
    np.testing.assert_allclose(got[normal], want[normal], rtol=4.5e-16, atol=0)
    assert np.all(got[~normal & np.isfinite(x)] <= 1e-304)
    assert np.isnan(got[-1])


@pytest.mark.parametrize("method", ["sm", "kl"])
def test_a_batched_evaluation_split_over_threads_is_the_one_thread_evaluation(method):
    """``prediction.evaluate(threads=2)`` (``fastsm bench --evaluation``) splits the rows into chunks: the same
    bits as one call of all rows, and the values ``tgp.objective`` gives row by row (its own chunks).  On a
    one-core machine both runs take one thread."""
    Xtr, Xte, Ytr, _ = datasets.random_structured(3, n_train=60, n_test=23, dx=3, dy=4)
    model = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.5, gamma_y=0.5, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6),
                    methods=("kl", "sm"))
    Y = Ytr[:23] + 0.05
    F, eta_x, _, _ = api.prepare_points(model, Xte, method)
    runs = []
    for threads in (1, 2):
        val, grad = np.empty(23), np.empty((23, 4))
        with thread_limits(threads) as n:
            api.evaluate(model, method, F, eta_x, Y, val, grad, threads=n)
        runs.append((val, grad))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    want = tgp.objective(model, Xte, Y, method=method, threads=1)
    np.testing.assert_allclose(runs[1][0], want, rtol=1e-12)
