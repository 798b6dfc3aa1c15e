"""The determinism promise (docs/threads.md), bitwise, on whatever BLAS kernels this process runs.

On one machine (one BLAS kernel family) a prediction depends only on the model
and the point: not on the thread count, the batch size, the order of the points,
how they are split over calls, or the optimiser's window.  CI runs this module
(marker ``determinism``) under OpenBLAS's Nehalem, SandyBridge, Haswell and,
where the CPU has AVX-512, SkylakeX kernels (``OPENBLAS_CORETYPE``).
"""

from __future__ import annotations

import numpy as np
import pytest

from fastsm import config, datasets, tgp
from fastsm._threads import thread_limits
from fastsm.tgp.local_model import local_model
from fastsm.tgp.views import products_plan, with_row_products
from tests.products import tri

pytestmark = pytest.mark.determinism

PARAMS = tgp.TGPParams(gamma_x=0.3, gamma_y=0.5, lambda_x=1e-3, lambda_y=1e-3, alpha=0.7, beta=1.5)


@pytest.fixture(scope="module", params=["global", "rows", "cholesky"])
def problem(request):
    """N = 450 by every path: a global model (substitutions, and IKLTGP's products with ``G``), the same
    model predicting by the fused kernel (:func:`with_row_products`), and a local model's (KNN-local
    and region models; KLTGP and SMTGP only)."""
    X, Xt, Y, _ = datasets.random_structured(3, n_train=450, n_test=90, dx=4, dy=3)
    model = tgp.fit(X, Y, PARAMS)
    if request.param == "rows":
        model = with_row_products(model)
    if request.param == "cholesky":
        model = local_model(model.X, model.Y, model.params, ("kl", "sm"))
        assert model.factor_form == "cholesky" and products_plan(model).solve
    assert products_plan(model).solve
    return model, Xt


def _methods(model):
    return [m for m in ("kl", "ikl", "sm") if m in model.methods]


@pytest.mark.parametrize("solve", [False, True])
@pytest.mark.parametrize("n", [7, 64, 100, 300, 450, 1000])
def test_product_rows_do_not_depend_on_the_other_rows(n, solve):
    """The construction itself: ``tri`` of a row alone, in a batch (groups of four rows and of 64,
    rows left over), shifted, or with other rows around, by products and by substitutions with a
    Cholesky factor (against NumPy's product and SciPy's ``solve_triangular``)."""
    rng = np.random.default_rng(n)
    A = rng.standard_normal((301, n))
    M = np.tril(rng.standard_normal((n, n)))
    if solve:
        B = rng.standard_normal((n, n))
        M = np.linalg.cholesky(B @ B.T / n + np.eye(n))  # condition number ~5 (a random triangle's is ~2^n)
    for forward, dense in ((True, M.T), (False, M)):
        with thread_limits(2):
            full = tri(A, M, forward, solve=solve)
            for rows in (slice(0, 1), slice(1, 2), slice(5, 17), slice(3, 200), slice(100, 301)):
                np.testing.assert_array_equal(tri(A[rows], M, forward, solve=solve), full[rows])
            perm = rng.permutation(301)
            np.testing.assert_array_equal(tri(A[perm], M, forward, solve=solve), full[perm])
        with thread_limits(1):
            np.testing.assert_array_equal(tri(A, M, forward, solve=solve), full)
        # and it is the product, or the solve (rounding only)
        if solve:
            from scipy.linalg import solve_triangular

            ref = solve_triangular(M if forward else M.T, A.T, lower=forward).T
        else:
            ref = A @ dense
        np.testing.assert_allclose(full, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())


def test_threads_batch_size_order_split_and_window(problem, monkeypatch):
    model, X = problem
    perm = np.random.default_rng(0).permutation(len(X))
    for method in _methods(model):
        ref = tgp.predict(model, X, method=method)
        one = tgp.predict(model, X, method=method, threads=1)
        small = tgp.predict(model, X, method=method, batch_size=37)
        shuffled = tgp.predict(model, X[perm], method=method)
        first = tgp.predict(model, X[:41], method=method)
        rest = tgp.predict(model, X[41:], method=method, threads=1)
        for other in (one.y, small.y, np.concatenate([first.y, rest.y])):
            np.testing.assert_array_equal(other, ref.y)
        np.testing.assert_array_equal(shuffled.y, ref.y[perm])
        np.testing.assert_array_equal(one.log_certainty, ref.log_certainty)
        np.testing.assert_array_equal(small.n_eval, ref.n_eval)
    monkeypatch.setattr(config, "DEFAULT_WINDOW", 5)
    narrow = tgp.predict(model, X, method="sm", threads=1)
    np.testing.assert_array_equal(narrow.y, ref.y)


def test_fit_objective_and_certainty_do_not_depend_on_threads(problem):
    model, X = problem
    X_all, Y_all = model.X, model.Y
    if model.G is None:  # a local model: built on one thread whatever the caller's limits
        with thread_limits(1):
            m1 = local_model(X_all, Y_all, model.params, model.methods)
        with thread_limits(2):
            m2 = local_model(X_all, Y_all, model.params, model.methods)
    else:
        m1 = tgp.fit(X_all, Y_all, PARAMS, threads=1)
        m2 = tgp.fit(X_all, Y_all, PARAMS, threads=2)
    for k in ("Wx", "Wy", "Wxy", "G", "ridge_coef"):
        np.testing.assert_array_equal(getattr(m1, k), getattr(m2, k))
        np.testing.assert_array_equal(getattr(m1, k), getattr(model, k))
    Y = tgp.predict(model, X, method="kl").y
    for method in _methods(model):
        a = tgp.objective(model, X, Y, method=method, return_gradient=True, threads=1)
        b = tgp.objective(model, X, Y, method=method, return_gradient=True, batch_size=13)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(tgp.certainty(model, X, Y, threads=1), tgp.certainty(model, X, Y, batch_size=7))


def test_leave_one_out_does_not_depend_on_batch_size_or_threads(problem):
    model, _ = problem
    a = tgp.loo_predict(model, method="sm", threads=1)
    b = tgp.loo_predict(model, method="sm", batch_size=29)
    np.testing.assert_array_equal(a.y, b.y)


def test_local_models_do_not_depend_on_threads_or_the_call_split(problem):
    model, X = problem
    local = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=120, share="exact")
    a = tgp.predict(local, X, threads=1)
    b = np.concatenate([tgp.predict(local, X[:30]).y, tgp.predict(local, X[30:], batch_size=11).y])
    np.testing.assert_array_equal(a.y, b)
