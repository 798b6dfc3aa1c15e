"""The batched driver of TGP predictions' optimisation: many test points minimised at once.

All points that need an objective evaluation (a start, a full step or a line-search trial) are
evaluated together by :func:`~fastsm._kernels.objectives.evaluate_rows`; each evaluation then goes
to the point's optimiser step (:mod:`fastsm._kernels.quasi_newton`, O(d^2) per point and serial:
negligible beside the O(N^2) evaluations, and a serial driver compiles in a third of the time of a
parallel one).  SMTGP's exact Hessian (:func:`~fastsm._kernels.hessian.hessian_rows`) is the
curvature hook: computed for the points that ask (:func:`~fastsm._kernels.curvature.wants_curvature`)
and handed to :func:`~fastsm._kernels.curvature.seed_inverse`.
"""

from __future__ import annotations

import numpy as np
from numba import types

from fastsm._kernels.curvature import hessian_cost, seed_inverse, wants_curvature
from fastsm._kernels.hessian import hessian_rows
from fastsm._kernels.objectives import Evaluations, Products, evaluate_rows, workspace
from fastsm._kernels.quasi_newton import (
    ALT,
    DONE,
    START,
    accept,
    accepted,
    armijo,
    backtrack_step,
    dot,
    new_iterates,
    next_iteration,
    start_step,
)
from fastsm._kernels.shared import call
from fastsm.config import kernel


def minimize_result(argtypes: tuple) -> types.Type:
    """:func:`minimize_batch`'s return type, whatever its arguments: the arrays of its iterates, which
    :func:`~fastsm._kernels.quasi_newton.new_iterates` makes C-contiguous.  Declared, so that
    :func:`~fastsm._kernels.predict.predict_rows` is typed and lowered while a helper process compiles
    ``minimize_batch`` (:func:`~fastsm._kernels.shared.call`, :mod:`fastsm._prefetch`)."""
    f1, f2 = types.Array(types.float64, 1, "C"), types.Array(types.float64, 2, "C")
    i1, b1 = types.Array(types.int64, 1, "C"), types.Array(types.boolean, 1, "C")
    return types.Tuple((f2, f1, i1, i1, b1, i1, f1, f1))


