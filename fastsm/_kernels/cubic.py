"""SM_CUBIC, the O(N^3) reference form of SMTGP's objective ([SM] Eq. 9–12, Nielsen–Nock, with the
inverse restored; docs/math.md §3): the full SM divergence of the bordered Gaussians, per test point.
The quadratic form of :mod:`fastsm._kernels.objectives` has the same argmin at O(N^2)."""

from __future__ import annotations

import numpy as np

from fastsm._kernels.linalg import cholesky, cholesky_solve
from fastsm._kernels.rank_one import bordered_inverse
from fastsm._kernels.rbf import contract_jacobian
from fastsm.config import kernel


@kernel(internal=True)
def sm_cubic_point(obj, ky, kx, Kxinv, Kyinv):
    """SM divergence ``D(p_X : p_Y)`` by the Nielsen–Nock form, O(N^3).

    ``[SM] Eq. 9`` with the inverse restored (docs/math.md §3)::

        rho = (|Sp|^a |Sq|^(1-a) |a Sp^-1 + (1-a) Sq^-1|)^(-1/2)

    with ``Sp = K_{X∪x}``, ``Sq = K_{Y∪y}``.  Returns the full divergence
    ``(log rho^2, A[:, N], eta_y)`` with ``A = Sq^-1 - Sq^-1 M^-1 Sq^-1``, from
    which the caller forms the value (constants kept) and gradient.  Reference only: the
    quadratic form (Eq. 16) has the same argmin at O(N^2) per evaluation.
    ``log rho^2`` is NaN if ``M`` is not numerically positive definite.
    """
    logdet_y, logdet_x, kyy, kxx = obj.logdet_y, obj.logdet_x, obj.kyy, obj.kxx
    a = obj.alpha
    n = Kyinv.shape[0]
    Sp_inv, eta_x = bordered_inverse(Kxinv, kx, kxx)
    Sq_inv, eta_y = bordered_inverse(Kyinv, ky, kyy)
    M = a * Sp_inv + (1.0 - a) * Sq_inv
    L = np.zeros((n + 1, n + 1))
    ok, logdet_m = cholesky(M, L)
    e = np.empty(n + 1)
    for i in range(n + 1):
        e[i] = Sq_inv[i, n]
    if not ok:
        return np.nan, e, eta_y
    log_rho2 = -(a * (logdet_x + np.log(eta_x)) + (1.0 - a) * (logdet_y + np.log(eta_y)) + logdet_m)
    # d log rho^2 / dy = -2 (1-a) A[:N, N]^T J, A = Sq^-1 - Sq^-1 M^-1 Sq^-1
    z = cholesky_solve(L, e)
    col = e.copy()
    for i in range(n + 1):
        t = 0.0
        for j in range(n + 1):
            t += Sq_inv[i, j] * z[j]
        col[i] -= t
    return log_rho2, col, eta_y


@kernel(internal=True)
def cubic_rows(obj, pts, idx, Yt, Kbuf, cubic, out):
    """The O(N^3) reference form's evaluations of the rows ``idx`` with ``cubic = (K_X^-1, K_Y^-1)``; ``False``
    (nothing done) where ``cubic`` is ``None``, a test Numba resolves at compile time on an argument: the
    kernels of every other form compile none of this."""
    if cubic is None:
        return False
    for r in range(idx.shape[0]):
        cubic_row(obj, pts, r, idx, Yt, Kbuf, cubic, out)
    return True


@kernel(internal=True)
def cubic_row(obj, pts, r, idx, Yt, Kbuf, cubic, out):
    v, ey = cubic_value_grad(obj, Yt[r], Kbuf[r], pts.F[idx[r]], cubic, out.grad[r])
    out.value[r] = v
    out.eta_y[r] = ey
    out.eta_xy[r] = np.nan
    out.hits[r] = 0


@kernel(internal=True)
def cubic_value_grad(obj, y, ky, kx, cubic, grad):
    log_rho2, col, eta_y = sm_cubic_point(obj, ky, kx, cubic[0], cubic[1])
    a, beta, Z, gamma = obj.alpha, obj.beta, obj.Z, obj.gamma
    if beta == 1.0:
        value = -log_rho2 / (2.0 * (1.0 - a))
        dl = -1.0 / (2.0 * (1.0 - a))
    else:
        c = (1.0 - beta) / (2.0 * (1.0 - a))
        value = np.expm1(c * log_rho2) / (beta - 1.0)
        dl = c * np.exp(c * log_rho2) / (beta - 1.0)
    coef = dl * (-2.0 * (1.0 - a))
    contract_jacobian(y, Z, ky, gamma, (coef, 0.0, 0.0), (col, col, col), False, grad)
    return value, eta_y
