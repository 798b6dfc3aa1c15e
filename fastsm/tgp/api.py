"""Fit and predict with KLTGP, IKLTGP and SMTGP (plain-Python API layer).

Validation, coercion to float64, precomputation of everything that depends on
training data only (``fit``) or on the test input only (start of
``predict``), batching of test points and thread control live here; all
numerical work happens in :mod:`fastsm._kernels`.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Literal

import numba
import numpy as np

from fastsm import config
from fastsm._kernels import objectives as obj
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.rank_one import row_dots, schur_rows
from fastsm._kernels.rbf import rbf_cross
from fastsm._products import tile_plan, times
from fastsm._progress import Progress
from fastsm._threads import Compute, run_interruptible
from fastsm._validation import as_2d, check_choice, check_int, check_scalar
from fastsm.tgp.fitting import METHODS, check_training, factorize
from fastsm.tgp.model import Prediction, TGPModel, TGPParams

Method = Literal["sm", "kl", "ikl", "sm_cubic"]
_METHOD_CODE = {"kl": obj.KL, "ikl": obj.IKL, "sm": obj.SM, "sm_cubic": obj.SM_CUBIC}
#: Iteration counts above this are accepted and treated as "no limit".
_MAX_ITER_CAP = 2**62


def fit(
    X,
    Y,
    params: TGPParams | None = None,
    *,
    methods: tuple[str, ...] | None = ("kl", "ikl", "sm"),
    threads: int | None = None,
    sample_weight=None,
) -> TGPModel:
    """Precompute a twin-GP model from training data (importance-weighted with ``sample_weight``).

    Parameters
    ----------
    X : array_like, shape (N, dx)
        Training inputs (a 1-D array is one column).
    Y : array_like, shape (N, dy)
        Training outputs.
    params : TGPParams, optional
        Hyperparameters; defaults to ``TGPParams()`` ([SM] Table 1, Toy 1).
    methods : tuple of str, str or None
        Methods the model must serve (``None``: KL, IKL and SM); ``"ikl"``
        adds ``C = K_Y^-1 K_X K_Y^-1`` (two extra N^3 products).
    threads : int, optional
        Numba threads for the kernel matrices and ``C``.  The Cholesky
        factorisations run on one BLAS thread so that the model is bitwise
        the same for every thread count (:mod:`fastsm.tgp.fitting`).
    sample_weight : array_like (N,), optional
        Importance weights ``w_i >= 0`` (e.g. ``estimate_weights(...).weights``)
        for IW-KLTGP / IW-IKLTGP / IW-SMTGP ([CS] §IV-B) in the form of
        MATH §6: ``K_X = K0_X + lambda_x W^-1``, ``K_Y = K0_Y + lambda_y W^-1``
        and ``K_XY = (1-a) K_X + a K_Y`` — GP noise ``lambda / w_i`` per
        training point.  ([CS] Eq. 12–13 read literally, ``W^1/2 K W^1/2``,
        leave every prediction unchanged.)  The weights are used as given
        (KLIEP's have mean 1); ``w = 1`` reproduces the unweighted model bit
        for bit; points with ``w_i = 0`` are left out.  ``predict`` is
        unchanged and ``Prediction.log_certainty`` is then the weighted
        certainty ``phi_W`` ([CS] Eq. 17).

    Returns
    -------
    TGPModel
        Holds private read-only copies of ``X``, ``Y`` and the factors.
    """
    params = TGPParams() if params is None else params
    X, Y, methods, w = check_training(X, Y, params, methods, sample_weight)
    return TGPModel._from_parts(X, Y, params, methods, factorize(X, Y, params, methods, threads, w), w)


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
    """Per-point data that depends on x only (MATH §2).

    Returns ``F, eta_x, k_x^T w_x, w_x, extrapolated``.
    """
    p = model.params
    Kx = np.empty((Xb.shape[0], model.n_train))
    rbf_cross(Xb, model.X, p.gamma_x, Kx)
    extrapolated = Kx.max(axis=1) < config.EXTRAPOLATION_K
    Ux = _times(Kx, model.Kx_inv)
    eta_x = np.empty(Xb.shape[0])
    schur_rows(Kx, Ux, 1.0 + p.lambda_x, _floor(model), eta_x)
    W = _times(Kx, model.Kxy_inv)
    xwx = np.empty(Xb.shape[0])
    row_dots(Kx, W, xwx)
    if method == "kl":
        F = Ux
    elif method == "ikl":
        F = _times(Kx, model.Ky_inv)
    elif method == "sm":
        F = W
    else:
        F = Kx
    return F, eta_x, xwx, W, extrapolated


def _times(A: np.ndarray, M: np.ndarray) -> np.ndarray:
    """``A @ M`` row by row independently of the other rows (:func:`fastsm._products.times`)."""
    return times(A, M)


def _method_mats(model: TGPModel, method: str):
    if method == "ikl":
        if model.C is None:
            raise ValueError("this model was fitted without 'ikl' in methods; refit with methods including 'ikl'")
        return model.Ky_inv, model.C
    if method == "sm":
        return model.Ky_inv, model.Kxy_inv
    return model.Ky_inv, model.Ky_inv


def _batches(n: int, batch_size: int):
    for s in range(0, n, batch_size):
        yield s, min(n, s + batch_size)


def _sm_value(criterion: np.ndarray, method: str, beta: float) -> np.ndarray:
    """SM objective from the beta-free criterion ``R = -s / (2(1-a))`` (beta = 1 form).

    Quadratic form: ``exp((beta-1) R) / (beta-1)``; cubic (full divergence):
    ``expm1((beta-1) R) / (beta-1)``.  May under/overflow: that is the value.
    """
    if method not in ("sm", "sm_cubic") or beta == 1.0:
        return criterion.copy()
    with np.errstate(over="ignore", under="ignore"):
        if method == "sm":
            return np.exp((beta - 1.0) * criterion) / (beta - 1.0)
        return np.expm1((beta - 1.0) * criterion) / (beta - 1.0)


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
    progress=False,
    ftol: float = config.DEFAULT_FTOL,
) -> Prediction:
    """Predict outputs by minimising a TGP objective for every test input.

    Parameters
    ----------
    model : TGPModel or LocalTGPModel
        From :func:`fit`, or :func:`fit_local` (each test point predicted by
        the model of its nearest training inputs).
    X : array_like, shape (n, dx)
        Test inputs.
    method : {"sm", "kl", "ikl", "sm_cubic"}
        SMTGP (quadratic form, [SM] Eq. 16), KLTGP (Eq. 5), IKLTGP (Eq. 7), or
        SMTGP through the O(N^3) Nielsen–Nock form (Eq. 9, reference only).
        SMTGP minimises the beta-free transform ``-s / (2(1-a))`` (its argmin
        does not depend on beta, [SM] Lemma 4.2); ``Prediction.objective``
        reports the SM value at the result.
    init : None, "linear", "kl" or array_like (n, dy)
        Start.  ``None``: ``"linear"`` (ridge regression) for KL/IKL and
        ``"kl"`` (the KLTGP prediction, [SM] §5.2) for SM.
    max_iter : int
        Maximum optimiser iterations per point (default 50, as [SM] §5.2).
    tol, ftol : float
        A point has converged when its last full step (one the line search
        did not shorten) moved every coordinate by at most
        ``tol * model.y_spread``, or lowered the objective by at most
        ``ftol * |f|``.  The default ``ftol = 1e-12`` sits at the objective's
        rounding floor: below it the objective cannot tell points apart, and
        further steps only chase rounding noise (docs/performance.md has the
        evaluation counts).  ``ftol = 0`` leaves the step test alone.
    threads : int, optional
        Numba threads for this call (BLAS runs single-threaded inside them).
        Results are bitwise the same for every thread count.
    optimizer : {"bfgs", "gd"}
        Quasi-Newton (BFGS on the inverse Hessian) or gradient descent.
    trust_radius : float
        Largest step, in units of ``model.y_spread``; keeps each prediction
        in the basin of its start.
    batch_size : int
        Test points optimised together (bounds memory at about
        ``8 * batch_size * N`` doubles).  Results do not depend on it on
        this machine's OpenBLAS (docs/accuracy.md).
    progress : bool or callable
        Report progress per batch (local models: per group of test points):
        ``True`` shows tqdm when installed, else a line on stderr; a
        callable gets ``(done, total)`` test points.  Off by default.

    Returns
    -------
    Prediction
        Test inputs outside the training data's kernel support are flagged
        ``extrapolated`` (their ``log_certainty`` is ``-inf``) and a
        ``RuntimeWarning`` says how many there were.

    Notes
    -----
    Ctrl-C interrupts the call within one evaluation round and raises
    ``KeyboardInterrupt``.
    """
    from fastsm.tgp.local import LocalTGPModel, predict_local

    if isinstance(model, LocalTGPModel):
        max_iter, tol, trust_radius, batch_size = _check_options(method, optimizer, max_iter, tol, trust_radius,
                                                                 batch_size)
        ftol = check_scalar("ftol", ftol, low=0.0)
        return predict_local(model, X, method=method, init=init, max_iter=max_iter, tol=tol, threads=threads,
                             optimizer=optimizer, trust_radius=trust_radius, batch_size=batch_size,
                             progress=progress, ftol=ftol)
    model = _check_model(model)
    X = _check_inputs(model, X)
    max_iter, tol, trust_radius, batch_size = _check_options(method, optimizer, max_iter, tol, trust_radius,
                                                             batch_size)
    ftol = check_scalar("ftol", ftol, low=0.0)
    n, dy = X.shape[0], model.Y.shape[1]
    Y0 = start(init, method, (n, dy), "n test points × dy",
               linear=lambda: linear_start(X, model.ridge_coef),
               kl=lambda: predict(model, X, method="kl", init="linear", max_iter=max_iter, tol=tol, threads=threads,
                                  optimizer=optimizer, trust_radius=trust_radius, batch_size=batch_size,
                                  ftol=ftol).y)
    spread = np.full(n, model.y_spread)
    with Progress(progress, n, "predict") as bar:
        res = _optimize(model, method, Y0, lambda s, e: _point_data(model, X[s:e], method), None, spread,
                        max_iter=max_iter, tol=tol, ftol=ftol, trust_radius=trust_radius, optimizer=optimizer,
                        batch_size=batch_size, threads=threads, progress=bar)
    _warn_extrapolated(res.extrapolated, n)
    return res


def linear_start(X: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``[X, 1] @ coef`` row by row: a row's value does not depend on the other rows (a BLAS product's does)."""
    dx = X.shape[1]
    return (X[:, :, None] * coef[None, :dx, :]).sum(axis=1) + coef[dx]


def start(init, method: str, shape: tuple[int, int], rows: str, *, linear, kl) -> np.ndarray:
    """The optimiser's start from ``init``: ``None``, ``"linear"``, ``"kl"`` or an array of ``shape``.

    ``None`` is ``"kl"`` for SMTGP ([SM] §5.2) and ``"linear"`` otherwise;
    ``linear()`` and ``kl()`` compute those starts (the KL run's extrapolation
    warning is left to the caller's own).
    """
    if init is None:
        init = "kl" if method in ("sm", "sm_cubic") else "linear"
    if isinstance(init, str):
        check_choice("init", init, ("linear", "kl"))
        if init == "linear":
            Y0 = linear()
        else:
            with quiet():  # reported once, by the caller
                Y0 = kl()
    else:
        Y0 = as_2d("init", init)
        if Y0.shape != shape:
            raise ValueError(f"init must have shape {shape} ({rows}), got {Y0.shape}")
    return np.ascontiguousarray(Y0, dtype=np.float64)


def _check_options(method, optimizer, max_iter, tol, trust_radius, batch_size):
    check_choice("method", method, METHODS)
    check_choice("optimizer", optimizer, ("bfgs", "gd"))
    max_iter = min(check_int("max_iter", max_iter, low=0), _MAX_ITER_CAP)
    tol = check_scalar("tol", tol, low=0.0)
    trust_radius = check_scalar("trust_radius", trust_radius, low=0.0, low_open=True)
    batch_size = check_int("batch_size", batch_size, low=1)
    return max_iter, tol, trust_radius, batch_size


_QUIET = threading.local()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Leave fastsm's extrapolation warnings to the enclosing call, in this thread only.

    Never touches ``warnings.filters``: ``warnings.catch_warnings`` is not
    thread-safe, and a filter restored by the wrong thread stays for good.
    """
    before = getattr(_QUIET, "on", False)
    _QUIET.on = True
    try:
        yield
    finally:
        _QUIET.on = before


def _warn_extrapolated(ex: np.ndarray, n: int) -> None:
    if ex.any() and not getattr(_QUIET, "on", False):
        warnings.warn(
            f"{int(ex.sum())} of {n} test inputs lie outside the training inputs' kernel support "
            f"(every k(x, x_i) < {config.EXTRAPOLATION_K:g}): their prediction is the start unchanged; "
            "see Prediction.extrapolated", RuntimeWarning, stacklevel=3)


def _optimize(model: TGPModel, method: str, Y0: np.ndarray, point_data, held, spread: np.ndarray, *,
              max_iter: int, tol: float, trust_radius: float, optimizer: str, batch_size: int,
              threads: int | None, progress: Progress | None = None,
              ftol: float = config.DEFAULT_FTOL) -> Prediction:
    """The batched minimisation shared by :func:`predict` and the leave-one-out predictions.

    ``point_data(s, e)`` returns ``F, eta_x, xwx, W, extrapolated`` of points
    ``s:e``; ``held`` is ``None`` or the left-out training index per point;
    ``spread`` the output spread of each point's model (tolerance and trust
    radius unit).
    """
    n, dy = Y0.shape
    p = model.params
    M1, M2 = _method_mats(model, method)
    code = _METHOD_CODE[method]
    # SM: the beta = 1 (Rényi) transform is minimised; the SM value is formed at the end
    beta = 1.0 if method in ("sm", "sm_cubic") else p.beta
    out = {
        "y": np.empty((n, dy)), "f": np.empty(n), "it": np.empty(n, dtype=np.int64),
        "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "h": np.empty(n, dtype=np.int64),
        "lc": np.empty(n), "ex": np.empty(n, dtype=bool),
    }
    floor = _floor(model)
    xtol = np.ascontiguousarray(tol * spread)
    max_step = np.ascontiguousarray(trust_radius * spread)

    def body(run: Compute) -> None:
        for s, e in _batches(n, batch_size):
            if run.stop[0]:
                return
            F, eta_x, xwx, W, ex = point_data(s, e)
            hb = None if held is None else held[s:e]
            Yb, fb, itb, evb, cvb, hits, ey, exy = minimize_batch(
                code, Y0[s:e], model.Y, p.gamma_y, 1.0 + p.lambda_y, 1.0 + p.lambda_x, p.alpha, beta,
                floor, M1, M2, F, eta_x, xwx, model.logdet_y, model.logdet_x,
                max_iter, xtol[s:e], ftol, max_step[s:e], optimizer == "bfgs", config.DEFAULT_WINDOW,
                numba.get_num_threads(), run.stop,
                model.Kx_inv if method == "sm_cubic" else None, hb, tile_plan(model.n_train),
            )
            out["y"][s:e], out["f"][s:e], out["it"][s:e], out["ev"][s:e] = Yb, fb, itb, evb
            out["cv"][s:e], out["h"][s:e], out["ex"][s:e] = cvb & ~ex, hits, ex
            if method == "sm":  # the last accepted evaluation already holds eta_y and eta_xy
                out["lc"][s:e] = _certainty_from(p.alpha, eta_x, ey, exy)
            else:
                out["lc"][s:e] = _log_certainty(model, Yb, eta_x, xwx, W, held=hb)
            if progress is not None:
                progress.step(e - s)

    # ~30 evaluations of 2 N^2 flops per point and product
    run_interruptible(threads, body, flops=60.0 * n * model.n_train**2 * (1 if method == "kl" else 2))
    ex = out["ex"]
    out["lc"][ex] = -np.inf
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=_sm_value(out["f"], method, p.beta), criterion=out["f"], n_eta_floor=out["h"],
                      extrapolated=ex, method=method)


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

    def body(run: Compute) -> None:
        for s, e in _batches(n, batch_size):
            F, eta_x, xwx, _, _ = _point_data(model, X[s:e], method)
            evaluate(model, method, F, eta_x, xwx, Y[s:e], M1, M2, val[s:e], grad[s:e])

    run_interruptible(threads, body, flops=6.0 * n * model.n_train**2)
    return (val, grad) if return_gradient else val


def evaluate(model: TGPModel, method: str, F, eta_x, xwx, Yb, M1, M2, val, grad, *, beta: float | None = None,
             held=None):
    """Kernel call of one batch (also used by the benchmarks); returns ``(eta_y, eta_xy)``.

    ``held``: left-out training index per row (leave-one-out), or ``None``.
    """
    p = model.params
    m = Yb.shape[0]
    eta_y, eta_xy = np.empty(m), np.empty(m)
    plan = tile_plan(model.n_train)
    obj.evaluate_rows(
        _METHOD_CODE[method], np.arange(m), np.ascontiguousarray(Yb), model.Y, p.gamma_y, 1.0 + p.lambda_y,
        1.0 + p.lambda_x, p.alpha, p.beta if beta is None else beta, _floor(model), M1, M2, F, eta_x, xwx,
        model.logdet_y, model.logdet_x, obj.workspace(m, model.n_train, plan.heights[0]), val, grad, eta_y, eta_xy,
        np.zeros(m, dtype=np.int64), model.Kx_inv if method == "sm_cubic" else None,
        None if held is None else np.ascontiguousarray(held, dtype=np.int64), plan, numba.get_num_threads(),
    )
    return eta_y, eta_xy


def certainty(model: TGPModel, X, Y, *, threads: int | None = None,
              batch_size: int = config.DEFAULT_BATCH_SIZE) -> np.ndarray:
    """``log phi_a(x, y)`` ([SM] §4.2, Lemma 4.1) for given input/output pairs.

    ``log phi = (1-a) log eta_x + a log eta_y - log eta_xy`` with the model's
    ``alpha``, evaluated as is (no extrapolation flag: see
    :attr:`Prediction.log_certainty` for predictions).
    """
    model = _check_model(model)
    X, Y = _pairs(model, X, Y)
    batch_size = check_int("batch_size", batch_size, low=1)
    out = np.empty(X.shape[0])

    def body(run: Compute) -> None:
        for s, e in _batches(X.shape[0], batch_size):
            _, eta_x, xwx, W, _ = _point_data(model, X[s:e], "sm")
            out[s:e] = _log_certainty(model, Y[s:e], eta_x, xwx, W)

    run_interruptible(threads, body, flops=6.0 * X.shape[0] * model.n_train**2)
    return out


def _log_certainty(model: TGPModel, Yb: np.ndarray, eta_x, xwx, W, *, held=None) -> np.ndarray:
    """``(1-a) log eta_x + a log eta_y - log eta_xy`` from one SM evaluation (floored etas)."""
    m = Yb.shape[0]
    eta_y, eta_xy = evaluate(model, "sm", W, eta_x, xwx, Yb, model.Ky_inv, model.Kxy_inv, np.empty(m),
                             np.empty(Yb.shape), beta=1.0, held=held)
    return _certainty_from(model.params.alpha, eta_x, eta_y, eta_xy)


def _certainty_from(a: float, eta_x, eta_y, eta_xy) -> np.ndarray:
    return (1.0 - a) * np.log(eta_x) + a * np.log(eta_y) - np.log(eta_xy)
