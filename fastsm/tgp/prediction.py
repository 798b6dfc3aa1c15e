"""The one prediction pipeline of global, leave-one-out, KNN-local and region TGP predictions.

:func:`predict_points` forms a prediction's starts, batches and threads and hands every part to one
kernel, :func:`fastsm._kernels.predict.predict_rows` (which KNN-local predictions call per point,
:func:`fastsm._kernels.knn.knn_rows`); :func:`prepare_points` and :func:`evaluate` are single stages of
it, for objective and certainty evaluations at given outputs.  All numerical work happens in
:mod:`fastsm._kernels`.  Public entry points: :mod:`fastsm.tgp.api`.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Literal

import numpy as np

from fastsm import config
from fastsm._interrupt import run_interruptible
from fastsm._kernels import objectives as obj
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.points import linear_rows, point_data
from fastsm._kernels.predict import GIVEN, KL_START, LINEAR, Batch, Objectives, Run, first_run_split, predict_rows
from fastsm._kernels.tri_rows import SOLVE_PLAN
from fastsm._prefetch import first_run, start_helpers
from fastsm._progress import Progress
from fastsm._threads import Compute, run_chunks
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
    products_plan,
    read_only,
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

    Predictions choose it inside their optimisation (the first round of
    :func:`~fastsm._kernels.predict.predict_rows`); this is that choice alone (a prediction of no
    iterations), for a start reused by several predictions (:func:`fastsm.tgp.select`).
    """
    Y0 = np.array(Y0, dtype=np.float64, order="C", copy=True)
    if method == "sm_cubic" or Y0.shape[0] == 0:
        return Y0
    opts = PredictOptions(method=method, init="linear", max_iter=0, tol=1.0, ftol=0.0, trust_radius=1.0,
                          threads=threads)
    return predict_points(model, X, Y0, opts, held=held, spread=spread, loo=loo, certainty=False).y


def kl_start_iterations(max_iter: int | None) -> int:
    """KLTGP iterations of SMTGP's ``init="kl"`` start: at most :data:`fastsm.config.SM_START_ITER`
    (the start need not be converged, SMTGP's own optimisation takes it from there); ``None``: the default
    budget, which is never below it."""
    return config.SM_START_ITER if max_iter is None else min(max_iter, config.SM_START_ITER)


def resolved_init(init, method: str):
    """``init`` with ``None`` resolved: ``"kl"`` for SMTGP ([SM] §5.2), ``"linear"`` otherwise."""
    if init is None:
        return "kl" if method in ("sm", "sm_cubic") else "linear"
    return init


def start(init, method: str, shape: tuple[int, int], rows: str, *, linear) -> np.ndarray:
    """What the prediction starts from (:class:`~fastsm._kernels.predict.Batch`'s ``Y0``) for ``init``: ``None``,
    ``"linear"``, ``"kl"`` or an array of ``shape``.

    The ridge start ``linear()`` for ``"linear"`` and ``"kl"`` (SMTGP's KLTGP start runs from it, inside the
    prediction; ``None`` is ``"kl"`` for SMTGP, [SM] §5.2, and ``"linear"`` otherwise), checked to be finite;
    else the given starts, checked to have ``shape`` (``rows`` names it in the error).
    """
    init = resolved_init(init, method)
    if isinstance(init, str):
        check_choice("init", init, ("linear", "kl"))
        with np.errstate(over="ignore", invalid="ignore"):
            Y0 = linear()
        bad = np.flatnonzero(~np.isfinite(Y0).all(axis=1))
        if bad.size:
            raise ValueError(f"X: the linear (ridge) start overflows float64 at {bad.size} row(s), first row "
                             f"{bad[0]}: the inputs are too large for float64 arithmetic; rescale them")
    else:
        Y0 = as_2d("init", init)
        if Y0.shape != shape:
            raise ValueError(f"init must have shape {shape} ({rows}), got {Y0.shape}")
    return np.array(Y0, dtype=np.float64, order="C", copy=True)


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


