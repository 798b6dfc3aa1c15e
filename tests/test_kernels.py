"""Numba kernels against plain NumPy/SciPy and dense references."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from fastsm._kernels.rank_one import bordered_inverse, sumsq_rows
from fastsm._kernels.rbf import combine_weights, contract_jacobian, contract_lanes, rbf_cross, rbf_gram
from tests import naive
from tests.naive import fd_gradient, rbf


def test_rbf_gram_and_cross(rng):
    Z = rng.normal(size=(30, 3))
    A = rng.normal(size=(7, 3))
    K = rbf_gram(Z, 0.7, 1e-3)
    np.testing.assert_allclose(K, np.exp(-0.7 * cdist(Z, Z, "sqeuclidean")) + 1e-3 * np.eye(30), rtol=1e-13)
    out = np.empty((7, 30))
    rbf_cross(A, Z, 0.7, out)
    np.testing.assert_allclose(out, rbf(A, Z, 0.7), rtol=1e-13)


@pytest.mark.parametrize("n, d", [(1, 4), (2, 4), (9, 4), (33, 4), (33, 1), (17, 5), (203, 12), (200, 10)])
def test_gram_rows_everywhere_alike(rng, n, d):
    """The vectorised rows (distances over a transposed block, the polynomial exponential) against
    SciPy and libm; the parallel Gram, the Cholesky-form Gram (eight-lane vectors, chunks of
    ``GRAM_CHUNK`` entries: 203 points span five) and the cross rows bitwise alike, and the
    distances bitwise NumPy's sum over the coordinates in order."""
    from fastsm._kernels.cholesky import gram_into
    from fastsm._kernels.rbf import exp_neg_scaled

    Z = rng.normal(size=(n, d))
    Z[-1] += 60.0  # exp(-0.7 * ~1.4e4) underflows: exactly 0 (the kernel's floor is exp(-700))
    K = rbf_gram(Z, 0.7, 1e-3)
    ref = np.exp(-0.7 * cdist(Z, Z, "sqeuclidean")) + 1e-3 * np.eye(n)
    np.testing.assert_allclose(K, ref, rtol=4e-15, atol=0)
    np.testing.assert_array_equal(K, K.T)
    G = np.empty((n, n))
    gram_into(Z, 0.7, 1e-3, np.ones(1), False, G)  # the upper triangle and diagonal only
    np.testing.assert_array_equal(np.triu(G), np.triu(K))
    dist = np.zeros((n, n))
    for c in range(d):
        dist = dist + (Z[:, None, c] - Z[None, :, c]) ** 2
    iu = np.triu_indices(n, 1)
    expected = dist[iu].copy()
    exp_neg_scaled(expected, 0.7, np.empty(expected.size), np.empty(expected.size))
    np.testing.assert_array_equal(G[iu], expected)
    out = np.empty((n, n))
    rbf_cross(Z, Z, 0.7, out)  # a point against itself is 1, against others the Gram's entries
    np.testing.assert_array_equal(out - np.diag(np.diag(out)), K - np.diag(np.diag(K)))
    np.testing.assert_array_equal(np.diag(out), 1.0)


@pytest.mark.parametrize("dy", [1, 3, 16])
def test_jacobian_matches_finite_differences(rng, dy):
    Z = rng.normal(size=(25, dy))
    y = rng.normal(size=dy) * 0.3
    gamma = 0.5 / dy
    k = rbf(y[None], Z, gamma)[0]
    J = naive.rbf_jacobian(y, Z, k, gamma)
    for i in range(0, 25, 6):
        fd = fd_gradient(lambda v, i=i: rbf(v[None], Z, gamma)[0, i], y, 1e-6)
        np.testing.assert_allclose(J[i], fd, rtol=1e-7, atol=1e-10)


def test_contract_jacobian_equals_explicit_product(rng):
    Z = rng.normal(size=(40, 5))
    y = rng.normal(size=5)
    k = rbf(y[None], Z, 0.3)[0]
    v1, v2, v3 = rng.normal(size=(3, 40))
    g = np.empty(5)
    contract_jacobian(y, Z, k, 0.3, (0.5, -2.0, 3.0), (v1, v2, v3), True, g)
    J = naive.rbf_jacobian(y, Z, k, 0.3)
    np.testing.assert_allclose(g, (0.5 * v1 - 2.0 * v2 + 3.0 * v3) @ J, rtol=1e-12, atol=1e-14)


