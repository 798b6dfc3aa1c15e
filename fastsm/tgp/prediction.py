"""The batched prediction machinery of global, leave-one-out and local TGP predictions.

Precomputation of what depends on the test input only (``prepare_points``), the
starts, batching of test points, thread control and the optimiser's driver
(``optimize_points``) live here; all numerical work happens in :mod:`fastsm._kernels`.
Public entry points: :mod:`fastsm.tgp.api`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Iterator
from typing import Literal

import numpy as np

from fastsm import config
from fastsm._interrupt import run_interruptible
from fastsm._kernels import objectives as obj
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.points import linear_rows, point_data, supported_alternatives
from fastsm._kernels.predict import GIVEN, KL_START, LINEAR, Run, predict_rows
from fastsm._kernels.quasi_newton import Options, plain_start, stop_rule
from fastsm._progress import Progress
from fastsm._threads import Compute, run_chunks, thread_limits
from fastsm._validation import as_2d, check_choice
from fastsm._warn import warn
from fastsm.exceptions import ExtrapolationWarning
from fastsm.tgp.model import Prediction, TGPModel
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.views import (
    METHOD_CODE,
    LeaveOneOut,
    cubic_factors,
    fitted,
    held_rows,
    objective_view,
    predicts_few,
    products_plan,
)

Method = Literal["sm", "kl", "ikl", "sm_cubic"]


def prepare_points(model: TGPModel, Xb: np.ndarray, method: str, held: np.ndarray | None = None,
                   loo: LeaveOneOut | None = None):
    """Per-point data that depends on x only (docs/math.md §2; the table of :mod:`fastsm._kernels.objectives`).

    Returns ``F, eta_x, g_xy, extrapolated`` with ``g_xy = W_XY k_x`` (SMTGP's ``F``, and the
    certainty's); :func:`fastsm._kernels.points.point_data`, in this thread.
    ``held`` (leave-one-out): the training point left out of each row's model; every forward
    product is projected onto the ``N-1``-point model (:func:`~fastsm._kernels.objectives.project_out`)
    with ``loo``, the model's :func:`~fastsm.tgp.views.leave_one_out`.
    """
    return prepare_batch(model, Xb, method, held, loo)[:4]


def prepare_batch(model: TGPModel, Xb: np.ndarray, method: str, held: np.ndarray | None = None,
                  loo: LeaveOneOut | None = None):
    """:func:`prepare_points` and, fifth, each point's nearest training input (the supported start's
    alternative)."""
    return point_data(fitted(model, loo), np.ascontiguousarray(Xb, dtype=np.float64), METHOD_CODE[method],
                      products_plan(model), held_rows(held, Xb.shape[0], loo))


def batch_ranges(n: int, batch_size: int):
    for s in range(0, n, batch_size):
        yield s, min(n, s + batch_size)


def sm_value(criterion: np.ndarray, method: str, beta: float) -> np.ndarray:
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


def linear_start(X: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``[X, 1] @ coef`` row by row (:func:`fastsm._kernels.points.linear_rows`): a row's value does not
    depend on the other rows (a BLAS product's does)."""
    return linear_rows(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(coef, dtype=np.float64))