def evaluate(model: TGPModel, method: str, F, eta_x, Yb, val, grad, *, beta: float | None = None, held=None,
             loo: LeaveOneOut | None = None, threads: int = 1):
    """Kernel call of one batch (also used by the benchmarks); returns ``(eta_y, eta_xy)``.

    ``F``, ``eta_x``: :func:`prepare_points`'s for ``method``; ``held``: left-out training index per
    row (leave-one-out, with ``loo``, the model's :func:`~fastsm.tgp.views.leave_one_out`), or ``None``.
    ``threads`` > 1 splits the rows into that many contiguous chunks, one kernel call per thread
    (:func:`fastsm._threads.run_chunks`, inside the caller's :func:`fastsm._threads.thread_limits`): a
    row's result depends on its own data only, so the split changes no bit.
    """
    m = Yb.shape[0]
    plan = products_plan(model, method)
    view = objective_view(model, method, model.params.beta if beta is None else beta, loo)
    cubic = cubic_factors(model, method)
    Yc = np.ascontiguousarray(Yb)
    hb = held_rows(held, m, loo)
    out = obj.Evaluations(val, grad, np.empty(m), np.empty(m), np.zeros(m, dtype=np.int64))

    def chunk(s: int, e: int) -> None:
        part = obj.Evaluations(*(a[s:e] for a in out))
        obj.evaluate_batch(view, obj.Points(F, eta_x, hb), np.arange(s, e), Yc[s:e], part,
                           obj.Products(obj.workspace(e - s, model.n_train), plan), cubic)

    run_chunks(m, threads, chunk)
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
    """:func:`fastsm.tgp.predict` for a global model (a KNN-local or region model's too), with validated inputs."""
    n, dy = X.shape[0], model.Y.shape[1]
    Y0 = start(opts.init, opts.method, (n, dy), "n test points × dy", linear=lambda: linear_start(X, model.ridge_coef))
    res = predict_points(model, X, Y0, opts)
    warn_extrapolated(res.extrapolated, n)
    return res


def kernel_run(opts: PredictOptions, dy: int, given: bool = False, certainty: bool = True) -> Run:
    """``opts`` as :func:`~fastsm._kernels.predict.predict_rows` reads them for ``dy`` outputs; ``given``: the
    starts are given per point whatever ``opts.init`` says; ``certainty``: as :func:`predict_points`'s."""
    chosen = resolved_init(opts.init, opts.method)
    mode = GIVEN if given or not isinstance(chosen, str) else LINEAR if chosen == "linear" else KL_START
    max_iter = opts.iterations(dy)
    return Run(METHOD_CODE[opts.method], mode, max_iter, kl_start_iterations(max_iter), opts.tol, opts.ftol,
               opts.trust_radius, opts.bfgs, config.DEFAULT_WINDOW,
               opts.bfgs and opts.method == "sm" and dy <= config.SM_HESSIAN_MAX_DY, certainty)


def model_objectives(model: TGPModel, method: str, run: Run, loo: LeaveOneOut | None = None) -> Objectives:
    """``model``'s :class:`~fastsm._kernels.predict.Objectives` for ``method`` run by ``run`` (``loo``: its
    leave-one-out projections); an objective ``run`` does not read is the main one again (the same type: one
    compiled kernel).  SMTGP's main objective is its beta = 1 transform ([SM] Lemma 4.2, docs/math.md §3)."""
    beta = 1.0 if method in ("sm", "sm_cubic") else model.params.beta
    main = objective_view(model, method, beta, loo)
    first = objective_view(model, "kl", model.params.beta, loo) if run.start == KL_START else main
    sm = objective_view(model, "sm", 1.0, loo) if run.certainty and method != "sm" else main
    return Objectives(first, main, sm, cubic_factors(model, method))


def _model_split() -> tuple[list, list]:
    """:func:`~fastsm._kernels.predict.first_run_split` of the predictions of every global model and of every
    KNN-local model (:func:`fastsm._kernels.knn.knn_rows` types its own so): arrays read-only, C-ordered."""
    view = read_only(np.empty((0, 0)))
    o = obj.Objective(0, view, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, view, view, 0.0, 0.0, view, view, view)
    batch = Batch(np.empty((1, 1)), np.empty((1, 1)), np.empty(1, dtype=np.int64), np.empty(1))
    return first_run_split(Objectives(o, o, o, None), batch, SOLVE_PLAN, np.zeros(1, dtype=np.int64))


