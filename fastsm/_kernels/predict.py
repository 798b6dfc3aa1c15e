"""A whole KLTGP or SMTGP prediction of a batch of points in one GIL-free kernel (models in Cholesky form).

:func:`predict_rows` runs what :func:`fastsm.tgp.prediction.predict_global` runs in stages from
Python — the supported ridge start, SMTGP's KLTGP start, the optimisation and the certainty's
ingredients — with the same kernels in the same order, so the bits are those of the staged
prediction (tests/test_fused.py).  A local model predicts one or a few points: its staged
prediction spent more time in Python between the kernels than in them, holding the GIL, so
the threads of a local prediction waited on each other (docs/scale.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm._kernels.objectives import KL, SM, Points
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.points import evaluate_at, point_data, supported_alternatives
from fastsm._kernels.quasi_newton import Options, Start, StopRule
from fastsm.config import ARMIJO_C1, MAX_LINESEARCH, WOLFE_EPS, kernel

#: Starts of :class:`Run`: ``Y0`` as given, the supported ridge start, or a KLTGP run from it.
GIVEN, LINEAR, KL_START = 0, 1, 2


class Run(NamedTuple):
    """What :func:`predict_rows` runs (validated by :func:`fastsm.tgp.prediction.predict_global`)."""

    method: int  # KL or SM
    start: int  # GIVEN, LINEAR or KL_START
    max_iter: int
    start_iter: int  # KLTGP iterations of the KL start
    tol: float  # step tolerance, in units of the spread
    ftol: float
    trust_radius: float  # in units of the spread
    use_bfgs: bool
    window: int
    hessian: bool  # seed SMTGP's BFGS with the exact Hessian


@kernel(inline=True)
def _rule(max_iter, xtol, ftol):
    """:func:`~fastsm._kernels.quasi_newton.stop_rule` in a kernel."""
    return StopRule(max_iter, xtol, ftol, MAX_LINESEARCH, ARMIJO_C1, WOLFE_EPS)


@kernel()
def predict_rows(fit, kl, sm, Xb, Y0, run, plan, stop):
    """Predict the points ``Xb`` of the model :class:`~fastsm._kernels.points.Fitted` ``fit`` by ``run``.

    ``kl``, ``sm``: the model's KLTGP objective (``beta`` the model's) and SMTGP's ``beta = 1``
    transform (:class:`~fastsm._kernels.objectives.Objective`); ``Y0``: the start (``GIVEN``) or
    the ridge start ``[X, 1] coef`` (``LINEAR``, ``KL_START``: supported,
    :func:`~fastsm._kernels.points.supported_alternatives`); ``plan``: the
    products' plan; ``stop``: polled between evaluation rounds (:func:`minimize_batch`).

    Returns ``(Y, criterion, n_iter, n_eval, converged, floor_hits, eta_y, eta_xy, eta_x,
    extrapolated)``; ``eta_y`` and ``eta_xy`` are SMTGP's at ``Y`` (for KLTGP from one more
    evaluation), the certainty's ingredients.
    """
    m, dy = Y0.shape
    spread = np.full(m, fit.spread)
    xtol = run.tol * spread
    max_step = run.trust_radius * spread
    # method codes as int64 values, not literals: one compiled point_data, not one a code
    data_method = np.int64(KL) if run.method == KL or run.start == KL_START else np.int64(SM)
    none = np.full(m, -1, dtype=np.int64)  # no left-out training point
    F, eta_x, Gxy, ex, nearest = point_data(fit, Xb, data_method, plan, none)
    start = Start(Y0, Y0, np.zeros(m, dtype=np.bool_))
    if run.start != GIVEN:
        start = supported_alternatives(fit.Y, Y0, nearest, ex, none, spread)
    if run.start == KL_START:
        opts = Options(_rule(run.start_iter, xtol, run.ftol), max_step, run.use_bfgs, run.window, False)
        Y0 = minimize_batch(kl, Points(F, eta_x, none), start, opts, stop, None, plan)[0]
        start = Start(Y0, Y0, np.zeros(m, dtype=np.bool_))
    if run.method == KL:
        opts = Options(_rule(run.max_iter, xtol, run.ftol), max_step, run.use_bfgs, run.window, False)
        Y, f, n_iter, n_eval, cv, hits, _, _ = minimize_batch(kl, Points(F, eta_x, none), start, opts, stop, None,
                                                              plan)
        at = evaluate_at(sm, Points(Gxy, eta_x, none), Y, plan)
        eta_y, eta_xy = at.eta_y, at.eta_xy
    else:
        opts = Options(_rule(run.max_iter, xtol, run.ftol), max_step, run.use_bfgs, run.window, run.hessian)
        Y, f, n_iter, n_eval, cv, hits, eta_y, eta_xy = minimize_batch(sm, Points(Gxy, eta_x, none), start, opts, stop,
                                                                       None, plan)
    return Y, f, n_iter, n_eval, cv, hits, eta_y, eta_xy, eta_x, ex