def supported_start(model: TGPModel, X: np.ndarray, Y0: np.ndarray, method: str,
                    held: np.ndarray | None = None, spread: np.ndarray | None = None,
                    threads: int | None = None, loo: LeaveOneOut | None = None) -> np.ndarray:
    """The ridge start ``Y0``, or, where it leaves the training outputs' bounding box, the output of the
    nearest training input if the objective is lower there.

    A linear start outside the outputs can sit where the objective is flat (every ``k(y, y_i)`` small), on
    a spurious minimum of the twin-GP objective far from the data (correlated inputs: a test input with
    ``max k(x, x_i) = 0.999`` started at 3.9 for outputs in [-1.1, 1.1] and stayed there).  Rows are
    independent; extrapolated inputs (no kernel support) keep the ridge start.  ``held``
    (leave-one-out): each row's left-out training point, excluded from its bounds, its nearest
    input and its objective (``loo``: the model's :func:`~fastsm.tgp.views.leave_one_out`); ``spread``:
    each row's model's output spread (default ``model.y_spread``).  Runs on ``threads`` threads.

    Predictions choose it inside their optimisation (:func:`optimize_points` with ``supported``:
    :func:`fastsm._kernels.points.supported_alternatives` and the first round of
    :func:`~fastsm._kernels.optimize.minimize_batch`); this is that choice alone, for a start
    reused by several predictions (:func:`fastsm.tgp.select`).
    """
    n = Y0.shape[0]
    Y0 = np.array(Y0, dtype=np.float64, order="C", copy=True)
    if method == "sm_cubic" or n == 0:
        return Y0
    unit = np.full(n, model.y_spread) if spread is None else np.ascontiguousarray(spread, dtype=np.float64)
    beta = 1.0 if method == "sm" else model.params.beta
    hb = held_rows(held, n, loo)
    objective, fit, plan = objective_view(model, method, beta, loo), fitted(model, loo), products_plan(model, method)
    out = np.empty_like(Y0)

    def chunk(s: int, e: int) -> None:
        F, eta_x, _, ex, nearest = prepare_batch(model, X[s:e], method, hb[s:e], loo)
        start = supported_alternatives(fit.Y, Y0[s:e], nearest, ex, hb[s:e], unit[s:e])
        opts = Options(stop_rule(0, unit[s:e], 0.0), unit[s:e], True, config.DEFAULT_WINDOW, False)
        out[s:e] = minimize_batch(objective, obj.Points(F, eta_x, hb[s:e]), start, opts,
                                  np.zeros(1, dtype=np.int64), None, plan)[0]

    with thread_limits(threads) as nt:
        run_chunks(n, nt, chunk)
    return out


def kl_start_options(opts: PredictOptions) -> PredictOptions:
    """The options of SMTGP's KLTGP start ([SM] §5.2): KLTGP from the ridge start, at most
    :func:`kl_start_iterations`, no progress of its own."""
    return dataclasses.replace(opts, method="kl", init="linear", max_iter=kl_start_iterations(opts.max_iter),
                               progress=False)


def kl_start_iterations(max_iter: int) -> int:
    """KLTGP iterations of SMTGP's ``init="kl"`` start: at most :data:`fastsm.config.SM_START_ITER`
    (the start need not be converged, SMTGP's own optimisation takes it from there)."""
    return min(max_iter, config.SM_START_ITER)


def resolved_init(init, method: str):
    """``init`` with ``None`` resolved: ``"kl"`` for SMTGP ([SM] §5.2), ``"linear"`` otherwise."""
    if init is None:
        return "kl" if method in ("sm", "sm_cubic") else "linear"
    return init


def is_supported(init, method: str) -> bool:
    """Whether the start of ``init`` is the supported ridge start (:func:`supported_start`)."""
    chosen = resolved_init(init, method)
    return isinstance(chosen, str) and chosen == "linear" and method != "sm_cubic"


def start(init, method: str, shape: tuple[int, int], rows: str, *, linear, kl) -> np.ndarray:
    """The optimiser's start from ``init``: ``None``, ``"linear"``, ``"kl"`` or an array of ``shape``.

    ``None`` is ``"kl"`` for SMTGP ([SM] §5.2) and ``"linear"`` otherwise;
    ``linear()`` and ``kl()`` compute those starts (the KL run's extrapolation
    warning is left to the caller's own).
    """
    init = resolved_init(init, method)
    if isinstance(init, str):
        check_choice("init", init, ("linear", "kl"))
        if init == "linear":
            with np.errstate(over="ignore", invalid="ignore"):
                Y0 = linear()
            bad = np.flatnonzero(~np.isfinite(Y0).all(axis=1))
            if bad.size:
                raise ValueError(f"X: the linear (ridge) start overflows float64 at {bad.size} row(s), first row "
                                 f"{bad[0]}: the inputs are too large for float64 arithmetic; rescale them")
        else:
            with quiet():  # reported once, by the caller
                Y0 = kl()
    else:
        Y0 = as_2d("init", init)
        if Y0.shape != shape:
            raise ValueError(f"init must have shape {shape} ({rows}), got {Y0.shape}")
    return np.ascontiguousarray(Y0, dtype=np.float64)


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


