"""fastsm._lapack: the inverse form's triangular inverses by LAPACK's GIL-free ``dtrtri``, against SciPy's
triangular solve and a long-double reference."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from fastsm import _lapack
from fastsm._threads import thread_limits
from tests.longdouble import HAS_LONGDOUBLE, _chol, rbf


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 65, 257])
def test_triangular_inverse_against_a_triangular_solve(n):
    """Zeros above the diagonal, the upper triangle of the input not read, the inverse of a
    well-conditioned factor to 1e-14 of SciPy's solve; ``inverse_transposed`` is its transpose, bitwise."""
    rng = np.random.default_rng(n)
    L = np.tril(rng.standard_normal((n, n))) / np.sqrt(n) + 2.0 * np.eye(n)
    garbage = np.where(np.tri(n, dtype=bool), L, np.nan)
    with thread_limits(1):
        W = _lapack.triangular_inverse(garbage)
        Vt = _lapack.inverse_transposed(garbage)
    assert W.flags.c_contiguous and W.shape == (n, n)
    np.testing.assert_array_equal(np.triu(W, 1), 0.0)
    np.testing.assert_array_equal(Vt, W.T)
    ref = solve_triangular(L, np.eye(n), lower=True)
    np.testing.assert_allclose(W, ref, rtol=0, atol=1e-14 * np.abs(ref).max())


@pytest.mark.skipif(not HAS_LONGDOUBLE, reason="np.longdouble is float64 on this platform")
@pytest.mark.parametrize("n, dx, gamma, lam", [(200, 1, 2.0, 1e-4), (300, 2, 1.0, 1e-4)])
def test_quadratic_forms_from_the_inverse_against_long_double(n, dx, gamma, lam):
    """What an inverse factor is for, ``eta = 1 + lambda - ||W k||^2`` at the paper's lambda = 1e-4,
    against long double (measured on the AVX-512 machine: largest relative errors 4.3e-11 at n = 200,
    3.5e-11 at n = 300; allowed: 1e-9)."""
    rng = np.random.default_rng(7)
    Z, T = rng.uniform(-2, 2, (n, dx)), rng.uniform(-2, 2, (200, dx))
    K = rbf(Z, Z, gamma) + lam * np.eye(n)
    k = rbf(T, Z, gamma)
    with thread_limits(1):
        W = _lapack.triangular_inverse(np.linalg.cholesky(K))
    KL = rbf(Z, Z, gamma, np.longdouble) + np.longdouble(lam) * np.eye(n, dtype=np.longdouble)
    LL = _chol(KL)
    S = np.zeros((n, k.shape[0]), dtype=np.longdouble)
    kt = rbf(T, Z, gamma, np.longdouble).T
    for i in range(n):
        S[i] = (kt[i] - LL[i, :i] @ S[:i]) / LL[i, i]
    eta_ref = 1 + np.longdouble(lam) - (S**2).sum(axis=0)
    eta = 1.0 + lam - ((k @ W.T) ** 2).sum(axis=1)
    assert float(np.max(np.abs(eta - eta_ref) / eta_ref)) <= 1e-9
