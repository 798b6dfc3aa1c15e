"""Dense brute-force references built from (N+1)×(N+1) matrices.

Independent of fastsm's O(N^2) shortcuts: they build K_{X∪x} and K_{Y∪y}
explicitly and use slogdet / trace / inverse.
"""

import numpy as np
from scipy.spatial.distance import cdist


def rbf(A, B, gamma):
    return np.exp(-gamma * cdist(A, B, "sqeuclidean"))


def rbf_jacobian(y, Z, k, gamma):
    """``J[i, d] = d k(y, z_i) / d y[d] = -2 gamma (y[d] - z_i[d]) k_i`` (docs/math.md §1), explicitly."""
    return -2.0 * gamma * (y[None, :] - Z) * k[:, None]


def augmented(Z, z, gamma, lam):
    """K_{Z∪z} with lambda on the whole diagonal (the test point's k(z,z) = 1 + lambda)."""
    A = np.vstack([Z, z[None, :]])
    return rbf(A, A, gamma) + lam * np.eye(len(A))


def logdet(A):
    s, v = np.linalg.slogdet(A)
    assert s > 0
    return v


def dense_parts(X, Y, x, y, p):
    Sp = augmented(X, x, p.gamma_x, p.lambda_x)
    Sq = augmented(Y, y, p.gamma_y, p.lambda_y)
    return Sp, Sq


def kl_gauss0(S0, S1):
    """KL(N(0,S0) || N(0,S1))."""
    n = len(S0)
    return 0.5 * (np.trace(np.linalg.solve(S1, S0)) - n + logdet(S1) - logdet(S0))


def dense_kltgp(X, Y, x, y, p):
    """2 eta_x KL(p_Y || p_X): equals Eq. 5 up to a y-independent constant."""
    Sp, Sq = dense_parts(X, Y, x, y, p)
    Kx = Sp[:-1, :-1]
    eta_x = np.exp(logdet(Sp) - logdet(Kx))
    return 2 * eta_x * kl_gauss0(Sq, Sp)


def dense_log_rho2(X, Y, x, y, a, p):
    """log (|Sp|^(1-a) |Sq|^a / |a Sq + (1-a) Sp|) = log rho_a^2 (Lemma 3.1)."""
    Sp, Sq = dense_parts(X, Y, x, y, p)
    return (1 - a) * logdet(Sp) + a * logdet(Sq) - logdet(a * Sq + (1 - a) * Sp)


def dense_sm(X, Y, x, y, p):
    """D'_{a,b}(p_X : p_Y) of Lemma 3.1 (Rényi limit at b = 1)."""
    a, b = p.alpha, p.beta
    lr = dense_log_rho2(X, Y, x, y, a, p)
    if b == 1.0:
        return -lr / (2 * (1 - a))
    c = (1 - b) / (2 * (1 - a))
    return (np.exp(c * lr) - 1) / (b - 1)


def dense_kl_xy(X, Y, x, y, p):
    """KL(p_X || p_Y), the direction IKLTGP approximates."""
    Sp, Sq = dense_parts(X, Y, x, y, p)
    return kl_gauss0(Sp, Sq)


def fd_gradient(f, y, h):
    """Fourth-order central differences (truncation O(h^4), noise O(eps |f| / h))."""
    g = np.empty_like(y)
    for d in range(len(y)):
        e = np.zeros_like(y)
        e[d] = h
        g[d] = (-f(y + 2 * e) + 8 * f(y + e) - 8 * f(y - e) + f(y - 2 * e)) / (12 * h)
    return g