def warn_extrapolated(ex: np.ndarray, n: int, local: bool = False) -> None:
    """One ExtrapolationWarning for the call (none inside :func:`quiet`); ``local``: a local model's."""
    if ex.any() and not getattr(_QUIET, "on", False):
        whose = "their local" if local else "the"
        warn(f"{int(ex.sum())} of {n} test inputs lie outside {whose} training inputs' kernel support "
             f"(every k(x, x_i) < {config.EXTRAPOLATION_K:g}): their prediction is the start unchanged; "
             "see Prediction.extrapolated", ExtrapolationWarning)


def optimize_points(model: TGPModel, Y0: np.ndarray, point_data, held, spread: np.ndarray, opts: PredictOptions, *,
                    bar: Progress | None = None, certainty: bool = True,
                    loo: LeaveOneOut | None = None) -> Prediction:
    """The batched minimisation shared by :func:`predict` and the leave-one-out predictions, as ``opts``
    asks (its ``progress`` is the caller's to show: ``bar`` is stepped per batch).

    ``point_data(s, e)`` returns ``F, eta_x, g_xy, extrapolated`` of points
    ``s:e`` and their nearest training inputs (:func:`prepare_batch`); ``held`` is ``None`` or the
    left-out training index per point (``loo``: the model's :func:`~fastsm.tgp.views.leave_one_out`);
    where ``opts.init`` asks for the ridge start (:func:`is_supported`) ``Y0`` is that start, replaced
    where :func:`supported_start` would replace it (the choice is the optimisation's first round);
    ``spread`` the output spread of each point's model (tolerance and trust radius unit).  Without
    ``certainty`` KLTGP and IKLTGP skip the SM evaluation that forms it (``log_certainty`` NaN).
    """
    n, dy = Y0.shape
    p = model.params
    method = opts.method
    supported = is_supported(opts.init, method)
    # SM: the beta = 1 (Rényi) transform is minimised; the SM value is formed at the end
    beta = 1.0 if method in ("sm", "sm_cubic") else p.beta
    out = {
        "y": np.empty((n, dy)), "f": np.empty(n), "it": np.empty(n, dtype=np.int64),
        "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "h": np.empty(n, dtype=np.int64),
        "lc": np.empty(n), "ex": np.empty(n, dtype=bool),
    }
    objective = objective_view(model, method, beta, loo)
    fit = fitted(model, loo)
    cubic = cubic_factors(model, method)
    hessian = opts.bfgs and method == "sm" and dy <= config.SM_HESSIAN_MAX_DY
    xtol = np.ascontiguousarray(opts.tol * spread)
    max_step = np.ascontiguousarray(opts.trust_radius * spread)

    plan = products_plan(model, method)
    products_plan(model)  # the plans are formed (probed) once, before threads share them

    def chunk(s: int, e: int, stop: np.ndarray) -> None:
        F, eta_x, Gxy, ex, nearest = point_data(s, e)
        hb = held_rows(None if held is None else held[s:e], e - s, loo)
        run = Options(stop_rule(opts.max_iter, xtol[s:e], opts.ftol), max_step[s:e], opts.bfgs, config.DEFAULT_WINDOW,
                      hessian)
        first = (supported_alternatives(fit.Y, Y0[s:e], nearest, ex, hb, spread[s:e]) if supported
                 else plain_start(Y0[s:e]))
        Yb, fb, itb, evb, cvb, hits, ey, exy = minimize_batch(objective, obj.Points(F, eta_x, hb), first, run, stop,
                                                              cubic, plan)
        out["y"][s:e], out["f"][s:e], out["it"][s:e], out["ev"][s:e] = Yb, fb, itb, evb
        out["cv"][s:e], out["h"][s:e], out["ex"][s:e] = cvb & ~ex, hits, ex
        if method == "sm":  # the last accepted evaluation already holds eta_y and eta_xy
            out["lc"][s:e] = certainty_from(p.alpha, eta_x, ey, exy)
        elif certainty:
            out["lc"][s:e] = log_certainty_at(model, Yb, eta_x, Gxy, held=hb, loo=loo)
        else:
            out["lc"][s:e] = np.nan

    def body(handle: Compute) -> None:
        for s, e in batch_ranges(n, opts.batch_size):
            if handle.stop[0]:
                return
            run_chunks(e - s, handle.n_threads, functools.partial(chunk, stop=handle.stop), start=s)
            if bar is not None:
                bar.step(e - s)

    # ~30 evaluations of 2 N^2 flops per point and (two triangular) product
    run_interruptible(opts.threads, body, flops=60.0 * n * model.n_train**2 * (1 if method == "kl" else 2))
    ex = out["ex"]
    out["lc"][ex] = -np.inf
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=sm_value(out["f"], method, p.beta), criterion=out["f"], n_eta_floor=out["h"],
                      extrapolated=ex, method=method)


