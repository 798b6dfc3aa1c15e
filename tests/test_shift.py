"""KLIEP by Frank–Wolfe and projected gradient ([CS] §III, docs/math.md §5), against independent references."""


import cvxpy as cp
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.stats import norm

from fastsm import datasets, shift
from fastsm._kernels import kliep_problem as kp
from fastsm.shift.kliep import fit_on_centers

SIGMA = 0.4
#: Absolute accuracy allowed to the interior-point reference F* (measured deviation 3.8e-8).
REF_ACC = 5e-7


@pytest.fixture(scope="module")
def small():
    """A 2-D shifted problem small enough for an interior-point reference."""
    rng = np.random.default_rng(7)
    Xtr = rng.normal([0.5, 0.0], [0.6, 0.5], (120, 2))
    Xte = rng.normal([0.0, 0.2], [0.35, 0.4], (70, 2))
    return Xtr, Xte


def _numpy_problem(Xtr, Xte, C, sigma):
    A = np.exp(-cdist(Xte, C, "sqeuclidean") / (2 * sigma**2))
    b = np.exp(-cdist(Xtr, C, "sqeuclidean") / (2 * sigma**2)).mean(axis=0)
    return A, b


@pytest.fixture(scope="module")
def reference(small):
    """F* by Clarabel's exponential-cone interior point method, independent of fastsm's kernels."""
    Xtr, Xte = small
    A, b = _numpy_problem(Xtr, Xte, Xte, SIGMA)
    a = cp.Variable(A.shape[1], nonneg=True)
    prob = cp.Problem(cp.Maximize(cp.sum(cp.log(A @ a))), [b @ a == 1])
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == "optimal"
    return A, b, float(np.sum(np.log(A @ np.maximum(a.value, 0) / (b @ np.maximum(a.value, 0)))))


@pytest.mark.parametrize("solver", shift.SOLVERS)
def test_all_solvers_reach_the_reference_optimum(small, reference, solver):
    Xtr, Xte = small
    A, b, f_star = reference
    iw = shift.estimate_weights(Xtr, Xte, solver=solver, sigma=SIGMA)
    f = float(np.sum(np.log(A @ iw.coef)))  # recomputed with NumPy from the returned coefficients
    assert abs(f - f_star) <= 1e-6 * abs(f_star)
    assert f >= f_star - REF_ACC  # not worse than the interior-point solution
    assert abs(b @ iw.coef - 1.0) <= 1e-10
    assert abs(iw.weights.mean() - 1.0) <= 1e-10
    assert iw.converged and iw.gap <= shift.kliep.DEFAULT_TOL and iw.stop_reason == "gap"
    assert np.all(iw.coef >= 0.0)
    np.testing.assert_array_equal(iw.active, np.flatnonzero(iw.coef > 0))


@pytest.mark.parametrize("solver", ["fw", "afw", "pfw"])
def test_unpolished_gap_bounds_the_suboptimality(small, reference, solver):
    Xtr, Xte = small
    _, _, f_star = reference
    iw = shift.estimate_weights(Xtr, Xte, solver=solver, sigma=SIGMA, polish=False, max_iter=300)
    assert iw.n_polish == 0 and iw.stop_reason in ("max_iter", "gap", "line_search")
    # the interior-point F* is itself accurate to ~4e-8 here (measured): REF_ACC of slack
    assert -REF_ACC <= f_star - iw.objective <= iw.gap * (1 + 1e-9) + REF_ACC
    h = iw.objective_history
    assert np.all(np.diff(h) >= -1e-9 * abs(h[-1]))  # Armijo: F never decreases


def test_step_invariants(small):
    Xtr, Xte = small
    for solver in ("fw", "afw", "pfw"):
        iw = fit_on_centers(Xtr, Xte, Xte, 0.25, solver, max_iter=2000, tol=0.0, ftol=0.0, polish=False, threads=None,
                  check=True)
        steps = iw._trace.step[: iw.n_iter]
        assert iw._violations == 0, solver  # active set == support of mu, sum mu == 1, every iteration
        assert iw.n_good + iw.n_drop + iw.n_swap == iw.n_iter
        assert np.sum(steps == kp.DROP) == iw.n_drop and np.sum(steps == kp.SWAP) == iw.n_swap
        if solver == "fw":
            assert iw.n_drop == 0 and iw.n_swap == 0 and np.all(steps == kp.GOOD)
        if solver == "afw":
            assert iw.n_swap == 0 and iw.n_drop > 0
        if solver == "pfw":
            assert iw.n_drop + iw.n_swap > 0
        sizes = np.diff(iw._trace.n_active[: iw.n_iter + 1])  # [CS] §III-B: |S| after each kind of step
        assert np.all(sizes[steps == kp.DROP] == -1) and np.all(sizes[steps == kp.SWAP] == 0)
        np.testing.assert_array_equal(iw.active, np.flatnonzero(iw.coef > 0))


