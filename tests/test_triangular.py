"""fastsm._kernels.triangular.tri_inverse: the inverse of a Cholesky factor by products of halves,
against SciPy's triangular solve, LAPACK's dtrtri and a long-double reference."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from fastsm import _lapack, config
from fastsm._kernels.triangular import LEAF, tri_inverse
from fastsm._threads import thread_limits
from tests.longdouble import HAS_LONGDOUBLE, _chol, rbf


def _dtrtri(L: np.ndarray) -> np.ndarray:
    n = L.shape[0]
    a = np.array(L, order="F")
    nn, info = ctypes.c_int(n), ctypes.c_int(0)
    _lapack._dtrtri(b"L", b"N", ctypes.byref(nn), a.ctypes.data_as(_lapack._dbl_p), ctypes.byref(nn),
                    ctypes.byref(info))
    assert info.value == 0
    return np.tril(a)


@pytest.mark.parametrize("n", [1, 2, LEAF - 1, LEAF, LEAF + 1, 2 * LEAF + 1, 100, 257])
def test_tri_inverse_against_a_triangular_solve(n):
    """Every size around the leaf and odd halvings: zeros above the diagonal, the upper triangle of the
    input not read, and the inverse of a well-conditioned factor to 1e-14 of SciPy's solve."""
    rng = np.random.default_rng(n)
    L = np.tril(rng.standard_normal((n, n))) / np.sqrt(n) + 2.0 * np.eye(n)
    garbage = np.where(np.tri(n, dtype=bool), L, np.nan)
    with thread_limits(1):
        W = tri_inverse(garbage)
        W_f = tri_inverse(np.asfortranarray(garbage))  # potrf's Fortran buffer, as potrf_trtri passes it
    assert W.flags.c_contiguous and W.shape == (n, n)
    np.testing.assert_array_equal(W_f, W)
    np.testing.assert_array_equal(np.triu(W, 1), 0.0)
    ref = solve_triangular(L, np.eye(n), lower=True)
    np.testing.assert_allclose(W, ref, rtol=0, atol=1e-14 * np.abs(ref).max())


@pytest.mark.skipif(not HAS_LONGDOUBLE, reason="np.longdouble is float64 on this platform")
@pytest.mark.parametrize("n, dx, gamma, lam", [(200, 1, 2.0, 1e-4), (300, 2, 1.0, 1e-4)])
def test_quadratic_forms_as_accurate_as_with_dtrtri(n, dx, gamma, lam):
    """What the inverse factor is for, ``eta = 1 + lambda - ||W k||^2`` at the paper's lambda = 1e-4 (the
    accuracy issue's regime), against long double: as close as with LAPACK's dtrtri inverse (measured on
    the AVX-512 machine: largest relative errors 3.7e-11 vs 4.4e-11 at n = 200, 3.8e-11 vs 3.4e-11 at
    n = 300; allowed: 3x dtrtri's, and 1e-9 absolutely)."""
    rng = np.random.default_rng(7)
    Z, T = rng.uniform(-2, 2, (n, dx)), rng.uniform(-2, 2, (200, dx))
    K = rbf(Z, Z, gamma) + lam * np.eye(n)
    k = rbf(T, Z, gamma)
    with thread_limits(1):
        L = np.linalg.cholesky(K)
        W_new, W_lapack = tri_inverse(L), _dtrtri(L)
    KL = rbf(Z, Z, gamma, np.longdouble) + np.longdouble(lam) * np.eye(n, dtype=np.longdouble)
    LL = _chol(KL)
    S = np.zeros((n, k.shape[0]), dtype=np.longdouble)
    kt = rbf(T, Z, gamma, np.longdouble).T
    for i in range(n):
        S[i] = (kt[i] - LL[i, :i] @ S[:i]) / LL[i, i]
    eta_ref = 1 + np.longdouble(lam) - (S**2).sum(axis=0)

    def worst(W):
        eta = 1.0 + lam - ((k @ W.T) ** 2).sum(axis=1)
        return float(np.max(np.abs(eta - eta_ref) / eta_ref))

    new, lapack = worst(W_new), worst(W_lapack)
    assert new <= max(3.0 * lapack, 1e-9), (new, lapack)


def test_potrf_trtri_uses_it_up_to_the_threshold(monkeypatch):
    """potrf_trtri's W is tri_inverse's (bitwise) up to config.TRI_INVERSE_MAX_N, dtrtri's beyond."""
    rng = np.random.default_rng(3)
    for n in (5, 64):
        A = rng.standard_normal((n, n + 2))
        K = A @ A.T / n + 1e-2 * np.eye(n)
        with thread_limits(1):
            L, W, _, info = _lapack.potrf_trtri(K)
            assert info == 0
            np.testing.assert_array_equal(W, tri_inverse(L))
            none, W2, _, _ = _lapack.potrf_trtri(K, want_L=False)
            assert none is None
            np.testing.assert_array_equal(W2, W)
    monkeypatch.setattr(config, "TRI_INVERSE_MAX_N", 4)
    with thread_limits(1):
        L, W, _, _ = _lapack.potrf_trtri(K)
        np.testing.assert_array_equal(W, _dtrtri(L))