def _lanes_in_python(y, Zt, k, gamma, c1, v1, c2, v2):
    """contract_lanes's order of operations, one Python float (IEEE double) operation at a time."""
    d, n = Zt.shape
    w = [(c1 * float(v1[i]) + c2 * float(v2[i])) * float(k[i]) for i in range(n)]
    m = n - n % 8

    def lane_sum(term):
        acc = [0.0] * 8
        for i in range(0, m, 8):
            for lane in range(8):
                acc[lane] = acc[lane] + term(i + lane)
        t = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
        for i in range(m, n):
            t += term(i)
        return t

    s = lane_sum(lambda i: w[i])
    return np.array([-2.0 * gamma * (float(y[c]) * s - lane_sum(lambda i, c=c: w[i] * float(Zt[c, i])))
                     for c in range(d)])


@pytest.mark.parametrize("n, d", [(1, 1), (8, 4), (13, 5), (203, 17), (1000, 16)])
def test_contract_lanes_sums_in_its_written_order(rng, n, d):
    """The eight-lane contraction bitwise against the same order in Python floats, and against the
    explicit product ``a^T J`` in long double (its rounding error only)."""
    Z = rng.normal(size=(n, d))
    y = rng.normal(size=d)
    k = rbf(y[None], Z, 0.3)[0]
    v1, v2 = rng.normal(size=(2, n))
    g, w = np.empty(d), np.empty(n)
    Zt = np.ascontiguousarray(Z.T)
    combine_weights(0.5, v1, -2.0, v2, k, w)
    contract_lanes(y, Zt, w, 0.3, g)
    np.testing.assert_array_equal(g, _lanes_in_python(y, Zt, k, 0.3, 0.5, v1, -2.0, v2))
    a = (0.5 * v1.astype(np.longdouble) - 2.0 * v2) * k
    ref = -2 * np.longdouble(0.3) * (y * a.sum() - Z.T.astype(np.longdouble) @ a)
    bound = 2 * 0.3 * (np.abs(a).sum() * (np.abs(y) + np.abs(Z).max(axis=0))) * (n + 4) * np.finfo(float).eps
    assert np.all(np.abs(g - ref) <= bound)


def test_bordered_inverse_matches_dense(rng):
    Z = rng.normal(size=(20, 2))
    z = rng.normal(size=2)
    K = rbf(Z, Z, 0.5) + 1e-2 * np.eye(20)
    k = rbf(z[None], Z, 0.5)[0]
    big_inv, eta = bordered_inverse(np.linalg.inv(K), k, 1.0 + 1e-2)
    A = np.vstack([Z, z])
    Kbig = rbf(A, A, 0.5) + 1e-2 * np.eye(21)
    np.testing.assert_allclose(big_inv, np.linalg.inv(Kbig), rtol=1e-8, atol=1e-8)
    # |K_{Z∪z}| = eta |K| ([SM] Eq. 20)
    np.testing.assert_allclose(np.log(eta), np.linalg.slogdet(Kbig)[1] - np.linalg.slogdet(K)[1], rtol=1e-10)


def test_sumsq_rows_floor_counts_hits():
    Z = np.array([[1.0, 0.5], [0.0, 0.0]])
    eta = np.empty(2)
    hits = sumsq_rows(Z, 1.0, 1e-14, eta)
    # row 0: 1 - 1.25 < 0 -> floored; row 1: 1 - 0 = 1
    assert hits == 1
    np.testing.assert_array_equal(eta, [1e-14, 1.0])


def test_linesearch_helpers():
    from fastsm._kernels.linesearch import (
        approx_wolfe_accept_min,
        armijo_accept_min,
        backtrack,
    )
    from fastsm.config import ARMIJO_C1, WOLFE_EPS

    # f(t) = (t - 0.3)^2 along a descent direction from t = 0: f0 = 0.09, slope -0.6
    f = lambda t: (t - 0.3) ** 2  # noqa: E731
    assert not armijo_accept_min(f(0), f(1.0), 1.0, -0.6, ARMIJO_C1)  # 0.49 > 0.09
    t = backtrack(f(0), f(1.0), 1.0, -0.6)
    assert 0.1 <= t <= 0.5 and abs(t - 0.3) < 0.2  # the quadratic model's minimiser, clipped
    assert armijo_accept_min(f(0), f(0.3), 0.3, -0.6, ARMIJO_C1)
    assert not armijo_accept_min(f(0), np.nan, 0.3, -0.6, ARMIJO_C1)
    # c1 is the rule's: f(0.5) = 0.04 is 0.05 below f0, the 0.15 that c1 = 0.5 asks at t = 0.5 is not
    assert armijo_accept_min(f(0), f(0.5), 0.5, -0.6, ARMIJO_C1)
    assert not armijo_accept_min(f(0), f(0.5), 0.5, -0.6, 0.5)
    assert backtrack(f(0), np.inf, 1.0, -0.6) == 0.1
    # approximate Wolfe: a rise within WOLFE_EPS |f| (1e-6, the values' noise at lambda = 1e-8 is
    # up to 2e-5) and a slope that flattened is accepted
    assert WOLFE_EPS == 1e-6
    assert approx_wolfe_accept_min(1.0, 1.0 + 5e-7, -1.0, -0.1, WOLFE_EPS)
    assert approx_wolfe_accept_min(-2.0, -2.0 + 1.5e-6, -1.0, -0.1, WOLFE_EPS)  # relative to |f|
    assert not approx_wolfe_accept_min(1.0, 1.0 + 5e-6, -1.0, -0.1, WOLFE_EPS)  # rose too much
    assert approx_wolfe_accept_min(1.0, 1.0 + 5e-6, -1.0, -0.1, 1e-5)  # ... for this rule's eps
    assert not approx_wolfe_accept_min(1.0, 1.0, -1.0, -0.95, WOLFE_EPS)  # did not go far enough
    assert not approx_wolfe_accept_min(1.0, 1.0, -1.0, 0.9, WOLFE_EPS)  # overshot


