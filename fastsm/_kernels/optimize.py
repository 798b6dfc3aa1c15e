"""Batched quasi-Newton / gradient descent over many test points at once.

All points that need an objective evaluation (first evaluation or a line-search trial) are
evaluated together by :func:`~fastsm._kernels.objectives.evaluate_rows`; the per-point bookkeeping
(direction, line-search tests, BFGS update of a ``dy×dy`` inverse Hessian) is O(dy^2) per point
and serial: negligible beside the O(N^2) evaluations, and a serial driver compiles in a third of
the time of a parallel one.  Every step is capped at a trust radius ``max_step``: far from the
training outputs the objectives go flat, and an unbounded step can jump onto that plateau.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm._kernels.hessian import hessian_rows, seed, wants_hessian
from fastsm._kernels.linesearch import approx_wolfe_accept_min, armijo_accept_min, backtrack
from fastsm._kernels.objectives import Evaluations, Products, evaluate_rows, workspace
from fastsm.config import kernel

#: Line-search trials per iteration before the direction is declared useless.
MAX_LINESEARCH = 40


class Options(NamedTuple):
    """The optimiser's options (``xtol`` and ``max_step`` per point: a leave-one-out model's spread is its own)."""

    max_iter: int
    xtol: np.ndarray  # step tolerance per point
    ftol: float  # relative objective tolerance (the rounding floor)
    max_step: np.ndarray  # trust radius per point
    use_bfgs: bool  # BFGS, else gradient descent
    window: int  # points in flight per evaluation round
    nthreads: int  # the caller's Numba thread count
    hessian: bool  # seed BFGS with the exact Hessian (SM criterion; :data:`~fastsm._kernels.hessian.HESSIAN_FIRST`)


class Iterates(NamedTuple):
    """The optimiser's state, one row per point (arrays shared with :func:`minimize_batch`'s locals)."""

    Y: np.ndarray  # current point
    f: np.ndarray  # objective there
    G: np.ndarray  # gradient there
    H: np.ndarray  # BFGS inverse Hessian, dy × dy per point
    HY: np.ndarray  # scratch: H y of the update
    h_scaled: np.ndarray  # H initialised from a curvature pair (else steepest descent)
    P: np.ndarray  # search direction
    t: np.ndarray  # step length of the pending trial
    slope: np.ndarray  # directional derivative along P
    gd_len: np.ndarray  # length of the last accepted step (steepest descent's scale)
    n_iter: np.ndarray
    converged: np.ndarray
    active: np.ndarray
    trial: np.ndarray  # the point's pending trial
    n_ls: np.ndarray  # backtracking trials in this iteration
    n_eval: np.ndarray
    hits: np.ndarray  # floor hits (see evaluate_rows)
    eta_y: np.ndarray  # certainty ingredients at the current point
    eta_xy: np.ndarray
    state: np.ndarray  # _WAITING, _START, _SEARCH or _DONE
    h_exact: np.ndarray  # its inverse Hessian was seeded from a positive definite exact one


#: Point states of :func:`minimize_batch`.
_WAITING, _START, _SEARCH, _DONE = 0, 1, 2, 3


@kernel()
def minimize_batch(obj, pts, Y0, opts, stop, cubic, held, plan):
    """Minimise the TGP objective (:class:`~fastsm._kernels.objectives.Objective` ``obj``) of every point
    (:class:`~fastsm._kernels.objectives.Points` ``pts``), starting from ``Y0``, with :class:`Options` ``opts``.

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
    (:func:`_backtrack`; a negative one leaves the point *stalled*, unconverged).

    ``stop`` is a one-element int64 array polled before every evaluation
    round: a non-zero value (set by another thread, e.g. on Ctrl-C) ends the
    run with the points still active marked unconverged.  ``cubic``: see
    :func:`~fastsm._kernels.objectives.evaluate_rows`, and ``held`` (exact
    leave-one-out) and ``plan`` (the products' tile plan) too.  ``xtol`` and ``max_step`` are per point (a
    leave-one-out model's output spread is its own).  A point whose step or
    objective becomes non-finite stops unconverged.

    Returns ``(Y, f, n_iter, n_eval, converged, floor_hits, eta_y, eta_xy)``,
    the last two from the evaluation at the returned point (the certainty's
    ingredients for SMTGP).
    """
    B, d = Y0.shape
    n = obj.Z.shape[0]
    it = Iterates(Y0.copy(), np.full(B, np.nan), np.zeros((B, d)), np.zeros((B, d, d)), np.empty((B, d)),
                  np.zeros(B, dtype=np.bool_), np.zeros((B, d)), np.ones(B), np.zeros(B), np.zeros(B),
                  np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.bool_), np.ones(B, dtype=np.bool_),
                  Y0.copy(), np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64),
                  np.zeros(B, dtype=np.int64), np.full(B, np.nan), np.full(B, np.nan),
                  np.full(B, _WAITING, dtype=np.int64), np.zeros(B, dtype=np.bool_))
    w = max(1, min(opts.window, B))
    prod = Products(workspace(w, n, plan.heights[0]), plan, opts.nthreads)
    hc = max(1, w // d) if opts.hessian else 1  # points per Hessian call
    jprod = Products(workspace(hc * d if opts.hessian else 1, n if opts.hessian else 1, plan.heights[0]), plan,
                     opts.nthreads)
    hess = np.empty((hc, d, d))
    hrow = np.empty(w, dtype=np.int64)
    slot = np.full(w, -1, dtype=np.int64)
    rows = np.empty(w, dtype=np.int64)
    row_slot = np.empty(w, dtype=np.int64)
    Yt = np.empty((w, d))
    ft = np.empty(w)
    Gt = np.empty((w, d))
    ey = np.empty(w)
    exy = np.empty(w)
    ht = np.zeros(w, dtype=np.int64)
    next_point = 0
    while stop[0] == 0:
        nr = 0
        for s in range(w):
            if slot[s] < 0 and next_point < B:
                slot[s] = next_point
                it.state[next_point] = _START
                next_point += 1
            if slot[s] >= 0:
                rows[nr] = slot[s]
                row_slot[nr] = s
                for c in range(d):
                    Yt[nr, c] = it.trial[slot[s], c]
                nr += 1
        if nr == 0:
            break
        evaluate_rows(obj, pts, rows[:nr], Yt[:nr], Evaluations(ft[:nr], Gt[:nr], ey[:nr], exy[:nr], ht[:nr]),
                      prod, cubic, held)
        nh = 0
        for r in range(nr):
            p = rows[r]
            it.n_eval[p] += 1
            it.hits[p] += ht[r]
            moved = False
            if it.state[p] == _START:
                _first(p, r, it, ft, Gt, ey, exy)
            elif armijo_accept_min(it.f[p], ft[r], it.t[p], it.slope[p]):
                _accept(p, r, it, Yt, ft, Gt, opts, True)
                it.eta_y[p] = ey[r]
                it.eta_xy[p] = exy[r]
                moved = True
            elif approx_wolfe_accept_min(it.f[p], ft[r], it.slope[p], _dot(Gt[r], it.P[p])):
                _accept(p, r, it, Yt, ft, Gt, opts, False)
                it.eta_y[p] = ey[r]
                it.eta_xy[p] = exy[r]
                moved = True
            elif _backtrack(p, r, it, ft, _dot(Gt[r], it.P[p]), opts):
                continue
            if moved and wants_hessian(p, it, opts):
                hrow[nh] = r  # row r still holds the evaluation at the point's new position
                nh += 1
            elif not _next_iteration(p, it, opts):
                slot[row_slot[r]] = -1
        for c0 in range(0, nh, hc):
            c1 = min(nh, c0 + hc)
            hessian_rows(obj, hrow[c0:c1], rows, Yt, Evaluations(ft, Gt, ey, exy, ht), prod.work, hess, jprod, held)
            for q in range(c0, c1):
                p = rows[hrow[q]]
                seed(p, hess[q - c0], it)
                if not _next_iteration(p, it, opts):
                    slot[row_slot[hrow[q]]] = -1
    for p in range(B):
        if it.state[p] != _DONE:
            it.active[p] = False
    return it.Y, it.f, it.n_iter, it.n_eval, it.converged, it.hits, it.eta_y, it.eta_xy


@kernel(inline=True)
def _dot(a, b):
    s = 0.0
    for c in range(a.shape[0]):
        s += a[c] * b[c]
    return s


@kernel(inline=True)
def _max_abs(a):
    m = 0.0
    for c in range(a.shape[0]):
        m = max(m, abs(a[c]))
    return m


@kernel(inline=True)
def _first(p, r, it, ft, Gt, ey, exy):
    """Point ``p``'s first evaluation (trial row ``r``): its start's value, gradient and certainty."""
    it.f[p] = ft[r]
    gmax = 0.0
    for c in range(Gt.shape[1]):
        it.G[p, c] = Gt[r, c]
        gmax = max(gmax, abs(Gt[r, c]))
    it.eta_y[p] = ey[r]
    it.eta_xy[p] = exy[r]
    if not np.isfinite(it.f[p]) or not np.isfinite(gmax):
        it.active[p] = False
    elif gmax == 0.0:
        it.active[p] = False
        it.converged[p] = True


@kernel(inline=True)
def _backtrack(p, r, it, ft, slope_trial, opts):
    """Point ``p``'s trial ``r`` was refused: the next, shorter trial (True), or the end of its search.

    A search that finds no decrease down to a step of ``0.1 xtol`` ends the point's run (after one
    retry along steepest descent where the quasi-Newton direction may be stale).  It has converged
    only if the gradient agrees: the directional derivative ``slope_trial`` at that last, shortest
    trial is not negative, so the minimum along the direction lies within the step.  Where it is
    still negative the values are rounding noise larger than the decrease left (ill-conditioned
    kernel matrices, docs/accuracy.md), the point may be far from the minimum, and it stops
    unconverged.
    """
    it.n_ls[p] += 1
    step = 0.0
    for c in range(it.P.shape[1]):
        v = abs(it.t[p] * it.P[p, c])
        if not v <= step:  # NaN propagates
            step = v
    if not np.isfinite(step) or it.n_ls[p] >= MAX_LINESEARCH:
        it.active[p] = False
    elif step < 0.1 * opts.xtol[p]:
        # no decrease at a step below tolerance: stationary to
        # precision unless the quasi-Newton direction was stale
        if opts.use_bfgs and it.h_scaled[p]:
            it.h_scaled[p] = False  # steepest descent below
        else:
            it.active[p] = False
            it.converged[p] = slope_trial >= 0.0
    else:
        it.t[p] = backtrack(it.f[p], ft[r], it.t[p], it.slope[p])
        for c in range(it.P.shape[1]):
            it.trial[p, c] = it.Y[p, c] + it.t[p] * it.P[p, c]
        return True
    return False


@kernel(inline=True)
def _next_iteration(p, it, opts):
    """A new iteration of point ``p`` (its full step the next trial: True), or its end (False)."""
    if it.active[p] and it.n_iter[p] < opts.max_iter and _direction(p, it, opts):
        if opts.use_bfgs and it.h_scaled[p] and (_max_abs(it.P[p]) <= opts.xtol[p] or _decrement_small(p, it, opts)):
            # the quasi-Newton step from an accurate gradient: the minimiser is within xtol,
            # or the decrease it predicts (the Newton decrement) is below ftol |f|
            it.converged[p] = True
            it.active[p] = False
            it.state[p] = _DONE
            return False
        it.t[p] = 1.0
        it.n_ls[p] = 0
        it.state[p] = _SEARCH
        for c in range(it.P.shape[1]):
            it.trial[p, c] = it.Y[p, c] + it.P[p, c]
        return True
    if it.active[p] and it.n_iter[p] < opts.max_iter:
        it.active[p] = False  # overflowing direction: unconverged
    it.state[p] = _DONE
    return False


@kernel(inline=True)
def _decrement_small(p, it, opts):
    """The quasi-Newton model's predicted decrease ``g^T H g / 2`` is at most ``ftol |f|`` (uncapped steps only)."""
    pn = 0.0
    for c in range(it.P.shape[1]):
        pn += it.P[p, c] * it.P[p, c]
    return opts.ftol > 0.0 and np.sqrt(pn) < opts.max_step[p] and -0.5 * it.slope[p] <= opts.ftol * abs(it.f[p])


