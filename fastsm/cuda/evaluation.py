"""The GPU engine's objective evaluations: value, gradient and etas of many trial points at once, and
SMTGP's exact Hessian, over a :class:`~fastsm.cuda.backend.Backend` (docs/math.md §2-3, §8).

The Numba engine's :func:`fastsm._kernels.objectives.evaluate_rows` runs one point's products as row loops;
here a round's points are the right-hand sides of one triangular solve (TRSM) or one matrix product
(GEMM) per stage, the same stages in the same order (that module's table).  Per-point vectors are
columns: a round's kernel values are an ``N × m`` matrix.  Sums run in another order than the Numba
engine's, so the two agree to rounding, not bitwise (docs/gpu.md states the margin).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fastsm.cuda.backend import Backend
from fastsm.tgp.model import TGPModel
from fastsm.tgp.views import eta_floor

#: Below this exponent a kernel value is 0, as in :func:`fastsm._kernels.rbf.exp_neg_scaled`.
EXP_LOW = -700.0


class DeviceModel(NamedTuple):
    """A fitted global model's arrays on the device, as the evaluations read them."""

    X: Any  # training inputs, N × dx
    Z: Any  # training outputs, N × dy
    factors: dict  # "Wx", "Wy", "Wxy" (L, Cholesky form; W = L^-1, inverse form) and "G" (IKLTGP), lower triangles
    solve: bool  # Cholesky form: products with Wx, Wy, Wxy are substitutions
    gamma_x: float
    gamma_y: float
    kxx: float  # k_X(x, x) = 1 + lambda_x
    kyy: float  # k_Y(y, y) = 1 + lambda_y
    alpha: float
    floor: float  # of every eta
    spread: float  # the training outputs' spread: the unit of tol and trust_radius


def device_model(model: TGPModel, be: Backend, names: tuple[str, ...]) -> DeviceModel:
    """``model``'s arrays on ``be``'s device: its training data and the factors ``names``, lower triangles only
    (a Cholesky-form model stores ``L`` with ``L^T`` above the diagonal)."""
    xp = be.xp
    factors = {name: xp.tril(be.to_device(np.asarray(getattr(model, name)))) for name in names}
    p = model.params
    gx, gy = p.widths()
    return DeviceModel(be.to_device(model.X), be.to_device(model.Y), factors, model.factor_form == "cholesky",
                       float(gx), float(gy), 1.0 + p.lambda_x, 1.0 + p.lambda_y, float(p.alpha), eta_floor(p),
                       float(model.y_spread))


def forward(be: Backend, dm: DeviceModel, name: str, A):
    """``W A`` for the factor ``name`` (columns of ``A`` are points): a substitution ``L^-1 A`` in Cholesky
    form, a product otherwise (IKLTGP's ``G`` always)."""
    M = dm.factors[name]
    if dm.solve and name != "G":
        return be.solve(M, A, False)
    return M @ A


def backward(be: Backend, dm: DeviceModel, name: str, A):
    """``W^T A`` for the factor ``name`` (:func:`forward`'s transpose)."""
    M = dm.factors[name]
    if dm.solve and name != "G":
        return be.solve(M, A, True)
    return M.T @ A


def kernel_columns(xp, Z, Yt, gamma: float):
    """``k[j, r] = exp(-gamma ||Yt[r] - Z[j]||^2)``, ``N × m``: squared distances summed coordinate by
    coordinate in order (as :func:`fastsm._kernels.rbf.sqdist_row`, no ``|y|^2 + |z|^2 - 2 y.z``
    cancellation), exponents below :data:`EXP_LOW` giving 0, NaN kept."""
    d2 = xp.zeros((Z.shape[0], Yt.shape[0]))
    for c in range(Z.shape[1]):
        t = Yt[None, :, c] - Z[:, c, None]
        d2 += t * t
    v = -gamma * d2
    return xp.where(v < EXP_LOW, 0.0, xp.exp(v))


def floored(xp, eta, floor: float):
    """``eta`` floored at ``floor`` (a NaN too) and the hits, as :func:`fastsm._kernels.objectives._floored`."""
    low = ~(eta > floor)
    return xp.where(low, floor, eta), low.astype(np.int64)


