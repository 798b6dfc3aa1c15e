"""The row loops' substitutions (:mod:`fastsm._kernels.tri_rows`) against plain NumPy sweeps, bitwise.

The NumPy references take the factor's columns (forward) or rows (backward) one at a time, each
step one rounded product and one rounded difference per entry, in the order the module
documents (a solved entry: the remaining value times the pivot's rounded reciprocal): the
kernels do exactly that (no fused multiply-add, no reassociation), for one row and for four rows
per sweep, so every row's result is fixed by its own data whatever the batch.  The
one-row substitutions take eight columns of the factor per sweep (every order ``n`` below, above
and at multiples of eight is checked).
"""

from __future__ import annotations

import numpy as np
import pytest

from fastsm._kernels.tri_rows import rows_product, symmetric_storage


def _solve_forward(L, X):
    Y = X.copy()
    for j in range(L.shape[0]):
        Y[:, j] = Y[:, j] * (1.0 / L[j, j])
        Y[:, j + 1:] -= Y[:, j:j + 1] * L[j + 1:, j]
    return Y


def _solve_backward(L, X):
    Y = X.copy()
    for i in range(L.shape[0] - 1, -1, -1):
        Y[:, i] = Y[:, i] * (1.0 / L[i, i])
        Y[:, :i] -= Y[:, i:i + 1] * L[i, :i]
    return Y


def _factor(n, rng):
    B = rng.standard_normal((n, n))
    return np.linalg.cholesky(B @ B.T / n + np.eye(n))


@pytest.mark.parametrize("n", [1, 3, 4, 7, 8, 9, 13, 15, 16, 17, 24, 64, 203])
@pytest.mark.parametrize("h", [1, 3, 4, 5, 9])
def test_substitutions_are_the_column_and_row_sweeps(n, h):
    rng = np.random.default_rng(n * 10 + h)
    L = _factor(n, rng)
    S = symmetric_storage(L)
    X = rng.standard_normal((h + 2, n))
    for forward, ref in ((True, _solve_forward), (False, _solve_backward)):
        P = np.full_like(X, np.nan)
        rows_product(X, 1, h, S, forward, P, True)
        np.testing.assert_array_equal(P[1:h + 1], ref(L, X[1:h + 1]))
        assert np.isnan(P[0]).all() and np.isnan(P[h + 1]).all()  # rows outside r0 .. r0+h-1 untouched