@kernel()
def _direction(p, it, opts):
    """Search direction of point ``p`` capped at ``max_step[p]``; False if it overflows."""
    G, H, P, h_scaled, gd_len, slope = it.G, it.H, it.P, it.h_scaled, it.gd_len, it.slope
    max_step, use_bfgs = opts.max_step, opts.use_bfgs
    d = G.shape[1]
    gn = 0.0
    for c in range(d):
        gn += G[p, c] * G[p, c]
    gn = np.sqrt(gn)
    if use_bfgs and h_scaled[p]:
        for c in range(d):
            s = 0.0
            for e in range(d):
                s += H[p, c, e] * G[p, e]
            P[p, c] = -s
        sl = 0.0
        for c in range(d):
            sl += P[p, c] * G[p, c]
        if not sl < 0.0:  # lost descent: restart from steepest descent
            h_scaled[p] = False
    if not (use_bfgs and h_scaled[p]):
        # steepest descent: as long as the last accepted step (twice that after a
        # full step), the trust radius at first; BFGS falls back here while its
        # curvature pairs are skipped (non-convex region) or after a reset
        if gd_len[p] == 0.0:
            scale = max_step[p] / gn
        else:
            scale = gd_len[p] / gn
        for c in range(d):
            P[p, c] = -scale * G[p, c]
    pn = 0.0
    sl = 0.0
    for c in range(d):
        pn += P[p, c] * P[p, c]
        sl += P[p, c] * G[p, c]
    pn = np.sqrt(pn)
    if not (np.isfinite(pn) and np.isfinite(sl)):
        return False
    if pn > max_step[p]:
        for c in range(d):
            P[p, c] *= max_step[p] / pn
        sl *= max_step[p] / pn
    slope[p] = sl
    return True


