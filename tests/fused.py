"""The kernels' multiply-subtract, exactly, for references: ``c - a b`` rounded once where their compile target
fuses (:func:`fastsm._kernels.fma.fused`), else a rounded product and a rounded difference."""

from __future__ import annotations

import math

import numpy as np

from fastsm._kernels.fma import fused


def _halves(a):
    """``a = hi + lo`` with ``hi`` of at most 26 significant bits (Dekker's split): products of halves are exact."""
    t = a * 134217729.0
    hi = t - (t - a)
    return hi, a - hi


_FSUM = np.frompyfunc(lambda *terms: math.fsum(terms), 5, 1)


def msub(c, a, b):
    """``c - a b`` as the kernels compute it: rounded once where they fuse, else twice."""
    c, a, b = np.broadcast_arrays(c, a, b)
    if not fused():
        return c - a * b
    (ah, al), (bh, bl) = _halves(a), _halves(b)
    return _FSUM(c, -(ah * bh), -(ah * bl), -(al * bh), -(al * bl)).astype(np.float64)
