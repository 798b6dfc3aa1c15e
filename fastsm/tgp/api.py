"""Fit and predict with KLTGP, IKLTGP and SMTGP (plain-Python API layer).

Validation, coercion to float64, precomputation of everything that depends on
training data only (``fit``) or on the test input only (start of
``predict``), batching of test points and thread control live here; all
numerical work happens in :mod:`fastsm._kernels`.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy.linalg import lapack

from fastsm import config
from fastsm._kernels import objectives as obj
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.rank_one import schur_rows
from fastsm._kernels.rbf import rbf_cross, rbf_gram
from fastsm._threads import thread_limits
from fastsm._validation import as_2d, check_choice, check_int, check_scalar
from fastsm.tgp.model import Prediction, TGPModel, TGPParams

Method = Literal["sm", "kl", "ikl", "sm_cubic"]
METHODS: tuple[str, ...] = ("sm", "kl", "ikl", "sm_cubic")
_METHOD_CODE = {"kl": obj.KL, "ikl": obj.IKL, "sm": obj.SM, "sm_cubic": obj.SM_CUBIC}


def spd_inverse(K: np.ndarray, name: str, lam_name: str) -> tuple[np.ndarray, float]:
    """Inverse and log-determinant of an SPD matrix by Cholesky (LAPACK potrf/potri).

    Raises
    ------
    ValueError
        If ``K`` is not numerically positive definite (e.g. duplicate
        training points with a zero regulariser).
    """
    L, info = lapack.dpotrf(K, lower=1, clean=1)
    if info != 0:
        raise ValueError(
            f"{name} is not positive definite (Cholesky failed at column {info}); "
            f"duplicate or near-duplicate training points need {lam_name} > 0"
        )
    diag = np.diag(L)
    logdet = 2.0 * float(np.sum(np.log(diag)))
    inv, info = lapack.dpotri(L, lower=1)
    if info != 0:  # pragma: no cover - potrf succeeded, potri cannot fail
        raise ValueError(f"{name} could not be inverted (LAPACK info {info})")
    inv = np.tril(inv)
    inv = inv + np.tril(inv, -1).T
    if not np.all(np.isfinite(inv)):
        raise ValueError(f"{name} is numerically singular; increase {lam_name}")
    return np.ascontiguousarray(inv), logdet


def _ridge(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Ridge regression with an unpenalised bias: Bo & Sminchisescu's start."""
    n, dx = X.shape
    Xa = np.hstack([X, np.ones((n, 1))])
    Xc = X - X.mean(axis=0)
    r = 1e-6 * max(float(np.mean(np.sum(Xc * Xc, axis=0))), 1e-300)
    A = Xa.T @ Xa
    A[np.arange(dx), np.arange(dx)] += r
    return np.linalg.solve(A, Xa.T @ Y)


