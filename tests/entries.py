"""Python entries to internal kernels (compiled without a CPython wrapper, ``config.kernel(internal=True)``)
that the tests call directly: each a kernel of the tests' own, so the package compiles no wrapper
that only tests would use."""

from __future__ import annotations

import numba
import numpy as np

from fastsm._kernels.curvature import seed_inverse as _seed_inverse
from fastsm._kernels.hessian import hessian_rows as _hessian_rows
from fastsm._kernels.points import _column_bounds, _column_extremes
from fastsm._kernels.quasi_newton import new_iterates


@numba.njit(cache=True)
def hessian_rows(obj, rows, Yt, out, work, H, jprod, held):
    """:func:`fastsm._kernels.hessian.hessian_rows`."""
    _hessian_rows(obj, rows, Yt, out, work, H, jprod, held)


@numba.njit(cache=True)
def column_extremes(Y):
    """:func:`fastsm._kernels.points._column_extremes`."""
    return _column_extremes(Y)


@numba.njit(cache=True)
def column_bounds(Y, ext, held, r, lo, hi):
    """:func:`fastsm._kernels.points._column_bounds`."""
    _column_bounds(Y, ext, held, r, lo, hi)


@numba.njit(cache=True)
def seed_inverse(Hx, n_iter):
    """:func:`fastsm._kernels.curvature.seed_inverse` of a fresh point at iteration ``n_iter``: its BFGS
    matrix afterwards and whether the Hessian seeded it."""
    it = new_iterates(np.zeros((1, Hx.shape[0])))
    it.n_iter[0] = n_iter
    _seed_inverse(0, Hx, it)
    return it.H[0].copy(), it.h_exact[0]
