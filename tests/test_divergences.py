"""SM family between Gaussians against quadrature, Monte Carlo and the twin (acceptance 3), and its
properties on random pairs of Gaussians (hypothesis)."""


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from fastsm import divergences
from fastsm import divergences as D
from fastsm.reference import divergences as R


def random_pairs(rng, n, d):
    A = rng.normal(size=(n, d, d))
    B = rng.normal(size=(n, d, d))
    Sp = A @ A.transpose(0, 2, 1) / d + 0.5 * np.eye(d)
    Sq = B @ B.transpose(0, 2, 1) / d + 0.5 * np.eye(d)
    return rng.normal(size=(n, d)), Sp, rng.normal(size=(n, d)), Sq


def chernoff_1d(m1, s1, m2, s2, a):
    p, q = stats.norm(m1, s1), stats.norm(m2, s2)
    return integrate.quad(lambda t: p.pdf(t) ** a * q.pdf(t) ** (1 - a), -40, 40, epsabs=1e-14, epsrel=1e-13,
                          limit=400)[0]


CASES_1D = [(0.0, 1.0, 1.5, 2.0), (0.3, 0.5, -0.4, 1.3), (1.0, 2.0, 1.0, 0.7)]


@pytest.mark.parametrize(("m1", "s1", "m2", "s2"), CASES_1D)
@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.8, 1.5])
@pytest.mark.parametrize("form", ["cholesky", "nielsen"])
def test_chernoff_coefficient_matches_quadrature(m1, s1, m2, s2, alpha, form):
    if alpha > 1 and alpha * s2**2 + (1 - alpha) * s1**2 <= 0:
        pytest.skip("undefined")
    rho = chernoff_1d(m1, s1, m2, s2, alpha)
    ours = D.log_chernoff([m1], [[s1**2]], [m2], [[s2**2]], alpha, form=form)
    assert abs(ours - np.log(rho)) < 1e-10
    beta = 1.7
    assert abs(D.sm([m1], [[s1**2]], [m2], [[s2**2]], alpha, beta, form=form)
               - (rho ** ((1 - beta) / (1 - alpha)) - 1) / (beta - 1)) < 1e-10


def test_mathmd_anchor_value_and_ite_error():
    """docs/math.md §4: 1-D N(0,1) vs N(1.5, 4), a = b = 0.5: quadrature 0.40148; the ITE form gives 0.49951."""
    val = D.sm([0.0], [[1.0]], [1.5], [[4.0]], 0.5, 0.5)
    rho = chernoff_1d(0.0, 1.0, 1.5, 2.0, 0.5)
    assert abs(val - (rho - 1) / (0.5 - 1)) < 1e-12
    assert abs(val - 0.40148) < 5e-6
    # ITE's mean term uses Delta^T (a Sp^-1 + (1-a) Sq^-1) Delta instead of Delta^T S^-1 Delta
    a, b, sp, sq, delta = 0.5, 0.5, 1.0, 4.0, 1.5
    rho_ite = np.sqrt(sp ** (1 - a) * sq**a / (a * sq + (1 - a) * sp)) * np.exp(
        -a * (1 - a) / 2 * delta**2 * (a / sp + (1 - a) / sq))
    ite = (rho_ite ** ((1 - b) / (1 - a)) - 1) / (b - 1)
    assert abs(ite - 0.49951) < 5e-6
    assert abs(ite - val) > 0.09


def test_kl_matches_quadrature_1d():
    for m1, s1, m2, s2 in CASES_1D:
        p, q = stats.norm(m1, s1), stats.norm(m2, s2)
        ref = integrate.quad(lambda t, p=p, q=q: p.pdf(t) * (p.logpdf(t) - q.logpdf(t)), -40, 40, epsabs=1e-14,
                             limit=400)[0]
        assert abs(D.kl([m1], [[s1**2]], [m2], [[s2**2]]) - ref) < 1e-10


def test_monte_carlo_3d():
    rng = np.random.default_rng(7)
    mp, Sp, mq, Sq = (x[0] for x in random_pairs(rng, 1, 3))
    n = 2_000_000
    xs = rng.multivariate_normal(mp, Sp, size=n)
    lp = stats.multivariate_normal(mp, Sp).logpdf(xs)
    lq = stats.multivariate_normal(mq, Sq).logpdf(xs)
    kl_mc = np.mean(lp - lq)
    se = np.std(lp - lq) / np.sqrt(n)
    assert abs(D.kl(mp, Sp, mq, Sq) - kl_mc) < 4 * se
    for a in (0.3, 0.7):
        w = np.exp((a - 1) * (lp - lq))  # rho_a = E_p[(q/p)^(1-a)]
        rho_mc, se = w.mean(), w.std() / np.sqrt(n)
        assert abs(np.exp(D.log_chernoff(mp, Sp, mq, Sq, a)) - rho_mc) < 4 * se