def evaluate(model: TGPModel, method: str, F, eta_x, Yb, val, grad, *, beta: float | None = None, held=None,
             loo: LeaveOneOut | None = None):
    """Kernel call of one batch, in this thread (also used by the benchmarks); returns ``(eta_y, eta_xy)``.

    ``F``, ``eta_x``: :func:`prepare_points`'s for ``method``; ``held``: left-out training index per
    row (leave-one-out, with ``loo``, the model's :func:`~fastsm.tgp.views.leave_one_out`), or ``None``.
    """
    m = Yb.shape[0]
    plan = products_plan(model, method)
    out = obj.Evaluations(val, grad, np.empty(m), np.empty(m), np.zeros(m, dtype=np.int64))
    obj.evaluate_rows(objective_view(model, method, model.params.beta if beta is None else beta, loo),
                      obj.Points(F, eta_x, held_rows(held, m, loo)), np.arange(m), np.ascontiguousarray(Yb), out,
                      obj.Products(obj.workspace(m, model.n_train), plan),
                      cubic_factors(model, method))
    return out.eta_y, out.eta_xy


def log_certainty_at(model: TGPModel, Yb: np.ndarray, eta_x, Gxy, *, held=None,
                     loo: LeaveOneOut | None = None) -> np.ndarray:
    """``(1-a) log eta_x + a log eta_y - log eta_xy`` from one SM evaluation (floored etas)."""
    m = Yb.shape[0]
    eta_y, eta_xy = evaluate(model, "sm", Gxy, eta_x, Yb, np.empty(m), np.empty(Yb.shape), beta=1.0, held=held,
                             loo=loo)
    return certainty_from(model.params.alpha, eta_x, eta_y, eta_xy)


def certainty_from(a: float, eta_x, eta_y, eta_xy) -> np.ndarray:
    return (1.0 - a) * np.log(eta_x) + a * np.log(eta_y) - np.log(eta_xy)


def predict_global(model: TGPModel, X: np.ndarray, opts: PredictOptions) -> Prediction:
    """:func:`fastsm.tgp.predict` for a global model, with validated inputs: a model whose
    substitutions run by row loops (a local model's) by :func:`predict_fused`, others by
    :func:`predict_staged` (bitwise the same; the fused kernel saves the stages' calls where a
    model predicts one or a few points)."""
    fused = model.factor_form == "cholesky" and predicts_few(model) and opts.method in ("kl", "sm")
    return predict_fused(model, X, opts) if fused else predict_staged(model, X, opts)


def kernel_run(opts: PredictOptions, dy: int, given: bool = False) -> Run:
    """``opts`` as :func:`~fastsm._kernels.predict.predict_rows` reads them (KLTGP or SMTGP) for ``dy``
    outputs; ``given``: the starts are given per point whatever ``opts.init`` says."""
    chosen = resolved_init(opts.init, opts.method)
    mode = GIVEN if given or not isinstance(chosen, str) else LINEAR if chosen == "linear" else KL_START
    return Run(METHOD_CODE[opts.method], mode, opts.max_iter, kl_start_iterations(opts.max_iter), opts.tol, opts.ftol,
               opts.trust_radius, opts.bfgs, config.DEFAULT_WINDOW,
               opts.bfgs and opts.method == "sm" and dy <= config.SM_HESSIAN_MAX_DY)


