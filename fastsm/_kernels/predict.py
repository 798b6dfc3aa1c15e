"""A whole TGP prediction of a batch of test points in one GIL-free kernel: the one pipeline.

:func:`predict_rows` runs every prediction fastsm makes — global models, leave-one-out (each row's
left-out training point, ``batch.held``), KNN-local and region models
(:func:`fastsm._kernels.knn.knn_rows` calls it per point) — in four stages: the per-point data
(:func:`~fastsm._kernels.points.point_data`), the start (the given one, the supported ridge start
or SMTGP's KLTGP start from it, [SM] §5.2), the optimisation
(:func:`~fastsm._kernels.optimize.minimize_batch`) and the certainty's ingredients.  Python
(:mod:`fastsm.tgp.prediction`) forms the ridge starts, splits the points into batches and threads
and turns the results into a :class:`~fastsm.tgp.model.Prediction`.  A model that predicts one or
a few points spends its time in the kernels, not between them in Python holding the GIL, so the
threads of a local prediction do not wait on each other (docs/scale.md).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import typeof, types
from numba.core.registry import cpu_target

from fastsm._kernels.curvature import seed_inverse
from fastsm._kernels.hessian import hessian_rows
from fastsm._kernels.objectives import KL, SM, SM_CUBIC, Evaluations, Points, Products, objective_plan
from fastsm._kernels.optimize import minimize_batch
from fastsm._kernels.points import point_data, supported_alternatives
from fastsm._kernels.quasi_newton import (
    Options,
    Start,
    StopRule,
    accept,
    backtrack_step,
    new_iterates,
    next_iteration,
    start_step,
)
from fastsm._kernels.shared import call
from fastsm.config import ARMIJO_C1, MAX_LINESEARCH, WOLFE_EPS, kernel

#: Starts of :class:`Run`: ``Y0`` as given, the supported ridge start, or a KLTGP run from it.
GIVEN, LINEAR, KL_START = 0, 1, 2


class Run(NamedTuple):
    """What :func:`predict_rows` runs (:func:`fastsm.tgp.prediction.kernel_run`, from validated options)."""

    method: int  # KL, IKL, SM or SM_CUBIC
    start: int  # GIVEN, LINEAR or KL_START
    max_iter: int
    start_iter: int  # KLTGP iterations of the KL start
    tol: float  # step tolerance, in units of each row's spread
    ftol: float
    trust_radius: float  # in units of each row's spread
    use_bfgs: bool
    window: int  # points in flight per evaluation round (config.DEFAULT_WINDOW)
    hessian: bool  # seed SMTGP's BFGS with the exact Hessian
    certainty: bool  # form the certainty's ingredients (for KLTGP and IKLTGP one more SMTGP evaluation)


class Objectives(NamedTuple):
    """The model's objectives a prediction reads (:class:`~fastsm._kernels.objectives.Objective`)."""

    start: object  # KLTGP's, beta the model's: the KL start
    main: object  # the method's (SMTGP: its beta = 1 transform)
    certainty: object  # SMTGP's beta = 1 transform: the certainty's eta_y and eta_xy
    cubic: object  # None, or (K_X^-1, K_Y^-1) for SM_CUBIC, the O(N^3) reference form


class Batch(NamedTuple):
    """The test points of one :func:`predict_rows` call, one row each."""

    X: np.ndarray  # test inputs, m × dx
    Y0: np.ndarray  # the start (GIVEN) or the ridge start [X, 1] coef (LINEAR, KL_START)
    held: np.ndarray  # the training point left out of the row's model (leave-one-out), else -1
    spread: np.ndarray  # the output spread of the row's model: the unit of tol and trust_radius


def first_run_split(objs: Objectives, batch: Batch, plan: object, stop: np.ndarray) -> tuple[list, list]:
    """How the compile of :func:`predict_rows` for these arguments splits between a helper process and this
    one on a cold cache (:mod:`fastsm._prefetch`): ``(helper, here)``, lists of ``(kernel, argtypes)``.

    The helper compiles the optimiser's steps and the Hessian's seed, then
    :func:`~fastsm._kernels.optimize.minimize_batch`, which this kernel calls by symbol, and its other callees;
    this process compiles the exact Hessian's kernel first (the helper loads it) and with it the triangular row
    loops, which the helper reaches after the steps (started with ``minimize_batch``, it waited for this
    process's row loops about 6 s), then :func:`predict_rows` with the per-point data (:func:`point_data`),
    typed by ``minimize_batch``'s declared result type, and loads ``minimize_batch`` before emitting its code
    (:func:`~fastsm._kernels.shared.call`).  The types
    are those the kernels are called with (``tests/test_prefetch.py`` checks them against the compiled
    signatures): a wrong one costs only the helper's time."""
    i1, f1, f2, f3 = (types.Array(types.int64, 1, "C"), types.Array(types.float64, 1, "C"),
                      types.Array(types.float64, 2, "C"), types.Array(types.float64, 3, "C"))
    start_y = cpu_target.typing_context.unify_pairs(typeof(batch.Y0), f2)  # the given start, or a run's end
    start = types.BaseTuple.from_types([start_y, f2, types.Array(types.boolean, 1, "C")], Start)
    points = Points(np.empty((0, 0)), np.empty(0), batch.held)
    options = Options(StopRule(0, np.empty(0), 0.0, 0, 0.0, 0.0), np.empty(0), False, 0, False)
    objective = typeof(objs.main)
    minimize = (objective, typeof(points), start, typeof(options), typeof(stop), typeof(objs.cubic), typeof(plan))
    evaluations = types.BaseTuple.from_types([f1, f2, f1, f1, i1], Evaluations)
    products = types.BaseTuple.from_types([f3, typeof(plan)], Products)
    iterates = typeof(new_iterates.py_func(np.empty((1, 1))))
    i, opts = types.int64, typeof(options)
    steps = [(start_step, (i, i, iterates, start, f1, f2, f1, f1)),
             (accept, (i, i, iterates, f2, f1, f2, opts, types.boolean)),
             (backtrack_step, (i, i, iterates, f1, types.float64, opts)), (next_iteration, (i, iterates, opts))]
    return (steps + [(seed_inverse, (types.int64, f2, iterates)), (minimize_batch, minimize)],
            [(hessian_rows, (objective, i1, f2, evaluations, f3, f3, products, i1))])