@kernel(result=minimize_result)
def minimize_batch(obj, pts, start, opts, stop, cubic, plan):
    """Minimise the TGP objective (:class:`~fastsm._kernels.objectives.Objective` ``obj``) of every point
    (:class:`~fastsm._kernels.objectives.Points` ``pts``) from :class:`Start` ``start``, with
    :class:`Options` ``opts`` (``max_iter = 0``: only the start's choice).

    Continuous batching: at most ``window`` points are in flight; every
    round evaluates, in one :func:`evaluate_rows` call, the pending trial of
    each of them — a first evaluation, the full step of a new iteration or a
    backtracking trial alike — and a point that finishes hands its row to
    the next waiting point.  Rounds therefore stay ``window`` rows wide until
    the waiting points run out.  Each point's path depends only on its own
    evaluations, so the result does not depend on ``window`` or the order
    of points.

    A point has converged when an accepted full step (no backtracking) moved
    every coordinate by at most ``xtol[p]``, when the next quasi-Newton step
    (from an accurate gradient and a curvature-scaled inverse Hessian) would
    move none by more than ``xtol[p]`` (so no evaluation is spent on it), when
    a full step that passed Armijo's test lowered the objective by at most
    ``ftol * |f|`` or the next quasi-Newton step predicts a decrease of at most
    that (``ftol`` is off by default), when its gradient is zero, or when a line search found no
    decrease down to a step of ``0.1 xtol[p]`` and the slope at its last trial is not negative
    (:func:`backtrack_step`; a negative one leaves the point *stalled*, unconverged).

    ``stop`` is a one-element int64 array polled before every evaluation
    round: a non-zero value (set by another thread, e.g. on Ctrl-C) ends the
    run with the points still active marked unconverged.  ``cubic``: see
    :func:`~fastsm._kernels.objectives.evaluate_rows` (``pts.held``: exact leave-one-out, too);
    ``plan``: the products' :class:`~fastsm._kernels.tri_rows.ProductPlan`.  ``xtol`` and ``max_step`` are per point (a
    leave-one-out model's output spread is its own).  A point whose step or
    objective becomes non-finite stops unconverged.

    Returns ``(Y, f, n_iter, n_eval, converged, floor_hits, eta_y, eta_xy)``,
    the last two from the evaluation at the returned point (the certainty's
    ingredients for SMTGP).
    """
    B, d = start.Y.shape
    n = obj.Z.shape[0]
    it = call(new_iterates, start.Y)
    w = max(1, min(opts.window, B))
    prod = Products(workspace(w, n), plan)
    hc = max(1, w // d) if opts.hessian else 1  # points per Hessian call
    jprod = Products(workspace(hc * d if opts.hessian else 1, n if opts.hessian else 1), plan)
    hess = np.empty((hc, d, d))
    hrow = np.empty(w, dtype=np.int64)
    held_r = np.empty(w, dtype=np.int64)  # the left-out training point of each evaluated row
    slot = np.empty(w, dtype=np.int64)
    slot[:] = -1
    rows = np.empty(w, dtype=np.int64)
    row_slot = np.empty(w, dtype=np.int64)
    Yt = np.empty((w, d))
    ft = np.empty(w)
    Gt = np.empty((w, d))
    ey = np.empty(w)
    exy = np.empty(w)
    ht = np.empty(w, dtype=np.int64)
    ht[:] = 0
    next_point = 0
    while stop[0] == 0:
        nr = 0
        for s in range(w):
            if slot[s] < 0 and next_point < B:
                slot[s] = next_point
                it.state[next_point] = START
                next_point += 1
            if slot[s] >= 0:
                rows[nr] = slot[s]
                row_slot[nr] = s
                for c in range(d):
                    Yt[nr, c] = it.trial[slot[s], c]
                nr += 1
        if nr == 0:
            break
        call(evaluate_rows, obj, pts, rows[:nr], Yt[:nr], Evaluations(ft[:nr], Gt[:nr], ey[:nr], exy[:nr], ht[:nr]),
                      prod, cubic)
        nh = 0
        for r in range(nr):
            p = rows[r]
            it.n_eval[p] += 1
            it.hits[p] += ht[r]
            moved = False
            if it.state[p] == START or it.state[p] == ALT:
                if call(start_step, p, r, it, start, ft, Gt, ey, exy):
                    continue  # the start's alternative is the next trial
            elif accepted(p, r, it, ft, Gt, opts.stop):
                # one call with a runtime flag: literal True / False compiled accept twice
                call(accept, p, r, it, Yt, ft, Gt, opts, armijo(p, r, it, ft, opts.stop))
                it.eta_y[p] = ey[r]
                it.eta_xy[p] = exy[r]
                moved = True
            elif call(backtrack_step, p, r, it, ft, dot(Gt[r], it.P[p]), opts):
                continue
            if moved and wants_curvature(p, it, opts):
                hrow[nh] = r  # row r still holds the evaluation at the point's new position
                nh += 1
            elif not call(next_iteration, p, it, opts):
                slot[row_slot[r]] = -1
        if nh > 0:
            for r in range(nr):
                held_r[r] = pts.held[rows[r]]
        for c0 in range(0, nh, hc):
            c1 = min(nh, c0 + hc)
            call(hessian_rows, obj, hrow[c0:c1], Yt, Evaluations(ft, Gt, ey, exy, ht), prod.work, hess, jprod, held_r)
            for q in range(c0, c1):
                p = rows[hrow[q]]
                it.n_eval[p] += hessian_cost(d)
                call(seed_inverse, p, hess[q - c0], it)
                if not call(next_iteration, p, it, opts):
                    slot[row_slot[hrow[q]]] = -1
    for p in range(B):
        if it.state[p] != DONE:
            it.active[p] = False
    return it.Y, it.f, it.n_iter, it.n_eval, it.converged, it.hits, it.eta_y, it.eta_xy
