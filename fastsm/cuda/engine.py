"""The GPU engine's prediction pipeline: :func:`fastsm._kernels.predict.predict_rows`'s stages (the per-point
data, the supported ridge start or SMTGP's KLTGP start from it, the optimisation, the certainty's
ingredients) for chunks of test points on a :class:`~fastsm.cuda.backend.Backend`, for one shared model
(:func:`predict_global`); :mod:`fastsm.cuda.local` runs it for a model per point.
"""

from __future__ import annotations

import numpy as np

from fastsm import config
from fastsm.cuda.backend import Backend
from fastsm.cuda.evaluation import Kernels, evaluate, kernels_of, point_data, shared_model, sm_hessian
from fastsm.cuda.optimizer import Rule, minimize
from fastsm.tgp.model import Prediction, TGPModel
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.prediction import kl_start_iterations, linear_start, resolved_init, sm_value, start

#: Doubles a test point holds on the device while its chunk runs, per training point of its model: its point
#: data, an evaluation round's kernel row, products, weights and temporaries.
WORDS_PER_POINT = 16
#: Points whose exact Hessians are formed together: each holds its Jacobian, two products of it and the
#: differences ``y - z_i`` (``n x dy`` each, about 8 with temporaries), so this bounds their memory.
HESSIAN_BLOCK = 256
HESSIAN_WORDS = 8


def chunk_bytes(n_train: int) -> int:
    """Device bytes one test point of a chunk needs (:data:`WORDS_PER_POINT`)."""
    return 8 * n_train * WORDS_PER_POINT


def fixed_bytes(n_train: int, dy: int, n_factors: int) -> int:
    """Device bytes of a prediction whatever its chunk: the model's factors and a block of exact Hessians."""
    return 8 * n_train * (n_train * n_factors + HESSIAN_BLOCK * dy * HESSIAN_WORDS)


def factor_names(method: str) -> tuple[str, ...]:
    """The factors a prediction by ``method`` reads (``Wxy``: SMTGP's, and every method's certainty)."""
    return ("Wx", "Wy", "Wxy", "G") if method == "ikl" else ("Wx", "Wy", "Wxy")


def refuse(need: int, free: int | None, what: str, backend: str) -> None:
    """``MemoryError`` where ``need`` bytes (``what``) exceed the ``free`` ones."""
    if free is not None and need > free:
        raise MemoryError(f"a prediction with this model needs about {need / 2**30:.2f} GiB on the {backend} backend "
                          f"({what}), but {free / 2**30:.2f} GiB are free; use fastsm.tgp.predict, or a KNN-local "
                          "model (fastsm.tgp.fit_local)")


