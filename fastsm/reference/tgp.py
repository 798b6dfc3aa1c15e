"""Plain NumPy/SciPy twin of :mod:`fastsm.tgp` — the drop-in baseline.

Written the way a user would today: kernel matrices from
``scipy.spatial.distance.cdist``, ``scipy.linalg.cholesky`` and triangular inverses, one
``scipy.optimize.minimize`` call per test point with per-point matrix–vector
products (BLAS-2).  Same signatures and semantics as :mod:`fastsm.tgp`;
``threads`` and ``batch_size`` are accepted and ignored.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cholesky, solve_triangular
from scipy.optimize import BFGS, minimize
from scipy.spatial.distance import cdist

from fastsm import config
from fastsm.tgp.model import Prediction, TGPModel, TGPParams, check_inputs, check_model, check_pairs


def _spread(Y: np.ndarray) -> float:
    """The output spread ``sqrt(sum_c var(Y[:, c]))``; all-equal outputs: ``eps max |y|`` (or the
    smallest normal float for all-zero outputs), the unit of the tolerance and the trust radius."""
    spread = float(np.sqrt(np.var(Y, axis=0).sum()))
    if spread > 0.0:
        return spread
    top = float(np.abs(Y).max())
    return top * float(np.finfo(float).eps) if top > 0.0 else float(np.finfo(float).tiny)


def _ridge(X: np.ndarray, Y: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    """The ridge start ``(dx + 1, dy)`` (bias last): least squares with an unpenalised bias and the penalty
    ``1e-6`` times the mean column sum of squares of the centred inputs (times the mean weight, rows
    weighted by ``w``), in centred unit-RMS columns; a column constant to rounding has coefficient 0."""
    n, dx = X.shape
    mu = X.mean(axis=0)
    Xc = X - mu
    rms = np.sqrt((Xc**2).mean(axis=0))
    constant = rms <= n * np.finfo(float).eps * np.abs(X).max(axis=0)
    Xc[:, constant], rms[constant] = 0.0, 1.0
    w = np.ones(n) if w is None else w / w.max()
    r = 1e-6 * max(float((Xc**2).sum(axis=0).mean()), 1e-300) * float(w.mean())
    s = np.sqrt(w)[:, None]
    A = np.vstack([np.hstack([s * Xc / rms, s]), np.hstack([np.diag(np.sqrt(r) / rms), np.zeros((dx, 1))])])
    z = np.linalg.lstsq(A, np.vstack([s * Y, np.zeros((dx, Y.shape[1]))]), rcond=None)[0]
    coef = z[:dx] / rms[:, None]
    return np.vstack([coef, z[dx:] - mu @ coef])


def _sm_objective(criterion: np.ndarray, method: str, beta: float) -> np.ndarray:
    """The SM value from the minimised beta = 1 criterion ``R``: ``exp((b-1) R) / (b-1)`` (cubic form:
    ``expm1``); the criterion itself for KL, IKL and b = 1."""
    if method not in ("sm", "sm_cubic") or beta == 1.0:
        return criterion.copy()
    with np.errstate(over="ignore", under="ignore"):
        g = np.exp if method == "sm" else np.expm1
        return g((beta - 1.0) * criterion) / (beta - 1.0)


def _rbf(A, B, gamma):
    return np.exp(-gamma * cdist(A, B, "sqeuclidean"))


def fit(X, Y, params: TGPParams | None = None, *, methods=("kl", "ikl", "sm"), threads=None,
        sample_weight=None) -> TGPModel:
    """Twin of :func:`fastsm.tgp.fit` (``scipy.linalg.cholesky``, ``W = L^-1``; noise ``lambda / w_i``)."""
    p = TGPParams() if params is None else params
    X = np.atleast_2d(np.asarray(X, dtype=float).T).T if np.ndim(X) == 1 else np.asarray(X, dtype=float)
    Y = np.atleast_2d(np.asarray(Y, dtype=float).T).T if np.ndim(Y) == 1 else np.asarray(Y, dtype=float)
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=float)
        X, Y, w = X[w > 0], Y[w > 0], w[w > 0]
    p = p.resolve(X, Y, w)
    noise = np.eye(len(X)) if w is None else np.diag(1.0 / w)
    Kx = _rbf(X, X, p.gamma_x) + p.lambda_x * noise
    Ky = _rbf(Y, Y, p.gamma_y) + p.lambda_y * noise
    Kxy = (1 - p.alpha) * Kx + p.alpha * Ky
    Lx, Ly, Lxy = cholesky(Kx, lower=True), cholesky(Ky, lower=True), cholesky(Kxy, lower=True)
    eye = np.eye(len(X))
    Wx, Wy, Wxy = (solve_triangular(L, eye, lower=True) for L in (Lx, Ly, Lxy))
    G = Wy @ Lx if "ikl" in methods else None
    spread = _spread(Y)
    parts = dict(Wx=Wx, Wy=Wy, Wxy=Wxy, G=G, logdet_x=np.linalg.slogdet(Kx)[1],
                 logdet_y=np.linalg.slogdet(Ky)[1], logdet_xy=np.linalg.slogdet(Kxy)[1], y_spread=spread,
                 ridge_coef=_ridge(X, Y, w))
    return TGPModel._from_parts(X, Y, p, tuple(methods), parts, w)


def _inverse(model: TGPModel) -> TGPModel:
    """``model`` with inverse factors ``W = L^-1`` (a model in Cholesky form holds ``L`` in symmetric
    storage, ``fastsm.tgp.fitting``): SciPy's triangular solves with its lower triangles."""
    if model.factor_form == "inverse":
        return model
    eye = np.eye(model.n_train)
    parts = {name: getattr(model, name) for name in ("G", "logdet_x", "logdet_y", "logdet_xy", "y_spread",
                                                      "ridge_coef")}
    for name in ("Wx", "Wy", "Wxy"):
        parts[name] = solve_triangular(np.tril(getattr(model, name)), eye, lower=True)
    return TGPModel._from_parts(model.X, model.Y, model.params, model.methods, parts, model.sample_weight)