def gradient_from_weights(xp, Yt, Z, w, gamma: float):
    """``grad[r] = sum_i w[i, r] dk_i/dy / k_i`` with ``dk_i/dy = -2 gamma (y - z_i) k_i``: ``-2 gamma (y S - Z^T w)``
    (:func:`fastsm._kernels.rbf.contract_lanes`)."""
    S = w.sum(axis=0)
    return -2.0 * gamma * (Yt * S[:, None] - (Z.T @ w).T)


class PointData(NamedTuple):
    """What depends on a test input only, one column (or entry) per point (docs/math.md §2)."""

    F: dict  # method -> N × n: u_x = K_X^-1 k_x ("kl"), W_Y k_x ("ikl"), g = W_XY k_x ("sm")
    eta_x: Any  # n
    Gxy: Any  # N × n: W_XY k_x (SMTGP's F and the certainty's)
    extrapolated: Any  # n, bool
    nearest: Any  # n: the training point of the largest k(x, x_i)


def point_data(be: Backend, dm: DeviceModel, Xb, methods) -> PointData:
    """:func:`fastsm._kernels.points.point_data` for the test inputs ``Xb`` (``m × dx``), the ``F`` of each of
    ``methods`` from one kernel block."""
    xp = be.xp
    Kx = kernel_columns(xp, dm.X, Xb, dm.gamma_x)
    with np.errstate(invalid="ignore"):
        top = Kx.max(axis=0)
    extrapolated = top < 1e-10  # config.EXTRAPOLATION_K; a NaN column is not extrapolated
    nearest = xp.argmax(Kx, axis=0)
    Hx = forward(be, dm, "Wx", Kx)
    eta_x, _ = floored(xp, dm.kxx - (Hx * Hx).sum(axis=0), dm.floor)
    Gxy = forward(be, dm, "Wxy", Kx) if "Wxy" in dm.factors else None
    F = {}
    for method in methods:
        if method == "kl":
            F[method] = backward(be, dm, "Wx", Hx)
        elif method == "ikl":
            F[method] = forward(be, dm, "Wy", Kx)
        else:
            F[method] = Gxy
    return PointData(F, eta_x, Gxy, extrapolated, nearest)


class Evaluations(NamedTuple):
    """One round's evaluations, one entry (row of ``grad``) per trial; ``k``, ``u_y``, ``u_xy``: SMTGP's kernel
    columns and back-substituted products, kept for the exact Hessian."""

    value: Any
    grad: Any
    eta_y: Any
    eta_xy: Any
    hits: Any
    k: Any
    u_y: Any
    u_xy: Any


def evaluate(be: Backend, dm: DeviceModel, method: str, beta: float, F, eta_x, Yt) -> Evaluations:
    """Objective, gradient and etas at the trials ``Yt`` (``m × dy``) of points whose data columns are ``F``
    (``N × m``) and ``eta_x`` (``m``): [SM] Eq. 5 (KL), Eq. 7/8 (IKL), Eq. 16/17 in log space (SM, ``beta = 1``
    its beta-free criterion); docs/math.md §3 and :mod:`fastsm._kernels.objectives`."""
    xp = be.xp
    k = kernel_columns(xp, dm.Z, Yt, dm.gamma_y)
    z = forward(be, dm, "Wy", k)
    eta_y, hits = floored(xp, dm.kyy - (z * z).sum(axis=0), dm.floor)
    nan = xp.full(Yt.shape[0], np.nan)
    u_y = u_xy = None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if method == "kl":
            u_y = backward(be, dm, "Wy", z)
            value = dm.kyy - 2.0 * (k * F).sum(axis=0) - eta_x * xp.log(eta_y)
            w = (-2.0 * F + (2.0 * eta_x / eta_y)[None, :] * u_y) * k
            eta_xy = nan
        elif method == "ikl":
            t = dm.factors["G"].T @ z
            s = dm.factors["G"] @ t
            c = -2.0 * (xp.log(eta_y) - xp.log(eta_x) + 1.0)
            q = backward(be, dm, "Wy", -2.0 * F + 2.0 * s + c[None, :] * z)
            value = -2.0 * (F * z).sum(axis=0) + (t * t).sum(axis=0) + eta_y * (xp.log(eta_y) - xp.log(eta_x))
            w = q * k
            eta_xy = nan
        else:
            a = dm.alpha
            zxy = (1.0 - a) * F + a * forward(be, dm, "Wxy", k)
            eta_xy, hit2 = floored(xp, (1.0 - a) * dm.kxx + a * dm.kyy - (zxy * zxy).sum(axis=0), dm.floor)
            hits = hits + hit2
            u_y = backward(be, dm, "Wy", z)
            u_xy = backward(be, dm, "Wxy", zxy)
            s = a * xp.log(eta_y) - xp.log(eta_xy)
            if beta == 1.0:
                value = -s / (2.0 * (1.0 - a))
                dlds = xp.full(s.shape, -1.0 / (2.0 * (1.0 - a)))
            else:
                cb = (1.0 - beta) / (2.0 * (1.0 - a))
                value = xp.exp(cb * s) / (beta - 1.0)
                dlds = cb * value
            w = ((dlds * (-2.0 * a / eta_y))[None, :] * u_y + (dlds * 2.0 * a / eta_xy)[None, :] * u_xy) * k
        grad = gradient_from_weights(xp, Yt, dm.Z, w, dm.gamma_y)
    return Evaluations(value, grad, eta_y, eta_xy, hits, k, u_y, u_xy)


