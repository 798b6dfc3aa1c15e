"""tests/fused.py's single-rounding multiply-subtract (the exact reference of the factorisation's and the row
loops' tests) against ``math.fsum`` of the exact partial products, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fused import exact_msub, halves


def _fsum_msub(c, a, b):
    """``c - a b`` rounded once: the four products of Dekker halves are exact, ``math.fsum`` rounds their sum
    with ``c`` once."""
    (ah, al), (bh, bl) = halves(a), halves(b)
    terms = zip(c, -(ah * bh), -(ah * bl), -(al * bh), -(al * bl), strict=True)
    return np.array([math.fsum(t) for t in terms])


def _cases(rng, n):
    a = rng.standard_normal(n)
    b = rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))
    yield "random", rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n)), a, b
    # c within a few units of the last place of a b: the difference is its product's rounding error
    yield "cancelling", a * b * (1 + 1e-15 * rng.standard_normal(n)), a, b
    yield "tiny remainders", a * b + np.ldexp(rng.integers(-3, 4, n).astype(float), -60), a, b
    # integers: c - a b exactly halfway between two doubles in about half the cases (ties to even)
    ai = rng.integers(1, 2**26, n).astype(float)
    bi = rng.integers(1, 2**27, n).astype(float)
    yield "ties", np.ldexp(rng.integers(2**52, 2**53, n).astype(float), 2), ai, bi
    yield "integers", rng.integers(-2**53, 2**53, n).astype(float), ai, bi
    # a b within far less than its last place of half an ulp of c: rounding the two tails to nearest first
    # would leave an exact tie (ties to even); the exact value is off it
    cc = np.ldexp(rng.uniform(1, 2, n), rng.integers(-8, 8, n))
    at = rng.uniform(1, 2, n)
    bt = -np.copysign(np.ldexp(1.0, np.frexp(cc)[1] - 54), rng.standard_normal(n)) / at
    yield "near ties", cc, at, bt
    yield "signed zeros", np.where(rng.random(n) < 0.5, 0.0, -0.0), np.zeros(n), b


@pytest.mark.parametrize("seed", [0, 1])
def test_the_emulated_single_rounding_is_fsums_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    for name, c, a, b in _cases(rng, 20000):
        got, want = exact_msub(c, a, b), _fsum_msub(c, a, b)
        differ = np.flatnonzero(got.view(np.int64) != want.view(np.int64))
        assert differ.size == 0, (name, c[differ[:3]], a[differ[:3]], b[differ[:3]])


def test_a_product_rounded_first_is_told_apart():
    """The reference is not a rounded product and difference: on cancelling operands they differ."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    c = a * b
    assert np.count_nonzero(exact_msub(c, a, b) != c - a * b) > 900