@kernel()
def _accept(p, r, it, Yt, ft, Gt, opts, decreased):
    """Point ``p`` takes trial row ``r``: BFGS update of its inverse Hessian, then the convergence test.

    ``decreased``: the trial passed Armijo's test (a measured decrease); one accepted by the
    approximate Wolfe test alone may not have lowered the objective at all (it went down by
    less than the rounding floor), so its decrease says nothing about convergence.
    """
    Y, f, G, H, HY, h_scaled, t, gd_len = it.Y, it.f, it.G, it.H, it.HY, it.h_scaled, it.t, it.gd_len
    n_iter, converged, active = it.n_iter, it.converged, it.active
    xtol, ftol, use_bfgs = opts.xtol, opts.ftol, opts.use_bfgs
    d = Y.shape[1]
    step_inf = 0.0
    sy = 0.0
    yy = 0.0
    ss = 0.0
    for c in range(d):
        s_c = Yt[r, c] - Y[p, c]
        y_c = Gt[r, c] - G[p, c]
        sy += s_c * y_c
        yy += y_c * y_c
        ss += s_c * s_c
        step_inf = max(step_inf, abs(s_c))
    if use_bfgs and sy > 1e-12 * np.sqrt(ss * yy):
        if not h_scaled[p]:
            # Nocedal & Wright (6.20): H0 = (s^T y / y^T y) I before the first update
            for c in range(d):
                for e in range(d):
                    H[p, c, e] = 0.0
                H[p, c, c] = sy / yy
            h_scaled[p] = True
        rho = 1.0 / sy
        hy = HY[p]
        for c in range(d):
            acc = 0.0
            for e in range(d):
                acc += H[p, c, e] * (Gt[r, e] - G[p, e])
            hy[c] = acc
        yhy = 0.0
        for c in range(d):
            yhy += (Gt[r, c] - G[p, c]) * hy[c]
        coef = rho * rho * yhy + rho
        for c in range(d):
            s_c = Yt[r, c] - Y[p, c]
            for e in range(d):
                s_e = Yt[r, e] - Y[p, e]
                H[p, c, e] += -rho * (s_c * hy[e] + hy[c] * s_e) + coef * s_c * s_e
    gd_len[p] = np.sqrt(ss) * (2.0 if t[p] == 1.0 else 1.0)
    for c in range(d):
        Y[p, c] = Yt[r, c]
        G[p, c] = Gt[r, c]
    decrease = f[p] - ft[r]
    f[p] = ft[r]
    n_iter[p] += 1
    gmax = 0.0
    for c in range(d):
        gmax = max(gmax, abs(G[p, c]))
    # a small step is evidence of convergence only if it was a full step; a
    # step shrunk by backtracking says nothing about the distance to the minimum
    # ftol == 0 (the default) turns the value test off: an Armijo-accepted step can leave f unchanged
    # in the last bit where the objective is flat, far (2e-8 at lambda_min 1.5e-4) from the minimum
    if (t[p] == 1.0 and (step_inf <= xtol[p] or (ftol > 0.0 and decreased and decrease <= ftol * abs(f[p])))) \
            or gmax == 0.0:
        converged[p] = True
        active[p] = False