def test_limits():
    rng = np.random.default_rng(3)
    mp, Sp, mq, Sq = random_pairs(rng, 6, 4)
    a = 0.35
    # beta -> 1 gives Renyi
    for eps in (1e-4, -1e-4):
        np.testing.assert_allclose(D.sm(mp, Sp, mq, Sq, a, 1 + eps), D.renyi(mp, Sp, mq, Sq, a), rtol=1e-3)
    np.testing.assert_allclose(D.sm(mp, Sp, mq, Sq, a, 1.0), D.renyi(mp, Sp, mq, Sq, a), rtol=1e-14)
    # beta = alpha gives Tsallis
    np.testing.assert_allclose(D.sm(mp, Sp, mq, Sq, a, a), D.tsallis(mp, Sp, mq, Sq, a), rtol=1e-12)
    # alpha, beta -> 1 gives KL
    np.testing.assert_allclose(D.sm(mp, Sp, mq, Sq, 1 - 1e-6, 1 - 1e-6), D.kl(mp, Sp, mq, Sq), rtol=1e-4)
    np.testing.assert_allclose(D.renyi(mp, Sp, mq, Sq, 1 + 1e-6), D.kl(mp, Sp, mq, Sq), rtol=1e-4)


def test_bhattacharyya_is_half_renyi_not_twice():
    mp, Sp, mq, Sq = (x[0] for x in random_pairs(np.random.default_rng(5), 1, 1))
    rho = chernoff_1d(mp[0], np.sqrt(Sp[0, 0]), mq[0], np.sqrt(Sq[0, 0]), 0.5)
    b_true = -np.log(rho)
    assert abs(D.bhattacharyya(mp, Sp, mq, Sq) - b_true) < 1e-10
    r_half = D.renyi(mp, Sp, mq, Sq, 0.5)
    assert abs(r_half / 2 - b_true) < 1e-10
    # [SM] §2.1 states B = 2 R_{0.5}: off by a factor 4
    assert abs(2 * r_half - b_true) > 0.5 * b_true