def test_kernels_match_numpy(small):
    Xtr, Xte = small
    A, b = _numpy_problem(Xtr, Xte, Xte[:30], SIGMA)
    prob, b2, keep = shift.kliep.build_problem(Xtr, Xte, Xte[:30], SIGMA)
    np.testing.assert_allclose(b2, b, rtol=1e-13)
    np.testing.assert_allclose(prob.A, A / b, rtol=1e-13)
    r = np.random.default_rng(0).uniform(0.5, 2, Xte.shape[0])
    gt = np.empty(30)
    kp.gradient(prob, r, gt)
    np.testing.assert_allclose(gt, (A / b).T @ r, rtol=1e-12)
    free, _, _ = shift.kliep.build_problem(Xtr, Xte, Xte[:30], SIGMA, stored=False)
    kp.gradient(free, r, gt)
    np.testing.assert_allclose(gt, (A / b).T @ r, rtol=1e-12)


def test_matrix_free_mode_gives_the_same_weights(small):
    Xtr, Xte = small
    kw = dict(max_iter=10_000, tol=1e-8, ftol=0.0, polish=True, threads=None)
    a = fit_on_centers(Xtr, Xte, Xte, SIGMA, "pfw", stored=True, **kw)
    b = fit_on_centers(Xtr, Xte, Xte, SIGMA, "pfw", stored=False, **kw)
    assert abs(a.objective - b.objective) <= 1e-10 * abs(a.objective)
    np.testing.assert_allclose(a.weights, b.weights, rtol=1e-6, atol=1e-8)


def test_weights_at_and_thread_independence(small):
    Xtr, Xte = small
    iw1 = shift.estimate_weights(Xtr, Xte, sigma=SIGMA, threads=1)
    iw2 = shift.estimate_weights(Xtr, Xte, sigma=SIGMA, threads=2)
    np.testing.assert_array_equal(iw1.weights, iw2.weights)
    np.testing.assert_allclose(shift.weights_at(iw1, Xtr), iw1.weights, rtol=1e-12)
    A, b = _numpy_problem(Xtr, Xte, iw1.centers, SIGMA)
    np.testing.assert_allclose(shift.weights_at(iw1, Xte), A @ iw1.coef, rtol=1e-12)


def test_toy_weights_track_the_true_ratio():
    d = datasets.covariate_shift_toy(seed=0)
    assert d.X_train.shape == (500, 1) and d.X_test.shape == (300, 1) and d.Y_train.shape == (500, 1)
    np.testing.assert_allclose(d.ratio_train, norm.pdf(d.X_train[:, 0], 0, 0.3) / norm.pdf(d.X_train[:, 0], 0.5, 0.5))
    iw = shift.estimate_weights(d.X_train, d.X_test, sigma=0.3)
    assert np.corrcoef(iw.weights, d.ratio_train)[0, 1] > 0.95  # measured 0.979 (seed 0)
    assert iw.n_nonzero <= 10  # the optimum is sparse (docs/math.md §5: 3 atoms)


def test_centers_options(small):
    Xtr, Xte = small
    iw = shift.estimate_weights(Xtr, Xte, sigma=SIGMA, centers=20, random_state=3)
    assert iw.coef.size == 20
    iw2 = shift.estimate_weights(Xtr, Xte, sigma=SIGMA, centers=20, random_state=3)
    np.testing.assert_array_equal(iw.weights, iw2.weights)
    idx = np.arange(0, 70, 2)
    iw3 = shift.estimate_weights(Xtr, Xte, sigma=SIGMA, centers=idx)
    iw4 = shift.estimate_weights(Xtr, Xte, sigma=SIGMA, centers=Xte[idx])
    np.testing.assert_array_equal(iw3.weights, iw4.weights)