def _gram(model: TGPModel, Z: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    w = model.sample_weight
    return _rbf(Z, Z, gamma) + lam * (np.eye(len(Z)) if w is None else np.diag(1.0 / w))


def _point_objective(model: TGPModel, x: np.ndarray, method: str, beta: float | None = None):
    """``f(y) -> (value, gradient)`` for one test input, NumPy matvecs (``beta`` overrides the model's).

    Every ``k^T K^-1 k`` is ``||W k||^2`` and every ``K^-1 k`` is ``W^T (W k)`` (docs/accuracy.md).
    """
    p = model.params
    a, b = p.alpha, (p.beta if beta is None else beta)
    kyy, kxx = 1.0 + p.lambda_y, 1.0 + p.lambda_x
    Wx, Wy, Wxy = model.Wx, model.Wy, model.Wxy
    kx = _rbf(x[None, :], model.X, p.gamma_x)[0]
    hx = Wx @ kx
    ux = Wx.T @ hx
    eta_x = kxx - hx @ hx
    gx = Wy @ kx

    def f(y):
        diff = y[None, :] - model.Y
        ky = np.exp(-p.gamma_y * np.sum(diff**2, axis=1))
        J = -2.0 * p.gamma_y * diff * ky[:, None]  # docs/math.md §1
        zy = Wy @ ky
        uy = Wy.T @ zy
        eta_y = kyy - zy @ zy
        if method == "kl":
            val = kyy - 2 * ky @ ux - eta_x * np.log(eta_y)
            g = -2 * (ux - eta_x / eta_y * uy) @ J
        elif method == "ikl":
            t = model.G.T @ zy  # u_y^T K_X u_y = ||t||^2
            ly = np.log(eta_y) - np.log(eta_x)
            val = -2 * gx @ zy + t @ t + eta_y * ly
            g = (Wy.T @ (-2 * gx + 2 * model.G @ t - 2 * (ly + 1) * zy)) @ J
        elif method == "sm":
            kxy = (1 - a) * kx + a * ky
            zxy = Wxy @ kxy
            wxy = Wxy.T @ zxy
            eta_xy = (1 - a) * kxx + a * kyy - zxy @ zxy
            s = a * np.log(eta_y) - np.log(eta_xy)
            ds = a * (-2 * uy @ J) / eta_y + 2 * a * (wxy @ J) / eta_xy
            if b == 1.0:
                val, g = -s / (2 * (1 - a)), -ds / (2 * (1 - a))
            else:
                c = (1 - b) / (2 * (1 - a))
                val = np.exp(c * s) / (b - 1)
                g = c * val * ds
        else:  # sm_cubic, Eq. 9 corrected (docs/math.md §3), dense (N+1)x(N+1)
            N = len(ky)
            Kx = _gram(model, model.X, p.gamma_x, p.lambda_x)
            Ky = _gram(model, model.Y, p.gamma_y, p.lambda_y)
            Sp = np.block([[Kx, kx[:, None]], [kx[None, :], np.array([[kxx]])]])
            Sq = np.block([[Ky, ky[:, None]], [ky[None, :], np.array([[kyy]])]])
            Sp_inv, Sq_inv = np.linalg.inv(Sp), np.linalg.inv(Sq)
            M = a * Sp_inv + (1 - a) * Sq_inv
            lr2 = -(a * np.linalg.slogdet(Sp)[1] + (1 - a) * np.linalg.slogdet(Sq)[1] + np.linalg.slogdet(M)[1])
            A = Sq_inv - Sq_inv @ np.linalg.inv(M) @ Sq_inv
            dl = -2 * (1 - a) * A[:N, N] @ J
            if b == 1.0:
                val, g = -lr2 / (2 * (1 - a)), -dl / (2 * (1 - a))
            else:
                c = (1 - b) / (2 * (1 - a))
                val = (np.exp(c * lr2) - 1) / (b - 1)
                g = c * np.exp(c * lr2) / (b - 1) * dl
        return float(val), np.asarray(g, dtype=float)

    return f, eta_x


def objective(model, X, Y, *, method="sm", return_gradient=False, threads=None, batch_size=None):
    """Twin of :func:`fastsm.tgp.objective`: one NumPy evaluation per row."""
    model = _inverse(check_model(model))
    X, Y = check_pairs(model, X, Y)
    vals, grads = np.empty(len(X)), np.empty(Y.shape)
    for i in range(len(X)):
        f, _ = _point_objective(model, X[i], method)
        vals[i], grads[i] = f(Y[i])
    return (vals, grads) if return_gradient else vals


def certainty(model, X, Y, *, threads=None, batch_size=None):
    """Twin of :func:`fastsm.tgp.certainty`."""
    model = _inverse(check_model(model))
    X, Y = check_pairs(model, X, Y)
    p = model.params
    a = p.alpha
    kx = _rbf(X, model.X, p.gamma_x)
    ky = _rbf(Y, model.Y, p.gamma_y)
    sumsq = lambda A: np.einsum("ij,ij->i", A, A)  # noqa: E731
    eta_x = 1 + p.lambda_x - sumsq(kx @ model.Wx.T)
    eta_y = 1 + p.lambda_y - sumsq(ky @ model.Wy.T)
    kxy = (1 - a) * kx + a * ky
    eta_xy = (1 - a) * (1 + p.lambda_x) + a * (1 + p.lambda_y) - sumsq(kxy @ model.Wxy.T)
    return (1 - a) * np.log(eta_x) + a * np.log(eta_y) - np.log(eta_xy)


def predict(model, X, *, method="sm", init=None, max_iter=None, tol=config.DEFAULT_TOL,
            threads=None, optimizer="bfgs", trust_radius=config.DEFAULT_TRUST_RADIUS, batch_size=None) -> Prediction:
    """Twin of :func:`fastsm.tgp.predict`: a ``scipy.optimize.minimize`` per point.

    ``optimizer="bfgs"`` calls SciPy's ``trust-ncg`` with a BFGS Hessian
    approximation (``scipy.optimize.BFGS``) and the trust radius capped at
    ``trust_radius * y_spread``: the same semantics as fastsm (quasi-Newton,
    steps bounded so the prediction stays in the basin of its start).
    SciPy's plain ``method="BFGS"`` is *not* used: its Wolfe line search
    extrapolates across ridges onto other basins (on Toy 1, IKLTGP, 339 of
    500 points ended elsewhere, most at a worse objective).
    ``optimizer="gd"`` is a plain NumPy gradient descent with Armijo
    backtracking, steps capped at the trust radius.  SciPy's ``gtol`` is
    ``tol`` times the gradient norm at the start.
    """
    model = _inverse(check_model(model))
    X = check_inputs(model, X)
    n, dy = len(X), model.Y.shape[1]
    if max_iter is None:
        max_iter = config.default_max_iter(dy)
    if init is None:
        init = "kl" if method in ("sm", "sm_cubic") else "linear"
    if isinstance(init, str):
        if init == "linear":
            Y0 = np.hstack([X, np.ones((n, 1))]) @ model.ridge_coef
        else:
            Y0 = predict(model, X, method="kl", init="linear", max_iter=min(max_iter, config.SM_START_ITER), tol=tol,
                         optimizer=optimizer, trust_radius=trust_radius).y
    else:
        Y0 = np.asarray(init, dtype=float).reshape(n, dy)
    radius = trust_radius * model.y_spread
    out: dict[str, list] = {k: [] for k in ("y", "f", "it", "ev", "cv")}
    # SMTGP: the beta = 1 transform is minimised, as in fastsm (its argmin is beta-free, [SM] Lemma 4.2)
    beta = 1.0 if method in ("sm", "sm_cubic") else None
    for i in range(n):
        f, _ = _point_objective(model, X[i], method, beta)
        f0, g0 = f(Y0[i])
        gnorm = float(np.linalg.norm(g0)) or 1.0
        if optimizer == "bfgs":
            res = minimize(f, Y0[i], jac=True, hess=BFGS(), method="trust-ncg",
                           options={"maxiter": max_iter, "gtol": tol * gnorm,
                                    "initial_trust_radius": 0.999 * radius, "max_trust_radius": radius})
            y, fv, it, ev, cv = res.x, res.fun, res.nit, res.nfev, bool(res.success)
        else:
            y, fv, it, ev, cv = _gd(f, Y0[i], f0, g0, max_iter, tol * model.y_spread, radius)
        for k, v in zip(("y", "f", "it", "ev", "cv"), (y, fv, it, ev, cv), strict=True):
            out[k].append(v)
    Y = np.array(out["y"]).reshape(n, dy)
    crit = np.array(out["f"], dtype=float)
    extrapolated = _rbf(X, model.X, model.params.gamma_x).max(axis=1) < config.EXTRAPOLATION_K
    lc = certainty(model, X, Y)
    lc[extrapolated] = -np.inf
    return Prediction(y=Y, log_certainty=lc, n_iter=np.array(out["it"]), n_eval=np.array(out["ev"]),
                      converged=np.array(out["cv"]) & ~extrapolated,
                      objective=_sm_objective(crit, method, model.params.beta), criterion=crit,
                      n_eta_floor=np.zeros(n, dtype=np.int64), extrapolated=extrapolated, method=method)


def _gd(f, y, fy, g, max_iter, xtol, radius):
    ev, length = 1, radius
    for it in range(1, max_iter + 1):
        gn = np.linalg.norm(g)
        if gn == 0:
            return y, fy, it - 1, ev, True
        p = -min(length, radius) * g / gn
        t = 1.0
        while True:
            yt = y + t * p
            ft, gt = f(yt)
            ev += 1
            if np.isfinite(ft) and ft <= fy + 1e-4 * t * (g @ p):
                break
            if np.max(np.abs(t * p)) < 0.1 * xtol:
                return y, fy, it - 1, ev, True
            t *= 0.5
        length = np.linalg.norm(t * p) * (2.0 if t == 1.0 else 1.0)
        step = np.max(np.abs(yt - y))
        y, fy, g = yt, ft, gt
        if step <= xtol:
            return y, fy, it, ev, True
    return y, fy, max_iter, ev, False