def sm_hessian(be: Backend, dm: DeviceModel, Yt, ev: Evaluations, rows):
    """Exact Hessians (``h × dy × dy``) of SMTGP's beta-free criterion at the trials ``Yt[rows]``, from their
    evaluation ``ev`` (beta = 1): :mod:`fastsm._kernels.hessian`'s formulas (docs/math.md §8), the Jacobian's
    ``2 dy`` forward products per point as one solve per factor.  A row whose eta hit the floor gets NaN."""
    xp = be.xp
    a, gamma, Z = dm.alpha, dm.gamma_y, dm.Z
    n, dy = Z.shape
    h = rows.shape[0]
    y = Yt[rows]  # h × dy
    k, u_y, u_xy = ev.k[:, rows], ev.u_y[:, rows], ev.u_xy[:, rows]  # N × h
    eta_y, eta_xy = ev.eta_y[rows], ev.eta_xy[rows]
    D = y[:, None, :] - Z[None, :, :]  # h × N × dy: y - z_i
    J = (-2.0 * gamma) * D * k.T[:, :, None]  # dk_i/dy
    Jc = xp.ascontiguousarray(J.transpose(1, 0, 2).reshape(n, h * dy))  # columns (point, coordinate)
    Py = forward(be, dm, "Wy", Jc).reshape(n, h, dy)
    Pxy = forward(be, dm, "Wxy", Jc).reshape(n, h, dy)
    Ay = xp.einsum("nhc,nhe->hce", Py, Py)
    Axy = xp.einsum("nhc,nhe->hce", Pxy, Pxy)
    wy = (u_y * k).T  # h × N
    wxy = (u_xy * k).T
    By = xp.einsum("hnc,hne->hce", D, D * wy[:, :, None])
    Bxy = xp.einsum("hnc,hne->hce", D, D * wxy[:, :, None])
    sy, sxy = wy.sum(axis=1), wxy.sum(axis=1)
    gy = 4.0 * gamma * xp.einsum("hnc,hn->hc", D, wy)
    gxy = 4.0 * gamma * a * xp.einsum("hnc,hn->hc", D, wxy)
    eye = xp.eye(dy)
    g2 = 4.0 * gamma * gamma
    by = g2 * 0.5 * (By + By.transpose(0, 2, 1)) - 2.0 * gamma * sy[:, None, None] * eye
    bxy = g2 * 0.5 * (Bxy + Bxy.transpose(0, 2, 1)) - 2.0 * gamma * sxy[:, None, None] * eye
    h_eta_y = -2.0 * (0.5 * (Ay + Ay.transpose(0, 2, 1)) + by)
    h_eta_xy = -2.0 * (a * a * 0.5 * (Axy + Axy.transpose(0, 2, 1)) + a * bxy)
    with np.errstate(divide="ignore", invalid="ignore"):
        hly = h_eta_y / eta_y[:, None, None] - gy[:, :, None] * gy[:, None, :] / (eta_y * eta_y)[:, None, None]
        hlxy = (h_eta_xy / eta_xy[:, None, None]
                - gxy[:, :, None] * gxy[:, None, :] / (eta_xy * eta_xy)[:, None, None])
        H = (-1.0 / (2.0 * (1.0 - a))) * (a * hly - hlxy)
    return xp.where((ev.hits[rows] > 0)[:, None, None], np.nan, H)
