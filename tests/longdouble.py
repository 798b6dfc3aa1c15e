"""An independent evaluation of the twin-GP objectives: Cholesky factors and triangular solves in
NumPy/SciPy (float64), and the same in 80-bit ``np.longdouble`` as the yardstick of accuracy.

Nothing here calls fastsm's kernels.  ``Reference(X, Y, params, dtype)`` factors the kernel
matrices once (``K = L L^T``); ``value(x, y, method)`` is [SM] Eq. 5 (KLTGP), Eq. 7 (IKLTGP) or
Eq. 16 (SMTGP, the beta form) with every ``k^T K^-1 k`` as ``||L^-1 k||^2`` (docs/math.md §2–§3).  In long
double the factorisation and the substitutions are plain loops over rows (O(N^3) once, O(N^2) per
evaluation): a few seconds at N = 500.  The test point's kernel rows are evaluated in ``dtype``
(so that finite differences in long double resolve the gradient).  ``terms(...)`` returns the
magnitude of the summands of KLTGP's and IKLTGP's values (both are sums of O(1) terms that can cancel to zero, so their
accuracy is measured against that magnitude).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cholesky, solve_triangular

HAS_LONGDOUBLE = np.finfo(np.longdouble).eps < np.finfo(np.float64).eps


def rbf(A, B, gamma, dtype=np.float64):
    A, B = np.asarray(A, dtype=dtype), np.asarray(B, dtype=dtype)
    d = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-dtype(gamma) * d)


def _chol(K):
    if K.dtype == np.float64:
        return cholesky(K, lower=True)
    n = K.shape[0]
    L = np.zeros_like(K)
    for j in range(n):
        L[j, j] = np.sqrt(K[j, j] - L[j, :j] @ L[j, :j])
        L[j + 1:, j] = (K[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return L


def _forward(L, b):
    if L.dtype == np.float64:
        return solve_triangular(L, b, lower=True, check_finite=False)
    z = np.zeros(len(b), dtype=L.dtype)
    for i in range(len(b)):
        z[i] = (b[i] - L[i, :i] @ z[:i]) / L[i, i]
    return z


def _backward(L, b):
    if L.dtype == np.float64:
        return solve_triangular(L, b, lower=True, trans=1, check_finite=False)
    n = len(b)
    x = np.zeros(n, dtype=L.dtype)
    for i in range(n - 1, -1, -1):
        x[i] = (b[i] - L[i + 1:, i] @ x[i + 1:]) / L[i, i]
    return x


class Reference:
    """The objectives of a twin GP from Cholesky factors in ``dtype`` (float64 or np.longdouble).

    The kernel matrices are formed in float64 (as fastsm forms them) and converted: the
    comparison is of the arithmetic on the same matrices, not of two kernel evaluations.
    """

    def __init__(self, X, Y, params, dtype=np.float64):
        p = params
        self.p, self.dt = p, dtype
        self.X, self.Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
        n = len(X)
        Kx = rbf(X, X, p.gamma_x) + p.lambda_x * np.eye(n)
        Ky = rbf(Y, Y, p.gamma_y) + p.lambda_y * np.eye(n)
        a = p.alpha
        self.Kx = Kx.astype(dtype)
        self.Lx, self.Ly = _chol(Kx.astype(dtype)), _chol(Ky.astype(dtype))
        self.Lxy = _chol(((1 - a) * Kx + a * Ky).astype(dtype))
        one = dtype(1)
        self.kxx, self.kyy = one + dtype(p.lambda_x), one + dtype(p.lambda_y)
        self._last_x: dict = {}

    def _input_parts(self, x):
        """``k_x`` and ``L_X^-1 k_x``, kept for the last ``x`` (a search over ``y`` evaluates one ``x`` often)."""
        x = np.asarray(x)
        key = (x.dtype.str, x.tobytes())
        if self._last_x.get("key") != key:
            kx = rbf(np.atleast_2d(x), self.X, self.p.gamma_x, self.dt)[0]
            self._last_x = {"key": key, "kx": kx, "hx": _forward(self.Lx, kx)}
        return self._last_x["kx"], self._last_x["hx"]

    def _kx_solved(self, x):
        """``K_X^-1 k_x`` (two substitutions), kept with the last ``x``'s parts."""
        _, hx = self._input_parts(x)
        if "ux" not in self._last_x:
            self._last_x["ux"] = _backward(self.Lx, hx)
        return self._last_x["ux"]

    def _parts(self, x, y):
        p, dt = self.p, self.dt
        kx, hx = self._input_parts(x)
        ky = rbf(np.atleast_2d(y), self.Y, p.gamma_y, dt)[0]
        zy = _forward(self.Ly, ky)
        return kx, ky, hx, zy, self.kxx - hx @ hx, self.kyy - zy @ zy

    def value(self, x, y, method="sm", beta=None):
        """The objective of ``method`` at ``(x, y)`` (SMTGP with the model's ``beta``, or ``beta``)."""
        p, dt = self.p, self.dt
        kx, ky, hx, zy, ex, ey = self._parts(x, y)
        if method == "kl":
            return self.kyy - 2 * ky @ self._kx_solved(x) - ex * np.log(ey)
        if method == "ikl":
            uy = _backward(self.Ly, zy)
            return -2 * kx @ uy + uy @ (self.Kx @ uy) + ey * (np.log(ey) - np.log(ex))
        a = dt(p.alpha)
        b = dt(p.beta if beta is None else beta)
        zxy = _forward(self.Lxy, (1 - a) * kx + a * ky)
        exy = (1 - a) * self.kxx + a * self.kyy - zxy @ zxy
        s = a * np.log(ey) - np.log(exy)
        if b == 1:
            return -s / (2 * (1 - a))
        return np.exp((1 - b) / (2 * (1 - a)) * s) / (b - 1)

    def terms(self, x, y, method):
        """The magnitude of the summands of KLTGP's / IKLTGP's value (their accuracy's scale)."""
        kx, ky, hx, zy, ex, ey = self._parts(x, y)
        if method == "kl":
            return abs(self.kyy) + 2 * abs(ky @ self._kx_solved(x)) + abs(ex * np.log(ey))
        uy = _backward(self.Ly, zy)
        return 2 * abs(kx @ uy) + abs(uy @ (self.Kx @ uy)) + abs(ey * (np.log(ey) - np.log(ex)))

    def sm_criterion_grad(self, x, y):
        """SMTGP's beta-free criterion ``-s / (2(1-a))`` and its gradient in ``y`` (float64 only):
        ``ds/dy = (-2a K_Y^-1 k_y / eta_y + 2a K_XY^-1 k_xy / eta_xy)^T J`` (docs/math.md §3), every
        ``K^-1 v`` by two triangular solves."""
        p = self.p
        a = p.alpha
        kx, ky, hx, zy, ex, ey = self._parts(x, y)
        zxy = _forward(self.Lxy, (1 - a) * kx + a * ky)
        exy = (1 - a) * self.kxx + a * self.kyy - zxy @ zxy
        s = a * np.log(ey) - np.log(exy)
        w = -2 * a * _backward(self.Ly, zy) / ey + 2 * a * _backward(self.Lxy, zxy) / exy
        diff = np.atleast_1d(y)[None, :] - self.Y
        J = -2.0 * p.gamma_y * diff * ky[:, None]
        c = -1.0 / (2.0 * (1.0 - a))
        return c * s, c * (w @ J)
