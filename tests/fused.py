"""The kernels' multiply-subtract, exactly, for references: ``c - a b`` rounded once where their compile target
fuses (:func:`fastsm._kernels.fma.fused`), else a rounded product and a rounded difference.

The single rounding is emulated in NumPy float64 without an FMA instruction: the product split exactly into two
doubles (Dekker), its head added exactly (Knuth's two-sum), the two tails added with rounding to odd, and the sum
rounded once to nearest (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
using rounding to odd", IEEE Trans. Computers 57(4), 2008, Algorithm 5).  Exact for operands whose product and
partial products neither overflow nor fall below the normal range, as in every test that uses it;
``test_fused.py`` checks it bitwise against ``math.fsum`` of the exact partial products.
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.fma import fused

_SPLIT = 134217729.0  # 2^27 + 1


def halves(a):
    """``a = hi + lo`` with ``hi`` of at most 26 significant bits (Dekker's split): products of halves are exact."""
    t = a * _SPLIT
    hi = t - (t - a)
    return hi, a - hi


def _two_product(a, b):
    """``(p, e)`` with ``p = fl(a b)`` and ``p + e = a b`` exactly (Dekker)."""
    p = a * b
    (ah, al), (bh, bl) = halves(a), halves(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _two_sum(a, b):
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _sum_to_odd(a, b):
    """``a + b`` rounded to odd: exact if representable, else whichever neighbour has an odd last bit."""
    s, e = _two_sum(a, b)
    even = (np.asarray(s).view(np.int64) & 1) == 0
    step = np.nextafter(s, np.copysign(np.inf, e))
    return np.where(even & (e != 0), step, s)


def exact_msub(c, a, b):
    """``c - a b`` rounded once to nearest (float64 arrays of one shape)."""
    ph, pl = _two_product(-a, b)
    sh, sl = _two_sum(c, ph)
    return sh + _sum_to_odd(sl, pl)


def msub(c, a, b):
    """``c - a b`` as the kernels compute it: rounded once where they fuse, else twice."""
    c, a, b = (np.asarray(x, dtype=np.float64) for x in np.broadcast_arrays(c, a, b))
    return exact_msub(c, a, b) if fused() else c - a * b
