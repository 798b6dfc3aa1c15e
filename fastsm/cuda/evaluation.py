"""The GPU engine's objective evaluations: value, gradient and etas of many trial points at once, and
SMTGP's exact Hessian, over a :class:`~fastsm.cuda.backend.Backend` (docs/math.md §2-3, §8).

The Numba engine's :func:`fastsm._kernels.objectives.evaluate_rows` runs one point's products as row loops;
here a round's points go through each stage together, the same stages in the same order (that module's
table).  Per-point vectors are rows (``r × n``).  A model is a *view* (:class:`SharedModel`: one model for
every point, each stage one triangular solve with the points as right-hand sides, TRSM; :class:`PointModels`:
a KNN-local model per point, each stage one batched solve), so the formulas are written once.  Sums run in
another order than the Numba engine's, so the two agree to rounding, not bitwise (docs/gpu.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

from fastsm.cuda.backend import Backend
from fastsm.tgp.model import TGPModel
from fastsm.tgp.views import eta_floor

#: Below this exponent a kernel value is 0, as in :func:`fastsm._kernels.rbf.exp_neg_scaled`.
EXP_LOW = -700.0


class Kernels(NamedTuple):
    """A model's kernel parameters as the evaluations read them."""

    gamma_x: float
    gamma_y: float
    kxx: float  # k_X(x, x) = 1 + lambda_x
    kyy: float  # k_Y(y, y) = 1 + lambda_y
    alpha: float
    floor: float  # of every eta


def kernels_of(model) -> Kernels:
    """``model``'s (a :class:`TGPModel` or a local model's) :class:`Kernels`."""
    p = model.params
    gx, gy = p.widths()
    return Kernels(float(gx), float(gy), 1.0 + p.lambda_x, 1.0 + p.lambda_y, float(p.alpha), eta_floor(p))


def sq_distances(xp, A, B):
    """``||A_r - B_j||^2`` summed coordinate by coordinate in order (as :func:`fastsm._kernels.rbf.sqdist_row`:
    no ``|a|^2 + |b|^2 - 2 a.b`` cancellation); ``A`` is ``(..., r, d)`` and ``B`` ``(..., n, d)``."""
    d2 = xp.zeros(A.shape[:-1] + (B.shape[-2],))
    for c in range(A.shape[-1]):
        t = A[..., :, c, None] - B[..., None, :, c]
        d2 += t * t
    return d2


def rbf(xp, d2, gamma: float):
    """``exp(-gamma d2)``, exponents below :data:`EXP_LOW` giving 0, NaN kept."""
    v = -gamma * d2
    return xp.where(v < EXP_LOW, 0.0, xp.exp(v))


@dataclasses.dataclass(frozen=True)
class SharedModel:
    """One fitted global model for every point: its training data and factors on the device.

    ``factors``: ``"Wx"``, ``"Wy"``, ``"Wxy"`` (``L``, Cholesky form; ``W = L^-1``, inverse form) and ``"G"``
    (IKLTGP), lower triangles; ``solve``: products with ``Wx``, ``Wy``, ``Wxy`` are substitutions.
    """

    be: Backend
    X: Any  # N × dx
    Z: Any  # training outputs, N × dy
    factors: dict
    solve: bool
    spread: Any  # per point (here every point's is the model's): the unit of tol and trust_radius

    def take(self, idx) -> SharedModel:
        return self

    def _product(self, name: str, A, trans: bool):
        """``W A^T`` (``trans``: ``W^T A^T``) of the rows of ``A`` (``r × n``, or ``r × n × c``), as rows."""
        M = self.factors[name]
        shape = A.shape
        cols = A.T if A.ndim == 2 else A.transpose(1, 0, 2).reshape(shape[1], -1)
        if self.solve and name != "G":
            out = self.be.solve(M, cols, trans)
        else:
            out = (M.T if trans else M) @ cols
        return out.T if A.ndim == 2 else out.reshape(shape[1], shape[0], shape[2]).transpose(1, 0, 2)

    def forward(self, name: str, A):
        """``W a`` for each row ``a`` of ``A`` (a substitution ``L^-1 a`` in Cholesky form, a product
        otherwise, IKLTGP's ``G`` always); ``A`` may hold ``c`` vectors a row (``r × n × c``)."""
        return self._product(name, A, False)

    def backward(self, name: str, A):
        """``W^T a`` for each row ``a`` of ``A`` (:meth:`forward`'s transpose)."""
        return self._product(name, A, True)

    def outputs(self):
        """The training outputs each row's model holds, broadcastable to ``r × n × dy``."""
        return self.Z[None]

    def inputs(self):
        return self.X[None]

    def contract(self, w):
        """``sum_i w[r, i] z_i`` of each row's model, ``r × dy``."""
        return w @ self.Z