def prefetch_prediction() -> None:
    """As a global model's fit begins, on a cold cache: start the first-run helper of its predictions
    (:func:`~fastsm._kernels.predict.first_run_split`, :mod:`fastsm._prefetch`), which compiles while the fit
    does.  Nothing once this process holds the optimiser's kernel (deriving the types and reading the cache's
    index cost about a millisecond a call)."""
    if not minimize_batch.overloads:
        start_helpers(_model_split()[0])


def first_knn_run() -> None:
    """Before a KNN-local prediction's first kernel call, on a cold cache: the first-run helper compiles the
    optimiser's half of the prediction while this process compiles the other (:func:`first_run`), then the KNN
    kernel, which finds the helper's half in the cache.  Nothing once this process holds the optimiser's
    kernel."""
    if not minimize_batch.overloads:
        first_run(*_model_split())


def predict_points(model: TGPModel, X: np.ndarray, Y0: np.ndarray, opts: PredictOptions, *,
                   held: np.ndarray | None = None, spread: np.ndarray | None = None, loo: LeaveOneOut | None = None,
                   certainty: bool = True) -> Prediction:
    """The one pipeline: ``model``'s predictions of the points ``X`` from ``Y0``
    (:func:`start`), batch by batch, each batch split over ``opts.threads`` threads, each part by one
    :func:`~fastsm._kernels.predict.predict_rows` call.

    ``held`` (leave-one-out): each point's left-out training point, with ``loo`` the model's
    :func:`~fastsm.tgp.views.leave_one_out`; ``spread``: each point's model's output spread (the unit of
    ``tol`` and ``trust_radius``; default ``model.y_spread``); without ``certainty`` KLTGP and IKLTGP skip the
    SMTGP evaluation that forms ``log_certainty`` (NaN).  A point's result depends on its own data only:
    not on the batch, the thread count or the other points.
    """
    n, dy = Y0.shape
    method = opts.method
    p = model.params
    run = kernel_run(opts, dy, certainty=certainty)
    fit, objs, plan = fitted(model, loo), model_objectives(model, method, run, loo), products_plan(model)
    Xc = np.array(X, dtype=np.float64, order="C", copy=True)  # writable, as every caller's: one compiled kernel
    hb = held_rows(held, n, loo)
    unit = np.full(n, model.y_spread) if spread is None else np.ascontiguousarray(spread, dtype=np.float64)
    out = {
        "y": np.empty((n, dy)), "f": np.empty(n), "it": np.empty(n, dtype=np.int64),
        "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "h": np.empty(n, dtype=np.int64),
        "lc": np.empty(n), "ex": np.empty(n, dtype=bool),
    }

    def chunk(s: int, e: int, stop: np.ndarray) -> None:
        Yb, fb, itb, evb, cvb, hits, ey, exy, eta_x, ex = predict_rows(
            fit, objs, Batch(Xc[s:e], Y0[s:e], hb[s:e], unit[s:e]), run, plan, stop)
        out["y"][s:e], out["f"][s:e], out["it"][s:e], out["ev"][s:e] = Yb, fb, itb, evb
        out["cv"][s:e], out["h"][s:e], out["ex"][s:e] = cvb & ~ex, hits, ex
        out["lc"][s:e] = certainty_from(p.alpha, eta_x, ey, exy)

    def body(handle: Compute) -> None:
        for s, e in batch_ranges(n, opts.batch_size):
            if handle.stop[0]:
                return
            run_chunks(e - s, handle.n_threads, functools.partial(chunk, stop=handle.stop), start=s)
            bar.step(e - s)

    if n and not minimize_batch.overloads:  # a first run: a helper compiles half of the kernels (fastsm._prefetch)
        first_run(*first_run_split(objs, Batch(Xc[:1], Y0[:1], hb[:1], unit[:1]), plan, np.zeros(1, dtype=np.int64)))
    # ~30 evaluations of 2 N^2 flops per point and (two triangular) product
    with Progress(opts.progress, n, "predict") as bar:
        run_interruptible(opts.threads, body, flops=60.0 * n * model.n_train**2 * (1 if method == "kl" else 2))
    ex = out["ex"]
    out["lc"][ex] = -np.inf
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=sm_value(out["f"], method, p.beta), criterion=out["f"], n_eta_floor=out["h"],
                      extrapolated=ex, method=method)