def predict_fused(model: TGPModel, X: np.ndarray, opts: PredictOptions) -> Prediction:
    """KLTGP or SMTGP predictions of a model in Cholesky form, each batch by one kernel
    (:func:`fastsm._kernels.predict.predict_rows`): bitwise :func:`predict_staged`'s."""
    n, dy = X.shape[0], model.Y.shape[1]
    p = model.params
    method = opts.method

    def linear() -> np.ndarray:
        return linear_start(X, model.ridge_coef)

    # the ridge start, checked as start() checks it (the kernel runs the supported and the KL start)
    Y0 = start(opts.init, method, (n, dy), "n test points × dy", linear=linear,
               kl=lambda: start("linear", method, (n, dy), "", linear=linear, kl=None))
    run = kernel_run(opts, dy)
    kl, sm = objective_view(model, "kl", p.beta), objective_view(model, "sm", 1.0)
    fit, plan = fitted(model), products_plan(model)
    out = {
        "y": np.empty((n, dy)), "f": np.empty(n), "it": np.empty(n, dtype=np.int64),
        "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "h": np.empty(n, dtype=np.int64),
        "lc": np.empty(n), "ex": np.empty(n, dtype=bool),
    }

    def chunk(s: int, e: int, stop: np.ndarray) -> None:
        Yb, fb, itb, evb, cvb, hits, ey, exy, eta_x, ex = predict_rows(
            fit, kl, sm, np.ascontiguousarray(X[s:e], dtype=np.float64),
            np.array(Y0[s:e], dtype=np.float64, order="C", copy=True), run, plan, stop)
        out["y"][s:e], out["f"][s:e], out["it"][s:e], out["ev"][s:e] = Yb, fb, itb, evb
        out["cv"][s:e], out["h"][s:e], out["ex"][s:e] = cvb & ~ex, hits, ex
        out["lc"][s:e] = certainty_from(p.alpha, eta_x, ey, exy)

    def body(handle: Compute) -> None:
        for s, e in batch_ranges(n, opts.batch_size):
            if handle.stop[0]:
                return
            run_chunks(e - s, handle.n_threads, functools.partial(chunk, stop=handle.stop), start=s)
            if bar is not None:
                bar.step(e - s)

    with Progress(opts.progress, n, "predict") as bar:
        run_interruptible(opts.threads, body, flops=60.0 * n * model.n_train**2 * (1 if method == "kl" else 2))
    ex = out["ex"]
    out["lc"][ex] = -np.inf
    warn_extrapolated(ex, n)
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=sm_value(out["f"], method, p.beta), criterion=out["f"], n_eta_floor=out["h"],
                      extrapolated=ex, method=method)


def predict_staged(model: TGPModel, X: np.ndarray, opts: PredictOptions, certainty: bool = True) -> Prediction:
    """:func:`predict_global` in stages from Python (every model and method; the reference of
    :func:`predict_fused`); ``certainty``: as :func:`optimize_points`'s (off for SMTGP's KLTGP start)."""
    n, dy = X.shape[0], model.Y.shape[1]
    Y0 = start(opts.init, opts.method, (n, dy), "n test points × dy",
               linear=lambda: linear_start(X, model.ridge_coef),
               kl=lambda: predict_staged(model, X, kl_start_options(opts), certainty=False).y)
    spread = np.full(n, model.y_spread)
    with Progress(opts.progress, n, "predict") as bar:
        res = optimize_points(model, Y0, lambda s, e: prepare_batch(model, X[s:e], opts.method), None, spread, opts,
                              bar=bar, certainty=certainty)
    warn_extrapolated(res.extrapolated, n)
    return res