def test_potrf_symmetric_against_scipy():
    """fastsm._kernels.linalg.potrf_symmetric (the one LAPACK dpotrf binding, GIL-free) against SciPy's
    Cholesky: ``L`` below the diagonal, ``L^T`` above, LAPACK's info for a matrix not positive definite;
    ``_lapack.lower_part`` is ``np.tril`` of a Fortran array's C view."""
    import scipy.linalg as sl

    from fastsm._kernels.linalg import potrf_symmetric
    from fastsm._lapack import lower_part

    rng = np.random.default_rng(5)
    for n in (1, 2, 13, 120):
        A = rng.standard_normal((n, n + 3))
        K = A @ A.T / n + 1e-3 * np.eye(n)
        S = np.array(K, order="C", copy=True)
        assert potrf_symmetric(S) == 0
        L = np.tril(S)
        np.testing.assert_array_equal(np.triu(S), L.T)
        np.testing.assert_allclose(L, sl.cholesky(K, lower=True, check_finite=False), rtol=0, atol=1e-13)
        B = rng.standard_normal((n, n))
        np.testing.assert_array_equal(lower_part(np.asfortranarray(B).T), np.tril(B))
    bad = np.eye(3)
    bad[1, 1] = -1.0
    assert potrf_symmetric(bad) == 2


@pytest.mark.parametrize("b", [1, 255, 600])
def test_tiled_dgemm_matches_numpy(rng, b):
    """``python -m fastsm bench``'s DGEMM yardstick computes ``K @ M`` by its tiles (a NumPy reference)."""
    from fastsm._kernels.dgemm_rate import tiled_dgemm

    n = 50
    K, M = rng.random((b, n)), rng.random((n, n))
    P = np.full((b, n), np.nan)
    tiled_dgemm(K, M, P)
    np.testing.assert_allclose(P, K @ M, rtol=1e-13, atol=0)


def test_an_internal_kernel_called_from_python_raises_a_type_error():
    """A kernel compiled without a CPython wrapper (``kernel(internal=True)``, #54) is called from
    kernels only; from Python it raises instead of jumping to a wrapper that is not there."""
    from fastsm._cache import InternalKernel
    from fastsm._kernels.linalg import forward_solve

    assert isinstance(forward_solve, InternalKernel)
    with pytest.raises(TypeError, match="internal kernel"):
        forward_solve(np.eye(2), np.ones(2), np.empty(2))


@pytest.mark.parametrize("k, m, p", [(1, 1, 1), (7, 3, 5), (200, 16, 32)])
def test_blas_products_against_numpy(rng, k, m, p):
    """``linalg.at_b`` (``A^T B``) and ``a_bt`` (``A B^T``, here on row blocks of a larger array, as the
    Hessian reads its Jacobian products) by the ``dgemm`` binding, against NumPy's products."""
    from fastsm._kernels.linalg import a_bt, at_b

    A, B = rng.standard_normal((k, m)), rng.standard_normal((k, p))
    C = np.empty((m, p))
    at_b(A, B, C)
    np.testing.assert_allclose(C, A.T @ B, rtol=1e-13, atol=1e-13 * k)
    W = rng.standard_normal((3, m + p, k))
    C = np.empty((m, p))
    a_bt(W[1, :m], W[1, m:], C)
    np.testing.assert_allclose(C, W[1, :m] @ W[1, m:].T, rtol=1e-13, atol=1e-13 * k)