def plan_chunks(be: Backend, model: TGPModel, n: int, method: str, chunk_size: int | None) -> int:
    """Test points per chunk: ``chunk_size``, or as many as half the device's free memory holds beside the
    model's factors.  A job whose factors and one point do not fit is refused (``MemoryError``) before any work."""
    N, dy = model.Y.shape
    per_point = chunk_bytes(N)
    factors = fixed_bytes(N, dy, len(factor_names(method)))
    free = be.free_bytes()
    refuse(factors + per_point, free, f"{len(factor_names(method))} factors of {N} x {N}, a block of exact "
           "Hessians and one test point", be.name)
    if chunk_size is not None:
        return max(1, min(n, chunk_size))
    if free is None:
        return max(1, min(n, config.DEFAULT_BATCH_SIZE))
    return max(1, min(n, (free - factors) // (2 * per_point)))


def supported(xp, Z, Y0, nearest, extrapolated, spread):
    """The supported ridge start's alternatives (:func:`fastsm._kernels.points.supported_alternatives`, no
    left-out points): the nearest training input's output where ``Y0`` leaves the outputs' box by more than
    rounding and a thousandth of the spread.  ``Z``: the training outputs of each row's model (``m × n × dy``)
    or of the shared one (``1 × n × dy``)."""
    absmax = xp.abs(Z).max(axis=1)
    lo, hi = Z.min(axis=1), Z.max(axis=1)
    margin = 1e-3 * spread[:, None] + 1e-9 * absmax
    outside = ((Y0 < lo - margin) | (Y0 > hi + margin)).any(axis=1)
    finite = xp.isfinite(Y0).all(axis=1)
    rows = xp.arange(Y0.shape[0]) if Z.shape[0] > 1 else xp.zeros(Y0.shape[0], dtype=np.int64)
    return Z[rows, nearest], outside & finite & ~extrapolated


def hessians(xp, view, kern: Kernels, Yt, ev, rows, points):
    """:func:`~fastsm.cuda.evaluation.sm_hessian` at the evaluated ``rows`` (the points ``points``),
    :data:`HESSIAN_BLOCK` at a time."""
    parts = [sm_hessian(xp, view.take(points[s:s + HESSIAN_BLOCK]), kern, Yt, ev, rows[s:s + HESSIAN_BLOCK])
             for s in range(0, rows.shape[0], HESSIAN_BLOCK)]
    return parts[0] if len(parts) == 1 else xp.concatenate(parts)


def predict_chunk(xp, view, kern: Kernels, method: str, beta: float, Xb, Y0, opts: PredictOptions,
                  mode: str) -> dict:
    """One chunk's predictions by the models ``view`` (:mod:`fastsm.cuda.evaluation`), on the device:
    :func:`fastsm._kernels.predict.predict_rows`'s phases.  ``mode``: ``"given"``, ``"linear"`` or ``"kl"``."""
    m, dy = Y0.shape
    spread = view.spread * xp.ones(m)
    xtol = opts.tol * spread
    max_step = opts.trust_radius * spread
    max_iter = opts.iterations(dy)
    phases = (["kl"] if mode == "kl" else []) + [method]
    pd = point_data(xp, view, kern, Xb, phases)
    alt, use_alt = supported(xp, view.outputs(), Y0, pd.nearest, pd.extrapolated, spread)
    if mode == "given":
        use_alt = xp.zeros(m, dtype=bool)
    Y = Y0
    runs = []
    for i, name in enumerate(phases):
        beta_run = 1.0 if name == "sm" else beta
        hessian = opts.bfgs and name == "sm" and dy <= config.SM_HESSIAN_MAX_DY and i == len(phases) - 1

        def ev(idx, Yt, F=pd.F[name], name=name, beta_run=beta_run):
            return evaluate(xp, view.take(idx), kern, name, beta_run, F[idx], pd.eta_x[idx], Yt)

        rule = Rule(kl_start_iterations(max_iter) if (mode == "kl" and i == 0) else max_iter, xtol, opts.ftol,
                    max_step, opts.bfgs, hessian)
        runs.append(minimize(xp, ev, lambda Yt, e, rows, points: hessians(xp, view, kern, Yt, e, rows, points), Y,
                             alt, use_alt if i == 0 else xp.zeros(m, dtype=bool), rule))
        Y = runs[-1].Y
    res = runs[-1]
    eta_y, eta_xy = res.eta_y, res.eta_xy
    if method != "sm":  # the certainty's SMTGP evaluation at the prediction
        last = evaluate(xp, view, kern, "sm", 1.0, pd.Gxy, pd.eta_x, Y)
        eta_y, eta_xy = last.eta_y, last.eta_xy
    ex = pd.extrapolated
    a = kern.alpha
    return {"y": Y, "f": res.f, "it": res.n_iter, "ev": res.n_eval, "cv": res.converged & ~ex, "h": res.hits,
            "lc": (1.0 - a) * xp.log(pd.eta_x) + a * xp.log(eta_y) - xp.log(eta_xy), "ex": ex}


def empty_outputs(n: int, dy: int) -> dict:
    return {"y": np.empty((n, dy)), "f": np.empty(n), "it": np.empty(n, dtype=np.int64),
            "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "h": np.empty(n, dtype=np.int64),
            "lc": np.empty(n), "ex": np.empty(n, dtype=bool)}


def prediction(out: dict, method: str, beta: float) -> Prediction:
    """The :class:`Prediction` of host outputs ``out`` (``log_certainty = -inf`` where extrapolated)."""
    ex = out["ex"]
    out["lc"][ex] = -np.inf
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=sm_value(out["f"], method, beta), criterion=out["f"], n_eta_floor=out["h"],
                      extrapolated=ex, method=method)


def start_mode(init, method: str) -> str:
    """``"given"``, ``"linear"`` or ``"kl"``: how ``init`` starts a prediction by ``method``."""
    chosen = resolved_init(init, method)
    return "given" if not isinstance(chosen, str) else chosen


def predict_global(be: Backend, model: TGPModel, X: np.ndarray, opts: PredictOptions,
                   chunk_size: int | None) -> Prediction:
    """:func:`fastsm.cuda.predict` of a global model for validated host inputs ``X``; host outputs."""
    n, dy = X.shape[0], model.Y.shape[1]
    method = opts.method
    Y0 = start(opts.init, method, (n, dy), "n test points × dy", linear=lambda: linear_start(X, model.ridge_coef))
    mode = start_mode(opts.init, method)
    rows = plan_chunks(be, model, n, method, chunk_size)
    view = shared_model(model, be, factor_names(method))
    kern = kernels_of(model)
    out = empty_outputs(n, dy)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        part = predict_chunk(be.xp, view, kern, method, model.params.beta, be.to_device(X[s:e]),
                             be.to_device(Y0[s:e]), opts, mode)
        for key, value in part.items():
            out[key][s:e] = be.to_host(value)
    return prediction(out, method, model.params.beta)