def test_select_sigma():
    d = datasets.covariate_shift_toy(n_train=200, n_test=100, seed=1)
    sel = shift.select_sigma(d.X_train, d.X_test, random_state=0)
    assert sel.sigma in sel.sigmas and sel.scores[list(sel.sigmas).index(sel.sigma)] == np.nanmax(sel.scores)
    assert sel.fold_scores.shape == (sel.sigmas.size, 5) and "<-" in sel.table()
    sel2 = shift.select_sigma(d.X_train, d.X_test, method="iwcv", Y_train=d.Y_train, sigmas=[0.1, 0.3, 1.0],
                              random_state=0)
    assert sel2.sigma in (0.1, 0.3, 1.0) and np.all(np.isfinite(sel2.scores))
    iw = shift.estimate_weights(d.X_train, d.X_test, random_state=0)  # sigma=None: LCV
    assert iw.sigma == sel.sigma


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(X_train=np.ones((5, 2)), X_test=np.ones((4, 3))), ValueError, "same number of columns"),
        (dict(X_train=np.ones((0, 2)), X_test=np.ones((4, 2))), ValueError, "X_train must not be empty"),
        (dict(X_test=np.ones((0, 1))), ValueError, "X_test must not be empty"),
        (dict(sigma=0.0), ValueError, "sigma must be > 0"),
        (dict(sigma=-1.0), ValueError, "sigma"),
        (dict(sigma=float("nan")), ValueError, "sigma must be finite"),
        (dict(X_train=[[np.nan]]), ValueError, "X_train contains NaN"),
        (dict(X_test=[[np.inf]]), ValueError, "X_test contains NaN or inf"),
        (dict(solver="kliep"), ValueError, "solver must be one of"),
        (dict(centers=0), ValueError, "centers must be between 1 and n_test"),
        (dict(centers=100), ValueError, "centers must be between 1 and n_test"),
        (dict(centers=np.array([0, 40])), ValueError, r"centers indices must lie in \[0, 30\)"),
        (dict(centers=np.ones((3, 2))), ValueError, "centers must have 1 columns"),
        (dict(max_iter=-1), ValueError, "max_iter must be >= 0"),
        (dict(tol=-1.0), ValueError, "tol must be >= 0"),
        (dict(polish="yes"), TypeError, "polish must be a bool"),
        (dict(sigma="wide"), TypeError, "sigma must be a real number"),
    ],
)
def test_bad_input(kwargs, exc, match):
    rng = np.random.default_rng(0)
    args = dict(X_train=rng.normal(size=(40, 1)), X_test=rng.normal(size=(30, 1)), sigma=0.5)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        shift.estimate_weights(args.pop("X_train"), args.pop("X_test"), **args)


def test_bad_input_select_and_weights_at(small):
    Xtr, Xte = small
    with pytest.raises(ValueError, match="Y_train is required"):
        shift.select_sigma(Xtr, Xte, method="iwcv")
    with pytest.raises(ValueError, match="sigmas must all be > 0"):
        shift.select_sigma(Xtr, Xte, sigmas=[0.1, -1.0])
    with pytest.raises(ValueError, match="n_folds must be >= 2"):
        shift.select_sigma(Xtr, Xte, n_folds=1)
    with pytest.raises(ValueError, match="method must be one of"):
        shift.select_sigma(Xtr, Xte, method="aic")
    iw = shift.estimate_weights(Xtr, Xte, sigma=SIGMA)
    with pytest.raises(ValueError, match="X must have 2 columns"):
        shift.weights_at(iw, np.ones((3, 1)))
    with pytest.raises(TypeError, match="iw must be an ImportanceWeights"):
        shift.weights_at(iw.weights, Xtr)


def test_tiny_sigma_is_a_clear_error():
    rng = np.random.default_rng(0)
    Xtr, Xte = rng.normal(0, 1, (30, 1)), rng.normal(40, 1, (20, 1))
    with pytest.raises(ValueError, match="sigma = .* is too small"):
        shift.estimate_weights(Xtr, Xte, sigma=0.05)