@dataclasses.dataclass(frozen=True)
class PointModels:
    """A model per point (KNN-local): row ``p`` holds point ``p``'s training data and factors (``L``, Cholesky
    form: every product is a batched substitution)."""

    be: Backend
    X: Any  # m × K × dx
    Z: Any  # m × K × dy
    factors: dict  # "Wx", "Wy", "Wxy": m × K × K lower triangles
    spread: Any  # m

    def take(self, idx) -> PointModels:
        return PointModels(self.be, self.X[idx], self.Z[idx], {k: v[idx] for k, v in self.factors.items()},
                           self.spread[idx])

    def forward(self, name: str, A):
        many = A.ndim == 3
        out = self.be.solve(self.factors[name], A if many else A[:, :, None], False)
        return out if many else out[:, :, 0]

    def backward(self, name: str, A):
        many = A.ndim == 3
        out = self.be.solve(self.factors[name], A if many else A[:, :, None], True)
        return out if many else out[:, :, 0]

    def outputs(self):
        return self.Z

    def inputs(self):
        return self.X

    def contract(self, w):
        return self.be.xp.einsum("rn,rnc->rc", w, self.Z)


def shared_model(model: TGPModel, be: Backend, names: tuple[str, ...]) -> SharedModel:
    """``model``'s arrays on ``be``'s device: its training data and the factors ``names``, lower triangles only
    (a Cholesky-form model stores ``L`` with ``L^T`` above the diagonal)."""
    xp = be.xp
    # Fortran order: what LAPACK's and cuBLAS's TRSM read, so no solve copies a factor
    factors = {name: xp.asfortranarray(xp.tril(be.to_device(np.asarray(getattr(model, name))))) for name in names}
    return SharedModel(be, be.to_device(model.X), be.to_device(model.Y), factors, model.factor_form == "cholesky",
                       xp.full(1, float(model.y_spread)))


def floored(xp, eta, floor: float):
    """``eta`` floored at ``floor`` (a NaN too) and the hits, as :func:`fastsm._kernels.objectives._floored`."""
    low = ~(eta > floor)
    return xp.where(low, floor, eta), low.astype(np.int64)


class PointData(NamedTuple):
    """What depends on a test input only, one row (or entry) per point (docs/math.md §2)."""

    F: dict  # method -> m × n: u_x = K_X^-1 k_x ("kl"), W_Y k_x ("ikl"), g = W_XY k_x ("sm")
    eta_x: Any  # m
    Gxy: Any  # m × n: W_XY k_x (SMTGP's F and the certainty's)
    extrapolated: Any  # m, bool
    nearest: Any  # m: the row's model's training point of the largest k(x, x_i)


def point_data(xp, view, kern: Kernels, Xb, methods) -> PointData:
    """:func:`fastsm._kernels.points.point_data` for the test inputs ``Xb`` (``m × dx``) of the models ``view``, the
    ``F`` of each of ``methods`` from one kernel block."""
    Kx = rbf(xp, sq_distances(xp, Xb[:, None, :], view.inputs())[:, 0, :], kern.gamma_x)
    with np.errstate(invalid="ignore"):
        top = Kx.max(axis=1)
    extrapolated = top < 1e-10  # config.EXTRAPOLATION_K; a NaN row is not extrapolated
    nearest = xp.argmax(Kx, axis=1)
    Hx = view.forward("Wx", Kx)
    eta_x, _ = floored(xp, kern.kxx - (Hx * Hx).sum(axis=1), kern.floor)
    Gxy = view.forward("Wxy", Kx) if "Wxy" in view.factors else None
    F = {}
    for method in methods:
        if method == "kl":
            F[method] = view.backward("Wx", Hx)
        elif method == "ikl":
            F[method] = view.forward("Wy", Kx)
        else:
            F[method] = Gxy
    return PointData(F, eta_x, Gxy, extrapolated, nearest)


class Evaluations(NamedTuple):
    """One round's evaluations, one entry (row of ``grad``) per trial; ``k``, ``u_y``, ``u_xy``: SMTGP's kernel
    rows and back-substituted products, kept for the exact Hessian."""

    value: Any
    grad: Any
    eta_y: Any
    eta_xy: Any
    hits: Any
    k: Any
    u_y: Any
    u_xy: Any


