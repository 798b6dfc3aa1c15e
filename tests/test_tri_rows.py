"""The row loops (:mod:`fastsm._kernels.tri_rows`) against plain NumPy sweeps, bitwise.

The NumPy references take the factor's pivots one at a time (ascending forward, descending backward), each
step one multiply-subtract per entry, in the order the module documents (a solved entry: the remaining value
times the pivot's rounded reciprocal; a product's coefficient: ``-x[p]``): rounded once where the kernels'
compile target has FMA (:func:`fastsm._kernels.fma.fused`; the reference then computes ``c - a b`` exactly and
rounds it once: ``tests/fused.py``), else a rounded product and a rounded difference. The kernels do exactly
that (no reassociation) whether a row is swept alone (four pivots per sweep) or in a set of four (four pivots
per sweep) inside a group of :data:`~fastsm._kernels.tri_rows.GROUP` rows, from order
:data:`~fastsm._kernels.tri_rows.BLOCKED_FROM` on with each block's terms taken off the later entries by
register tiles, so every row's result is fixed by its own data whatever the batch. Orders ``n`` below, above
and at multiples of four and eight, below and in the blocked range (tails of fewer than eight entries, a last
partial vector, a partial last block), and row counts across the sets and groups, are checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from fused import msub

from fastsm._kernels.tri_rows import GROUP, MULTIPLY_PLAN, SOLVE_PLAN, run_products, symmetric_storage


def _solve_forward(L, X):
    Y = X.copy()
    for j in range(L.shape[0]):
        Y[:, j] = Y[:, j] * (1.0 / L[j, j])
        Y[:, j + 1:] = msub(Y[:, j + 1:], Y[:, j:j + 1], L[j + 1:, j])
    return Y


def _solve_backward(L, X):
    Y = X.copy()
    for i in range(L.shape[0] - 1, -1, -1):
        Y[:, i] = Y[:, i] * (1.0 / L[i, i])
        Y[:, :i] = msub(Y[:, :i], Y[:, i:i + 1], L[i, :i])
    return Y


def _product_forward(M, X):
    Y = np.zeros_like(X)
    for p in range(M.shape[0]):
        a = -X[:, p]
        Y[:, p] = msub(Y[:, p], a, M[p, p])
        Y[:, p + 1:] = msub(Y[:, p + 1:], a[:, None], M[p + 1:, p])
    return Y


def _product_backward(M, X):
    Y = np.zeros_like(X)
    for p in range(M.shape[0] - 1, -1, -1):
        a = -X[:, p]
        Y[:, p] = msub(Y[:, p], a, M[p, p])
        Y[:, :p] = msub(Y[:, :p], a[:, None], M[p, :p])
    return Y


def _factor(n, rng):
    B = rng.standard_normal((n, n))
    return np.linalg.cholesky(B @ B.T / n + np.eye(n))


@pytest.mark.parametrize("n", [1, 3, 4, 7, 8, 9, 13, 15, 16, 17, 24, 64, 128, 133, 136, 203])
@pytest.mark.parametrize("h", [1, 3, 4, 5, 9, GROUP + 7])
@pytest.mark.parametrize("solve", [True, False])
def test_rows_are_the_pivot_sweeps(n, h, solve):
    rng = np.random.default_rng(n * 10 + h)
    L = _factor(n, rng)
    S = symmetric_storage(L)
    X = rng.standard_normal((h + 2, n))
    refs = ((True, _solve_forward), (False, _solve_backward)) if solve else \
        ((True, _product_forward), (False, _product_backward))
    for forward, ref in refs:
        work = np.full((2, h + 2, n), np.nan)  # rows past h: untouched
        work[0, :h] = X[1:h + 1]
        run_products(work, S, S, np.array([[0, 0, int(forward), 1]], dtype=np.int64), h,
                     SOLVE_PLAN if solve else MULTIPLY_PLAN)
        P = np.vstack([np.full(n, np.nan), work[1, :h], np.full(n, np.nan)])
        np.testing.assert_array_equal(P[1:h + 1], ref(L, X[1:h + 1]))
        assert np.isnan(work[1, h:]).all()  # rows outside 0 .. h-1 untouched
        dense = L if forward else L.T
        want = np.linalg.solve(dense, X[1:h + 1].T).T if solve else X[1:h + 1] @ dense.T
        np.testing.assert_allclose(P[1:h + 1], want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
