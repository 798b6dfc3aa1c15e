"""The KLIEP Newton polish stays inside its buffers (issue: heap corruption on ordinary shifted data).

CI also runs this module with ``NUMBA_BOUNDSCHECK=1`` (marker ``boundscheck``), where an
out-of-bounds index raises ``IndexError`` instead of corrupting the heap.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastsm import shift

pytestmark = pytest.mark.boundscheck


@pytest.mark.parametrize("solver", ["pfw", "afw", "fw", "pg"])
def test_shifted_data_with_a_narrow_kernel(solver):
    """The reported case: before the fix the support grew by the same atoms every round (k > n_c)."""
    rng = np.random.default_rng(0)
    X_train = rng.normal(0.0, 0.3, (20, 2))
    X_test = rng.normal(1.5, 0.5, (50, 2))
    iw = shift.estimate_weights(X_train, X_test, solver=solver, sigma=0.1)
    assert np.all(np.isfinite(iw.weights)) and np.all(iw.weights >= 0.0)
    assert np.isfinite(iw.objective) and iw.gap >= 0.0
    assert iw.active.size <= X_test.shape[0]


@pytest.mark.parametrize("X_train", [np.array([[0.2, -0.1]]), np.full((6, 2), 0.3)],
                         ids=["one training point", "all duplicates"])
def test_degenerate_training_sets_with_sigma_selection(X_train):
    X_test = np.random.default_rng(1).normal(0.0, 1.0, (40, 2))
    iw = shift.estimate_weights(X_train, X_test, sigma=None, random_state=0)
    assert np.all(np.isfinite(iw.weights))
    np.testing.assert_allclose(iw.weights, iw.weights[0])  # identical inputs, identical weights


def test_polish_that_cannot_move_stops_instead_of_looping():
    """Newton's Hessian on far-away atoms is not numerically positive definite: the polish ends at once."""
    rng = np.random.default_rng(0)
    X_train = rng.normal(0.0, 0.3, (20, 2))
    X_test = rng.normal(1.5, 0.5, (50, 2))
    iw = shift.estimate_weights(X_train, X_test, solver="pfw", sigma=0.1)
    assert iw.n_polish <= 50
    if not iw.converged:
        assert iw.stop_reason in ("line_search", "max_iter")


@pytest.mark.filterwarnings("ignore:.*centres lie where the training density is zero:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
def test_random_fuzz_of_small_problems():
    """10 000 small seeded cases (sizes, shifts, widths, duplicates); every result finite and in range."""
    rng = np.random.default_rng(2026)
    solvers = ("pfw", "afw", "fw", "pg")
    for case in range(10_000):
        d = int(rng.integers(1, 3))
        n_tr, n_te = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        X_train = rng.normal(0.0, rng.uniform(0.01, 1.0), (n_tr, d))
        X_test = rng.normal(rng.uniform(-1.5, 1.5), rng.uniform(0.01, 1.0), (n_te, d))
        if rng.random() < 0.1:
            X_train[:] = X_train[0]
        sigma = float(10.0 ** rng.uniform(-1.5, 0.5))
        try:
            iw = shift.estimate_weights(X_train, X_test, solver=solvers[case % 4], sigma=sigma, max_iter=40)
        except ValueError as exc:  # a too-narrow kernel is a clear error, never a crash
            assert "sigma" in str(exc)
            continue
        assert np.all(np.isfinite(iw.weights)) and np.all(iw.weights >= 0.0), case
        assert np.all(np.isfinite(iw.coef)) and np.isfinite(iw.objective), case


def _kliep_optimum(X_train, X_test, centers, sigma):
    """``max_mu sum_j log (A mu)_j`` over the simplex by Clarabel (cvxpy), from NumPy's own ``A``: each row
    scaled by its largest entry (``log A`` formed directly, so nothing under- or overflows)."""
    cp = pytest.importorskip("cvxpy")
    gamma = 1.0 / (2.0 * sigma**2)
    d2 = lambda P, Q: ((P[:, None, :] - Q[None]) ** 2).sum(-1)  # noqa: E731
    logk_tr = -gamma * d2(X_train, centers)
    top = logk_tr.max(axis=0)
    log_b = top + np.log(np.exp(logk_tr - top).mean(axis=0))
    log_a = -gamma * d2(X_test, centers) - log_b
    s = log_a.max(axis=1)
    mu = cp.Variable(centers.shape[0], nonneg=True)
    prob = cp.Problem(cp.Maximize(cp.sum(cp.log(np.exp(log_a - s[:, None]) @ mu))), [cp.sum(mu) == 1])
    prob.solve(solver=cp.CLARABEL)
    return float(prob.value + s.sum())


def test_the_polish_never_ends_below_its_hand_over():
    """#53 item 3: X_train 20 x 5, X_test 300 x 5, N(0, 1), sigma = 0.1.  Before, ``pg``'s polish cut its
    iterate to the 64 largest atoms (test points left without support) and returned F = -20877 against
    2128 unpolished.  Now the polished F is never below the unpolished one, never above Clarabel's
    optimum (its certificate ``F* - F <= gap`` holds), and within ``tol`` of it where converged."""
    rng = np.random.default_rng(0)
    X_train, X_test = rng.standard_normal((20, 5)), rng.standard_normal((300, 5))
    f_star = None
    for solver in ("pg", "fw", "afw", "pfw"):
        rough = shift.estimate_weights(X_train, X_test, sigma=0.1, solver=solver, polish=False)
        iw = shift.estimate_weights(X_train, X_test, sigma=0.1, solver=solver)
        if f_star is None:
            f_star = _kliep_optimum(X_train, X_test, iw.centers, 0.1)  # measured 42699.33
        slack = 1e-7 * abs(f_star)  # Clarabel's relative accuracy
        assert iw.objective >= rough.objective, (solver, iw.objective, rough.objective)
        assert iw.objective <= f_star + slack, (solver, iw.objective, f_star)
        assert f_star - iw.objective <= iw.gap + slack, (solver, iw.objective, iw.gap, f_star)
        if iw.converged:
            assert f_star - iw.objective <= 1e-6 + slack, (solver, iw.objective, f_star)