def fit(
    X,
    Y,
    params: TGPParams | None = None,
    *,
    methods: tuple[str, ...] = ("kl", "ikl", "sm"),
    threads: int | None = None,
) -> TGPModel:
    """Precompute a twin-GP model from training data.

    Parameters
    ----------
    X : array_like, shape (N, dx)
        Training inputs (a 1-D array is one column).
    Y : array_like, shape (N, dy)
        Training outputs.
    params : TGPParams, optional
        Hyperparameters; defaults to ``TGPParams()`` ([SM] Table 1, Toy 1).
    methods : tuple of str
        Methods the model must serve; ``"ikl"`` adds ``C = K_Y^-1 K_X K_Y^-1``
        (two extra N^3 products).
    threads : int, optional
        Threads for the O(N^3) factorisations (restored afterwards).

    Returns
    -------
    TGPModel
    """
    params = TGPParams() if params is None else params
    if not isinstance(params, TGPParams):
        raise TypeError(f"params must be a TGPParams, got {type(params).__name__}")
    X = as_2d("X", X)
    Y = as_2d("Y", Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    if isinstance(methods, str):
        methods = (methods,)
    for m in methods:
        check_choice("methods", m, METHODS)
    p = params
    Kx = rbf_gram(X, p.gamma_x, p.lambda_x)
    Ky = rbf_gram(Y, p.gamma_y, p.lambda_y)
    Kxy = (1.0 - p.alpha) * Kx + p.alpha * Ky
    with thread_limits(threads, blas="same"):
        Kx_inv, ld_x = spd_inverse(Kx, "K_X", "lambda_x")
        Ky_inv, ld_y = spd_inverse(Ky, "K_Y", "lambda_y")
        Kxy_inv, ld_xy = spd_inverse(Kxy, "K_XY", "lambda_x or lambda_y")
        C = None
        if "ikl" in methods:
            C = Ky_inv @ (Kx @ Ky_inv)
            C = np.ascontiguousarray(0.5 * (C + C.T))
    spread = float(np.sqrt(np.sum(np.var(Y, axis=0))))
    if spread == 0.0:
        spread = 1.0
    return TGPModel(
        X=X, Y=Y, params=p, Kx_inv=Kx_inv, Ky_inv=Ky_inv, Kxy_inv=Kxy_inv, C=C,
        logdet_x=ld_x, logdet_y=ld_y, logdet_xy=ld_xy, y_spread=spread, ridge_coef=_ridge(X, Y),
    )


def _check_model(model) -> TGPModel:
    if not isinstance(model, TGPModel):
        raise TypeError(f"model must be a TGPModel from fastsm.tgp.fit, got {type(model).__name__}")
    return model


def _check_inputs(model: TGPModel, X, name: str = "X") -> np.ndarray:
    X = as_2d(name, X)
    if X.shape[1] != model.X.shape[1]:
        raise ValueError(f"{name} must have {model.X.shape[1]} columns (the training inputs' dx), got {X.shape[1]}")
    return X


def _floor(model: TGPModel) -> float:
    p = model.params
    return config.ETA_FLOOR_REL * (1.0 + max(p.lambda_x, p.lambda_y))


def _point_data(model: TGPModel, Xb: np.ndarray, method: str):
    """Per-point data that depends on x only (MATH §2): F, eta_x, k_x^T w_x, w_x."""
    p = model.params
    Kx = np.empty((Xb.shape[0], model.n_train))
    rbf_cross(Xb, model.X, p.gamma_x, Kx)
    Ux = _times(Kx, model.Kx_inv)
    eta_x = np.empty(Xb.shape[0])
    schur_rows(Kx, Ux, 1.0 + p.lambda_x, _floor(model), eta_x)
    W = _times(Kx, model.Kxy_inv)
    xwx = np.einsum("ij,ij->i", Kx, W)
    if method == "kl":
        F = Ux
    elif method == "ikl":
        F = _times(Kx, model.Ky_inv)
    elif method == "sm":
        F = W
    else:
        F = Kx
    return F, eta_x, xwx, W


def _times(A: np.ndarray, M: np.ndarray) -> np.ndarray:
    out = np.empty((A.shape[0], M.shape[1]))
    obj.blocked_gemm(A, M, out)
    return out


def _method_mats(model: TGPModel, method: str):
    if method == "ikl":
        if model.C is None:
            raise ValueError("this model was fitted without 'ikl' in methods; refit with methods including 'ikl'")
        return model.Ky_inv, model.C
    if method == "sm":
        return model.Ky_inv, model.Kxy_inv
    if method == "sm_cubic":
        return model.Ky_inv, model.Kx_inv
    return model.Ky_inv, model.Ky_inv


def _batches(n: int, batch_size: int):
    for s in range(0, n, batch_size):
        yield s, min(n, s + batch_size)


def predict(
    model: TGPModel,
    X,
    *,
    method: Method = "sm",
    init=None,
    max_iter: int = config.DEFAULT_MAX_ITER,
    tol: float = config.DEFAULT_TOL,
    threads: int | None = None,
    optimizer: Literal["bfgs", "gd"] = "bfgs",
    trust_radius: float = config.DEFAULT_TRUST_RADIUS,
    batch_size: int = config.DEFAULT_BATCH_SIZE,
) -> Prediction:
    """Predict outputs by minimising a TGP objective for every test input.

    Parameters
    ----------
    model : TGPModel
        From :func:`fit`.
    X : array_like, shape (n, dx)
        Test inputs.
    method : {"sm", "kl", "ikl", "sm_cubic"}
        SMTGP (quadratic form, [SM] Eq. 16), KLTGP (Eq. 5), IKLTGP (Eq. 7), or
        SMTGP through the O(N^3) Nielsen–Nock form (Eq. 9, reference only).
    init : None, "linear", "kl" or array_like (n, dy)
        Start.  ``None``: ``"linear"`` (ridge regression) for KL/IKL and
        ``"kl"`` (the KLTGP prediction, [SM] §5.2) for SM.
    max_iter : int
        Maximum optimiser iterations per point (default 50, as [SM] §5.2).
    tol : float
        A point has converged when its last step is at most
        ``tol * model.y_spread`` in every coordinate.
    threads : int, optional
        Numba and BLAS threads for this call (restored afterwards).
    optimizer : {"bfgs", "gd"}
        Quasi-Newton (BFGS on the inverse Hessian) or gradient descent.
    trust_radius : float
        Largest step, in units of ``model.y_spread``; keeps each prediction
        in the basin of its start.
    batch_size : int
        Test points optimised together (bounds memory at about
        ``6 * batch_size * N`` doubles).

    Returns
    -------
    Prediction
    """
    model = _check_model(model)
    X = _check_inputs(model, X)
    check_choice("method", method, METHODS)
    check_choice("optimizer", optimizer, ("bfgs", "gd"))
    max_iter = check_int("max_iter", max_iter, low=0)
    tol = check_scalar("tol", tol, low=0.0)
    trust_radius = check_scalar("trust_radius", trust_radius, low=0.0, low_open=True)
    batch_size = check_int("batch_size", batch_size, low=1)
    n, dy = X.shape[0], model.Y.shape[1]
    if init is None:
        init = "kl" if method in ("sm", "sm_cubic") else "linear"
    if isinstance(init, str):
        check_choice("init", init, ("linear", "kl"))
        if init == "linear":
            Y0 = np.hstack([X, np.ones((n, 1))]) @ model.ridge_coef
        else:
            Y0 = predict(model, X, method="kl", init="linear", max_iter=max_iter, tol=tol, threads=threads,
                         optimizer=optimizer, trust_radius=trust_radius, batch_size=batch_size).y
    else:
        Y0 = as_2d("init", init)
        if Y0.shape != (n, dy):
            raise ValueError(f"init must have shape {(n, dy)} (n test points × dy), got {Y0.shape}")
    Y0 = np.ascontiguousarray(Y0, dtype=np.float64)
    p = model.params
    M1, M2 = _method_mats(model, method)
    code = _METHOD_CODE[method]
    out_y = np.empty((n, dy))
    out_f = np.empty(n)
    out_it = np.empty(n, dtype=np.int64)
    out_ev = np.empty(n, dtype=np.int64)
    out_cv = np.empty(n, dtype=bool)
    out_h = np.empty(n, dtype=np.int64)
    out_lc = np.empty(n)
    floor = _floor(model)
    with thread_limits(threads):
        for s, e in _batches(n, batch_size):
            F, eta_x, xwx, W = _point_data(model, X[s:e], method)
            Yb, fb, itb, evb, cvb, hb = minimize_batch(
                code, Y0[s:e], model.Y, p.gamma_y, 1.0 + p.lambda_y, 1.0 + p.lambda_x, p.alpha, p.beta,
                floor, M1, M2, F, eta_x, xwx, model.logdet_y, model.logdet_x,
                max_iter, tol * model.y_spread, trust_radius * model.y_spread, optimizer == "bfgs",
            )
            out_y[s:e], out_f[s:e], out_it[s:e], out_ev[s:e], out_cv[s:e], out_h[s:e] = Yb, fb, itb, evb, cvb, hb
            Kbuf = np.empty((e - s, model.n_train))
            obj.log_certainty_rows(Yb, model.Y, p.gamma_y, 1.0 + p.lambda_y, 1.0 + p.lambda_x, p.alpha, floor,
                                   model.Ky_inv, model.Kxy_inv, W, eta_x, xwx, Kbuf, out_lc[s:e])
    return Prediction(y=out_y, log_certainty=out_lc, n_iter=out_it, n_eval=out_ev, converged=out_cv,
                      objective=out_f, n_eta_floor=out_h, method=method)


def _pairs(model: TGPModel, X, Y):
    X = _check_inputs(model, X)
    Y = as_2d("Y", Y)
    if Y.shape != (X.shape[0], model.Y.shape[1]):
        raise ValueError(f"Y must have shape {(X.shape[0], model.Y.shape[1])} (one output per row of X), "
                         f"got {Y.shape}")
    return X, Y


def objective(
    model: TGPModel,
    X,
    Y,
    *,
    method: Method = "sm",
    return_gradient: bool = False,
    threads: int | None = None,
    batch_size: int = config.DEFAULT_BATCH_SIZE,
):
    """The prediction objective at given outputs (diagnostics, comparisons).

    Row ``i`` evaluates the objective of test input ``X[i]`` at ``Y[i]``:
    KL: ``k(y,y) - 2 k_y^T u_x - eta_x log eta_y`` ([SM] Eq. 5); IKL: Eq. 7;
    SM: ``exp(c s) / (beta - 1)`` with ``s = a log eta_y - log eta_xy`` and
    ``c = (1-beta) / (2(1-a))`` (Eq. 16; ``-s / (2(1-a))`` at ``beta = 1``);
    SM_CUBIC: the full divergence ``D_{a,b}(p_X : p_Y)`` by Eq. 9 (corrected).

    Returns
    -------
    values : ndarray (n,)
    gradient : ndarray (n, dy), only if ``return_gradient``
    """
    model = _check_model(model)
    X, Y = _pairs(model, X, Y)
    check_choice("method", method, METHODS)
    batch_size = check_int("batch_size", batch_size, low=1)
    M1, M2 = _method_mats(model, method)
    n, dy = Y.shape
    val = np.empty(n)
    grad = np.empty((n, dy))
    with thread_limits(threads):
        for s, e in _batches(n, batch_size):
            F, eta_x, xwx, _ = _point_data(model, X[s:e], method)
            evaluate(model, method, F, eta_x, xwx, Y[s:e], M1, M2, val[s:e], grad[s:e])
    return (val, grad) if return_gradient else val


def evaluate(model: TGPModel, method: str, F, eta_x, xwx, Yb, M1, M2, val, grad):
    """Kernel call of one batch (also used by the benchmarks)."""
    p = model.params
    m = Yb.shape[0]
    obj.evaluate_rows(
        _METHOD_CODE[method], np.arange(m), np.ascontiguousarray(Yb), model.Y, p.gamma_y, 1.0 + p.lambda_y,
        1.0 + p.lambda_x, p.alpha, p.beta, _floor(model), M1, M2, F, eta_x, xwx, model.logdet_y,
        model.logdet_x, np.empty((m, model.n_train)), val, grad, np.empty(m), np.empty(m),
        np.zeros(m, dtype=np.int64),
    )


def certainty(model: TGPModel, X, Y, *, threads: int | None = None,
              batch_size: int = config.DEFAULT_BATCH_SIZE) -> np.ndarray:
    """``log phi_a(x, y)`` ([SM] §4.2, Lemma 4.1) for given input/output pairs."""
    model = _check_model(model)
    X, Y = _pairs(model, X, Y)
    p = model.params
    out = np.empty(X.shape[0])
    with thread_limits(threads):
        for s, e in _batches(X.shape[0], batch_size):
            _, eta_x, xwx, W = _point_data(model, X[s:e], "sm")
            obj.log_certainty_rows(Y[s:e], model.Y, p.gamma_y, 1.0 + p.lambda_y, 1.0 + p.lambda_x, p.alpha,
                                   _floor(model), model.Ky_inv, model.Kxy_inv, W, eta_x, xwx,
                                   np.empty((e - s, model.n_train)), out[s:e])
    return out