def evaluate(xp, view, kern: Kernels, method: str, beta: float, F, eta_x, Yt) -> Evaluations:
    """Objective, gradient and etas at the trials ``Yt`` (``r × dy``) of points whose models are ``view`` (one row
    each, or one shared) and whose data rows are ``F`` (``r × n``) and ``eta_x`` (``r``): [SM] Eq. 5 (KL), Eq. 7/8
    (IKL), Eq. 16/17 in log space (SM; ``beta = 1`` its beta-free criterion); docs/math.md §3 and
    :mod:`fastsm._kernels.objectives`."""
    k = rbf(xp, sq_distances(xp, Yt[:, None, :], view.outputs())[:, 0, :], kern.gamma_y)
    z = view.forward("Wy", k)
    eta_y, hits = floored(xp, kern.kyy - (z * z).sum(axis=1), kern.floor)
    nan = xp.full(Yt.shape[0], np.nan)
    u_y = u_xy = None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if method == "kl":
            u_y = view.backward("Wy", z)
            value = kern.kyy - 2.0 * (k * F).sum(axis=1) - eta_x * xp.log(eta_y)
            w = (-2.0 * F + (2.0 * eta_x / eta_y)[:, None] * u_y) * k
            eta_xy = nan
        elif method == "ikl":
            t = view.backward("G", z)
            s = view.forward("G", t)
            c = -2.0 * (xp.log(eta_y) - xp.log(eta_x) + 1.0)
            q = view.backward("Wy", -2.0 * F + 2.0 * s + c[:, None] * z)
            value = -2.0 * (F * z).sum(axis=1) + (t * t).sum(axis=1) + eta_y * (xp.log(eta_y) - xp.log(eta_x))
            w = q * k
            eta_xy = nan
        else:
            a = kern.alpha
            zxy = (1.0 - a) * F + a * view.forward("Wxy", k)
            eta_xy, hit2 = floored(xp, (1.0 - a) * kern.kxx + a * kern.kyy - (zxy * zxy).sum(axis=1), kern.floor)
            hits = hits + hit2
            u_y = view.backward("Wy", z)
            u_xy = view.backward("Wxy", zxy)
            s = a * xp.log(eta_y) - xp.log(eta_xy)
            if beta == 1.0:
                value = -s / (2.0 * (1.0 - a))
                dlds = xp.full(s.shape, -1.0 / (2.0 * (1.0 - a)))
            else:
                cb = (1.0 - beta) / (2.0 * (1.0 - a))
                value = xp.exp(cb * s) / (beta - 1.0)
                dlds = cb * value
            w = ((dlds * (-2.0 * a / eta_y))[:, None] * u_y + (dlds * 2.0 * a / eta_xy)[:, None] * u_xy) * k
        # grad = sum_i w_i dk_i/dy / k_i with dk_i/dy = -2 gamma (y - z_i) k_i (fastsm._kernels.rbf.contract_lanes)
        grad = -2.0 * kern.gamma_y * (Yt * w.sum(axis=1)[:, None] - view.contract(w))
    return Evaluations(value, grad, eta_y, eta_xy, hits, k, u_y, u_xy)


def sm_hessian(xp, view, kern: Kernels, Yt, ev: Evaluations, rows):
    """Exact Hessians (``h × dy × dy``) of SMTGP's beta-free criterion at the trials ``Yt[rows]`` of the models
    ``view`` (already taken at those rows), from their evaluation ``ev`` (beta = 1): :mod:`fastsm._kernels.hessian`'s
    formulas (docs/math.md §8), the Jacobian's ``2 dy`` forward products per point in one solve per factor.  A row
    whose eta hit the floor gets NaN."""
    a, gamma = kern.alpha, kern.gamma_y
    y = Yt[rows]  # h × dy
    k, u_y, u_xy = ev.k[rows], ev.u_y[rows], ev.u_xy[rows]  # h × n
    eta_y, eta_xy = ev.eta_y[rows], ev.eta_xy[rows]
    dy = y.shape[1]
    D = y[:, None, :] - view.outputs()  # h × n × dy: y - z_i
    J = (-2.0 * gamma) * D * k[:, :, None]  # dk_i/dy
    Py = view.forward("Wy", J)
    Pxy = view.forward("Wxy", J)
    Ay = xp.einsum("hnc,hne->hce", Py, Py)
    Axy = xp.einsum("hnc,hne->hce", Pxy, Pxy)
    wy = u_y * k  # h × n
    wxy = u_xy * k
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