def test_a_width_the_fit_accepts_is_accepted_everywhere():
    """#53 item 12: a sigma so wide that 1 / (2 sigma^2) underflows (every kernel value 1: A = 1, w = 1) fitted,
    then ``weights_at``, ``KLIEPWeights.weights`` and ``select_sigma`` raised OverflowError from sigma**2."""
    from fastsm.sklearn import KLIEPWeights

    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((30, 2)), rng.standard_normal((40, 2)) + 0.5
    for s in (1.4e154, 1e200):
        iw = shift.estimate_weights(A, B, sigma=s)
        np.testing.assert_allclose(shift.weights_at(iw, B[:5]), 1.0, rtol=1e-12)
        np.testing.assert_allclose(KLIEPWeights(sigma=s).fit(A, B).weights(B[:5]), 1.0, rtol=1e-12)
    assert shift.select_sigma(A, B, sigmas=[1e200]).sigma == 1e200


def test_too_few_test_points_for_the_width_search_say_so():
    """#53 item 7: before, "n_folds must be at most n_test = 2 for LCV, got 5" from a function without n_folds."""
    from fastsm.sklearn import KLIEPWeights

    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((30, 2)), rng.standard_normal((2, 2))
    for call in (lambda: shift.estimate_weights(A, B), lambda: KLIEPWeights().fit(A, B)):
        with pytest.raises(ValueError, match=r"needs at least 5 of them, got n_test = 2; pass sigma"):
            call()
    with pytest.raises(ValueError, match=r"n_folds = 5 folds .* needs at least 5 of them, got n_test = 2"):
        shift.select_sigma(A, B)
    assert np.isfinite(shift.estimate_weights(A, B, sigma=1.0).weights).all()


@pytest.mark.parametrize("centers", [0, -3, 1000])
def test_select_sigma_refuses_the_center_counts_estimate_weights_refuses(centers):
    """#53 item 13: centers=0 was blamed on sigmas, -3 got NumPy's message and 1000 (> n_test) was accepted."""
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((30, 2)), rng.standard_normal((40, 2))
    message = r"centers must be between 1 and n_test = 40 when an int"
    with pytest.raises(ValueError, match=message):
        shift.estimate_weights(A, B, centers=centers, sigma=1.0)
    with pytest.raises(ValueError, match=message):
        shift.select_sigma(A, B, centers=centers)


@pytest.mark.parametrize("max_iter", [10**8, 10**9, 10**30])
def test_huge_max_iter_allocates_nothing_large(max_iter):
    """Before: 2.4 GB for 55 iterations at 1e8, MemoryError at 1e9, 'Maximum allowed dimension exceeded' at 1e30.

    Regression test of #19, item 10.
    """
    import tracemalloc

    d = datasets.covariate_shift_toy(seed=0)
    ref = shift.estimate_weights(d.X_train, d.X_test, sigma=0.3, max_iter=10**5)
    tracemalloc.start()
    try:
        iw = shift.estimate_weights(d.X_train, d.X_test, sigma=0.3, max_iter=max_iter)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20e6, peak  # the 300 x 300 kernel matrix and a 100 000-entry trace
    np.testing.assert_array_equal(iw.weights, ref.weights)
    assert iw.gap_history.size == ref.gap_history.size


def test_select_sigma_does_not_swallow_other_errors():
    """Before: threads=0 returned a width whose scores were all -inf, silently.

    Regression test of #19, item 8.
    """
    d = datasets.covariate_shift_toy(seed=0)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        shift.select_sigma(d.X_train, d.X_test, threads=0)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        shift.estimate_weights(d.X_train, d.X_test, sigma=None, threads=0)


def test_sigma_none_on_clumped_data_and_a_hopeless_grid():
    """Before: 'sigma = 0.0884 is too small ... increase sigma' from estimate_weights(sigma=None).

    Regression test of #19, item 8.
    """
    Xtr, Xte = np.zeros((20, 2)), np.full((50, 2), 100.0)  # two clumps of duplicates, 141 apart
    Xtr[::2] += 0.5
    Xte[::2] += 0.5
    iw = shift.estimate_weights(Xtr, Xte, sigma=None, random_state=0)
    assert iw.sigma > 1.0 and np.isfinite(iw.weights).all()
    np.testing.assert_allclose(iw.weights.mean(), 1.0, rtol=1e-9)
    with pytest.raises(ValueError, match="no width in sigmas"):
        shift.select_sigma(Xtr, Xte, sigmas=[1e-3, 1e-2], random_state=0)
