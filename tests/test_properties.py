"""Property-based checks of the divergences (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fastsm import divergences as D


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