@pytest.mark.parametrize("d", [1, 3, 8])
def test_forms_and_twin_agree_on_stacks(d):
    mp, Sp, mq, Sq = random_pairs(np.random.default_rng(d), 7, d)
    for a in (0.2, 0.5, 0.9):
        c = D.log_chernoff(mp, Sp, mq, Sq, a)
        np.testing.assert_allclose(D.log_chernoff(mp, Sp, mq, Sq, a, form="nielsen"), c, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(R.log_chernoff(mp, Sp, mq, Sq, a), c, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(D.sm(mp, Sp, mq, Sq, a, 0.6), R.sm(mp, Sp, mq, Sq, a, 0.6), rtol=1e-10)
    np.testing.assert_allclose(D.kl(mp, Sp, mq, Sq), R.kl(mp, Sp, mq, Sq), rtol=1e-10)


def test_broadcasting_and_scalar_output():
    mp, Sp, mq, Sq = random_pairs(np.random.default_rng(1), 4, 2)
    full = D.kl(mp, Sp, mq, Sq)
    assert full.shape == (4,)
    # one q against a stack of p
    one = D.kl(mp, Sp, mq[0], Sq[0])
    np.testing.assert_allclose(one, [D.kl(mp[i], Sp[i], mq[0], Sq[0]) for i in range(4)])
    assert isinstance(D.kl(mp[0], Sp[0], mq[0], Sq[0]), float)
    grid = D.kl(mp[:, None], Sp[:, None], mq[None], Sq[None])
    assert grid.shape == (4, 4)
    np.testing.assert_allclose(np.diag(grid), full)
    assert np.all(np.abs(D.kl(mp, Sp, mp, Sp)) < 1e-12)


def test_bad_input():
    m, S = np.zeros(2), np.eye(2)
    with pytest.raises(ValueError, match="S_q is not symmetric positive definite"):
        D.kl(m, S, m, -S)
    with pytest.raises(ValueError, match="S_p is not symmetric positive definite"):
        D.sm(m, np.diag([1.0, -1.0]), m, S, 0.5, 0.5)
    with pytest.raises(ValueError, match="S_p must be symmetric"):
        D.kl(m, np.array([[1.0, 0.5], [0.0, 1.0]]), m, S)
    with pytest.raises(ValueError, match="mu_q must have dimension 2"):
        D.kl(m, S, np.zeros(3), S)
    with pytest.raises(ValueError, match="S_q must have trailing shape"):
        D.kl(m, S, m, np.eye(3))
    with pytest.raises(ValueError, match="mu_p contains NaN"):
        D.kl([np.nan, 0.0], S, m, S)
    with pytest.raises(ValueError, match="alpha must differ from 1"):
        D.renyi(m, S, m, S, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        D.renyi(m, S, m, S, -0.5)
    with pytest.raises(ValueError, match="beta"):
        D.sm(m, S, m, S, 0.5, 0.0)
    with pytest.raises(ValueError, match="alpha > 1"):
        D.renyi(m, np.eye(2) * 10, m, np.eye(2), 3.0)
    with pytest.raises(ValueError, match="form"):
        D.renyi(m, S, m, S, 0.5, form="lu")
    with pytest.raises(ValueError, match="do not broadcast"):
        D.kl(np.zeros((3, 2)), S, np.zeros((4, 2)), S)


def test_sm_divergence_is_continuous_at_alpha_one():
    """Regression test of #6, item 7."""
    mp, Sp, mq, Sq = np.zeros(1), np.eye(1), np.array([1.5]), np.array([[4.0]])
    kl = divergences.kl(mp, Sp, mq, Sq)
    for a in (1 - 1e-16, 1 - 1e-12, 1 + 1e-12):
        assert abs(divergences.renyi(mp, Sp, mq, Sq, a) - kl) < 1e-9
        np.testing.assert_allclose(divergences.sm(mp, Sp, mq, Sq, a, 1.5), np.expm1(0.5 * kl) / 0.5, rtol=1e-9)
    # the two evaluation paths meet at |1 - a| = NEAR_ONE: R_a is smooth (slope ~0.2 here)
    lo = divergences.renyi(mp, Sp, mq, Sq, 1 - (divergences.NEAR_ONE + 1e-9))
    hi = divergences.renyi(mp, Sp, mq, Sq, 1 - (divergences.NEAR_ONE - 1e-9))
    assert abs(lo - hi) < 1e-9
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((2, 3, 3))
    Sp3, Sq3 = A @ A.T + np.eye(3), B @ B.T + np.eye(3)
    m3, n3 = rng.standard_normal((2, 3))
    np.testing.assert_allclose(divergences.renyi(m3, Sp3, n3, Sq3, 1 - 1e-14), divergences.kl(m3, Sp3, n3, Sq3),
                               rtol=1e-10)


def test_broadcast_divergences_are_chunked(monkeypatch):
    """Regression test of #6, item 15."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n, d = 300, 3
    A = rng.standard_normal((n, d, d))
    S = A @ A.transpose(0, 2, 1) + np.eye(d)
    mu = rng.standard_normal((n, d))
    full = divergences.sm(mu[:, None], S[:, None], mu[None], S[None], 0.5, 1.5)
    monkeypatch.setattr(divergences, "CHUNK", 1000)
    tracemalloc.start()
    chunked = divergences.sm(mu[:, None], S[:, None], mu[None], S[None], 0.5, 1.5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(chunked, full)
    # output 0.7 MB; materialised inputs would be 2 * 90 000 * 12 doubles = 17 MB
    assert peak < 4e6
    np.testing.assert_allclose(divergences.kl(mu[:, None], S[:, None], mu[None], S[None])[3, 7],
                               divergences.kl(mu[3], S[3], mu[7], S[7]))


# Properties, on random pairs of Gaussians (hypothesis)

@st.composite
def gaussian_pair(draw):
    d = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.floats(0.05, 20.0))
    rng = np.random.default_rng(seed)
    A, B = rng.normal(size=(2, d, d))
    Sp = A @ A.T / d + 0.1 * np.eye(d)
    Sq = scale * (B @ B.T / d + 0.1 * np.eye(d))
    return rng.normal(size=d), Sp, 3 * rng.normal(size=d), Sq


@settings(max_examples=60, deadline=None)
@given(gaussian_pair(), st.floats(0.05, 0.95), st.floats(0.1, 3.0))
def test_divergences_are_nonnegative_and_zero_on_identical(pair, alpha, beta):
    mp, Sp, mq, Sq = pair
    assert D.kl(mp, Sp, mq, Sq) >= -1e-12
    assert D.renyi(mp, Sp, mq, Sq, alpha) >= -1e-12
    assert D.sm(mp, Sp, mq, Sq, alpha, beta) >= -1e-12
    assert D.bhattacharyya(mp, Sp, mq, Sq) >= -1e-12
    for f in (D.kl, D.bhattacharyya):
        assert abs(f(mp, Sp, mp, Sp)) < 1e-10
    assert abs(D.sm(mp, Sp, mp, Sp, alpha, beta)) < 1e-10


@settings(max_examples=60, deadline=None)
@given(gaussian_pair(), st.floats(0.05, 0.45), st.floats(0.05, 0.45))
def test_renyi_is_nondecreasing_in_alpha_and_bounded_by_kl(pair, a1, da):
    mp, Sp, mq, Sq = pair
    a2 = a1 + da
    r1, r2 = D.renyi(mp, Sp, mq, Sq, a1), D.renyi(mp, Sp, mq, Sq, a2)
    assert r1 <= r2 + 1e-9 * max(1.0, abs(r2))
    assert r2 <= D.kl(mp, Sp, mq, Sq) * (1 + 1e-9) + 1e-12


@settings(max_examples=40, deadline=None)
@given(gaussian_pair(), st.floats(0.05, 0.95))
def test_cholesky_and_nielsen_forms_agree(pair, alpha):
    mp, Sp, mq, Sq = pair
    a = D.log_chernoff(mp, Sp, mq, Sq, alpha)
    b = D.log_chernoff(mp, Sp, mq, Sq, alpha, form="nielsen")
    assert abs(a - b) <= 1e-8 * max(1.0, abs(a))