@kernel(inline=True)
def _options(run, max_iter, xtol, max_step, hessian):
    """``run``'s :class:`~fastsm._kernels.quasi_newton.Options` for ``max_iter`` iterations, with the line
    search's constants of :mod:`fastsm.config`."""
    return Options(StopRule(max_iter, xtol, run.ftol, MAX_LINESEARCH, ARMIJO_C1, WOLFE_EPS), max_step, run.use_bfgs,
                   run.window, hessian)


@kernel(inline=True)
def _no_alternatives(m):
    """``use_alt`` of a :class:`~fastsm._kernels.quasi_newton.Start` without alternatives."""
    use = np.empty(m, dtype=np.bool_)
    use[:] = False
    return use


@kernel()
def predict_rows(fit, objs, batch, run, plan, stop):
    """Predict the points of ``batch`` (:class:`Batch`) of the model ``fit`` by ``run`` (:class:`Run`).

    ``fit``: :class:`~fastsm._kernels.points.Fitted` (with leave-one-out projections where a row holds a
    training point out); ``objs``: :class:`Objectives`; ``plan``: how the model's products with its factors
    run (:class:`~fastsm._kernels.tri_rows.ProductPlan`; each objective's from it,
    :func:`~fastsm._kernels.objectives.objective_plan`); ``stop``: polled between evaluation rounds
    (:func:`minimize_batch`).  The ridge start is supported (:func:`supported_alternatives`) except for
    SM_CUBIC's own run.

    Returns ``(Y, criterion, n_iter, n_eval, converged, floor_hits, eta_y, eta_xy, eta_x,
    extrapolated)``; ``eta_y`` and ``eta_xy`` are SMTGP's at ``Y`` (for KLTGP and IKLTGP from one more
    evaluation, NaN without ``run.certainty``), the certainty's ingredients.

    Runs, in one loop: SMTGP's KLTGP start (``KL_START``), the method's run, and for KLTGP and IKLTGP
    the certainty's SMTGP evaluation at ``Y`` (a run of no iteration).  One call site each of
    :func:`point_data`, :func:`supported_alternatives` and :func:`minimize_batch`: the first two inlined
    (linked, Numba would compile each again, machine code and all, into this kernel), ``minimize_batch``
    called by symbol (:func:`~fastsm._kernels.shared.call`): alone it compiles no faster so, but a helper
    process can compile it while this one compiles the rest (:func:`first_run_split`, :mod:`fastsm._prefetch`).
    """
    m, dy = batch.Y0.shape
    held = batch.held
    xtol = run.tol * batch.spread
    max_step = run.trust_radius * batch.spread
    first = 0 if run.start == KL_START else 1
    last = 2 if run.method != SM and run.certainty else 1
    F, Gxy, eta_x = np.empty((0, 0)), np.empty((0, 0)), np.empty(0)
    ex = np.empty(0, dtype=np.bool_)
    start = Start(batch.Y0, batch.Y0, _no_alternatives(m))
    Y, f, n_iter, n_eval = batch.Y0, np.empty(0), np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    cv, hits, eta_y, eta_xy = np.empty(0, dtype=np.bool_), np.empty(0, dtype=np.int64), np.empty(0), np.empty(0)
    for phase in range(first, last + 1):
        # method codes as int64 values, not literals: one compiled point_data for every method
        code = np.int64(KL) if phase == 0 else np.int64(run.method) if phase == 1 else np.int64(SM)
        if phase == first or (phase == 1 and code != KL and code != SM):  # the data of this run's objective
            F, eta_x, Gxy, ex, nearest = point_data(fit, batch.X, code, plan, held)
            if phase == first and (phase == 0 or (run.start == LINEAR and run.method != SM_CUBIC)):
                start = supported_alternatives(fit.Y, batch.Y0, nearest, ex, held, batch.spread)
        if phase > first:
            start = Start(Y, Y, _no_alternatives(m))
        obj = objs.start if phase == 0 else objs.main if phase == 1 else objs.certainty
        n = run.start_iter if phase == 0 else run.max_iter if phase == 1 else 0
        out = call(minimize_batch, obj, Points(Gxy if code == SM else F, eta_x, held), start,
                             _options(run, n, xtol, max_step, phase == 1 and run.hessian), stop, objs.cubic,
                             objective_plan(plan, code))
        if phase == 2:  # the certainty's ingredients at Y: one evaluation, no iteration
            eta_y, eta_xy = out[6], out[7]
        else:
            Y, f, n_iter, n_eval, cv, hits, eta_y, eta_xy = out
    if run.method != SM and not run.certainty:
        eta_y[:] = np.nan
        eta_xy[:] = np.nan
    return Y, f, n_iter, n_eval, cv, hits, eta_y, eta_xy, eta_x, ex
