"""The staged prediction: the test oracle of the one pipeline (fastsm._kernels.predict.predict_rows).

The pipeline's stages called one by one from Python, as fastsm ran every global and leave-one-out
prediction before #54: the per-point data (``prepare_batch``), the ridge start checked by
``start``, SMTGP's KLTGP start as a whole prediction of its own, the supported start's alternatives,
the batched optimiser (``minimize_batch``) and, for KLTGP and IKLTGP, the certainty from one more SMTGP
evaluation (``log_certainty_at``).  One thread, one batch: a point's result depends on its own data
only, so the pipeline's bits must be these whatever its batches and threads.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastsm import config
from fastsm._kernels import objectives as obj
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.points import supported_alternatives
from fastsm._kernels.quasi_newton import Options, plain_start, stop_rule
from fastsm._threads import thread_limits
from fastsm.tgp import prediction as P
from fastsm.tgp.model import Prediction
from fastsm.tgp.views import cubic_factors, fitted, held_rows, objective_view, products_plan


def _optimize(model, X, Y0, opts, held, spread, loo, certainty):
    n, dy = Y0.shape
    method = opts.method
    chosen = P.resolved_init(opts.init, method)
    supported = isinstance(chosen, str) and chosen == "linear" and method != "sm_cubic"
    beta = 1.0 if method in ("sm", "sm_cubic") else model.params.beta
    hb = held_rows(held, n, loo)
    F, eta_x, Gxy, ex, nearest = P.prepare_batch(model, X, method, hb, loo)
    first = (supported_alternatives(fitted(model, loo).Y, Y0, nearest, ex, hb, spread) if supported
             else plain_start(Y0))
    hessian = opts.bfgs and method == "sm" and dy <= config.SM_HESSIAN_MAX_DY
    run = Options(stop_rule(opts.max_iter, opts.tol * spread, opts.ftol), opts.trust_radius * spread, opts.bfgs,
                  config.DEFAULT_WINDOW, hessian)
    Y, f, it, ev, cv, hits, ey, exy = minimize_batch(
        objective_view(model, method, beta, loo), obj.Points(F, eta_x, hb), first, run, np.zeros(1, dtype=np.int64),
        cubic_factors(model, method), products_plan(model, method))
    if method == "sm":
        lc = P.certainty_from(model.params.alpha, eta_x, ey, exy)
    elif certainty:
        lc = P.log_certainty_at(model, Y, eta_x, Gxy, held=hb, loo=loo)
    else:
        lc = np.full(n, np.nan)
    lc[ex] = -np.inf
    return Prediction(y=Y, log_certainty=lc, n_iter=it, n_eval=ev, converged=cv & ~ex,
                      objective=P.sm_value(f, method, model.params.beta), criterion=f, n_eta_floor=hits,
                      extrapolated=ex, method=method)


def predict_staged(model, X, opts, *, Y0=None, held=None, spread=None, loo=None, certainty=True) -> Prediction:
    """``model``'s predictions of ``X`` as ``opts`` asks, stage by stage; ``Y0``: the ridge start of ``X``
    (default ``[X, 1] coef``); ``held``, ``loo``, ``spread``, ``certainty``: as
    :func:`fastsm.tgp.prediction.predict_points`'s (leave-one-out: ``Y0`` each left-out set's ridge)."""
    n, dy = X.shape[0], model.Y.shape[1]
    ridge = P.linear_start(X, model.ridge_coef) if Y0 is None else Y0
    start = P.start(opts.init, opts.method, (n, dy), "", linear=lambda: ridge)
    unit = np.full(n, model.y_spread) if spread is None else np.ascontiguousarray(spread, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    with thread_limits(1):
        chosen = P.resolved_init(opts.init, opts.method)
        if isinstance(chosen, str) and chosen == "kl":
            kl = dataclasses.replace(opts, method="kl", init="linear", max_iter=P.kl_start_iterations(opts.max_iter))
            start = _optimize(model, X, start, kl, held, unit, loo, certainty=False).y
            opts = dataclasses.replace(opts, init=start)
        return _optimize(model, X, start, opts, held, unit, loo, certainty)
