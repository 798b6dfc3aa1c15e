"""Quasi-Newton (BFGS) minimisation with a backtracking line search, one point at a time over the
state of a batch: the optimiser, free of any objective.

A driver (:func:`fastsm._kernels.optimize.minimize_batch`) evaluates the objective at every point's
pending trial and hands each evaluation to these steps: :func:`start_step` (the start, or the
lower of it and an alternative, :class:`Start`), :func:`accepted` and :func:`accept` (line-search
tests, BFGS update, convergence test), :func:`backtrack_step` (the next, shorter trial) and
:func:`next_iteration` (the next direction, capped at a trust radius ``max_step``: far from the
data an objective can go flat, and an unbounded step can jump onto that plateau).  A driver with
exact curvature seeds the BFGS matrix by :func:`fastsm._kernels.curvature.seed_inverse` when
:func:`~fastsm._kernels.curvature.wants_curvature` asks (the hook, its own module).  Every step is O(d^2) per point.

Stop rule (what ``converged`` means; :class:`Options`): an accepted full step moved every
coordinate by at most ``xtol``; or the next quasi-Newton step (accurate gradient, curvature-scaled
inverse Hessian) would move none by more than ``xtol``; or, with ``ftol > 0``, a full Armijo step
lowered ``f`` by at most ``ftol |f|`` or the next step predicts no more; or the gradient is zero;
or a line search found no decrease down to ``0.1 xtol`` while the slope at its last trial is not
negative (a negative one: *stalled*, unconverged).  A non-finite value, gradient or step, or
``max_linesearch`` refused trials, stop the point unconverged.  :class:`StopRule` holds the rule's
numbers; :func:`within_tolerance` is its tolerance test, for taken and predicted steps alike.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm import config
from fastsm._kernels.linesearch import approx_wolfe_accept_min, armijo_accept_min, backtrack
from fastsm.config import kernel


class StopRule(NamedTuple):
    """When a point's run ends and whether it converged (the module docstring's stop rule)."""

    max_iter: int
    xtol: np.ndarray  # step tolerance per point (a leave-one-out model's spread is its own)
    ftol: float  # relative objective tolerance, 0: off (the rounding floor)
    max_linesearch: int  # refused trials per iteration before the point stops unconverged
    c1: float  # Armijo's sufficient-decrease constant
    wolfe_eps: float  # relative value noise the approximate Wolfe test tolerates


def stop_rule(max_iter: int, xtol: np.ndarray, ftol: float) -> StopRule:
    """A :class:`StopRule` with the line search's constants of :mod:`fastsm.config`."""
    return StopRule(int(max_iter), np.ascontiguousarray(xtol, dtype=np.float64), float(ftol), config.MAX_LINESEARCH,
                    config.ARMIJO_C1, config.WOLFE_EPS)


class Options(NamedTuple):
    """The optimiser's options (``max_step`` per point: a leave-one-out model's spread is its own)."""

    stop: StopRule
    max_step: np.ndarray  # trust radius per point
    use_bfgs: bool  # BFGS, else gradient descent
    window: int  # points in flight per evaluation round
    hessian: bool  # seed BFGS with exact curvature (the driver's hook; :func:`wants_curvature`)


class Start(NamedTuple):
    """Where :func:`minimize_batch` starts each point: at ``Y[p]``, or where ``use_alt[p]`` at whichever
    of ``Y[p]`` and ``alt[p]`` has the lower objective (both evaluated; a NaN keeps ``Y[p]``)."""

    Y: np.ndarray
    alt: np.ndarray
    use_alt: np.ndarray


def plain_start(Y: np.ndarray) -> Start:
    """A :class:`Start` at ``Y`` with no alternatives."""
    return Start(Y, Y, np.zeros(Y.shape[0], dtype=np.bool_))


class Iterates(NamedTuple):
    """The optimiser's state, one row per point (:func:`new_iterates`)."""

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
    state: np.ndarray  # WAITING, START, SEARCH, DONE or ALT
    h_exact: np.ndarray  # its inverse Hessian was seeded from an exact one (curvature.seed_inverse)


#: Point states (``ALT``: its start's alternative is being evaluated).
WAITING, START, SEARCH, DONE, ALT = 0, 1, 2, 3, 4

@kernel(internal=True)
def new_iterates(Y0):
    """The state of points starting at ``Y0`` (B × d), all :data:`WAITING`.

    Arrays come from ``np.empty`` with a scalar fill: ``np.zeros``, ``np.ones`` and ``np.full`` would
    each compile Numba's implementation for every shape and dtype (docs/architecture.md)."""
    B, d = Y0.shape
    f, t, slope, gd_len, eta_y, eta_xy = np.empty(B), np.empty(B), np.empty(B), np.empty(B), np.empty(B), np.empty(B)
    f[:] = np.nan
    t[:] = 1.0
    slope[:] = 0.0
    gd_len[:] = 0.0
    eta_y[:] = np.nan
    eta_xy[:] = np.nan
    G, P, H = np.empty((B, d)), np.empty((B, d)), np.empty((B, d, d))
    G[:] = 0.0
    P[:] = 0.0
    H[:] = 0.0
    n_iter, n_ls, n_eval, hits, state = (np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64),
                                         np.empty(B, dtype=np.int64), np.empty(B, dtype=np.int64),
                                         np.empty(B, dtype=np.int64))
    n_iter[:] = 0
    n_ls[:] = 0
    n_eval[:] = 0
    hits[:] = 0
    state[:] = WAITING
    h_scaled, converged, active, h_exact = (np.empty(B, dtype=np.bool_), np.empty(B, dtype=np.bool_),
                                            np.empty(B, dtype=np.bool_), np.empty(B, dtype=np.bool_))
    h_scaled[:] = False
    converged[:] = False
    active[:] = True
    h_exact[:] = False
    return Iterates(Y0.copy(), f, G, H, np.empty((B, d)), h_scaled, P, t, slope, gd_len, n_iter, converged,
                    active, Y0.copy(), n_ls, n_eval, hits, eta_y, eta_xy, state, h_exact)


@kernel(inline=True)
def dot(a, b):
    s = 0.0
    for c in range(a.shape[0]):
        s += a[c] * b[c]
    return s


@kernel(inline=True)
def max_abs(a):
    m = 0.0
    for c in range(a.shape[0]):
        m = max(m, abs(a[c]))
    return m


@kernel(inline=True)
def within_tolerance(stop, p, step_inf, decrease, f):
    """The stop rule's tolerance test: a step of at most ``xtol[p]`` in every coordinate, or (with
    ``ftol > 0``) a decrease of at most ``ftol |f|`` (``inf``: no decrease to judge)."""
    return step_inf <= stop.xtol[p] or (stop.ftol > 0.0 and decrease <= stop.ftol * abs(f))


@kernel(inline=True)
def armijo(p, r, it, ft, stop):
    """Trial row ``r`` of point ``p`` passes Armijo's sufficient-decrease test."""
    return armijo_accept_min(it.f[p], ft[r], it.t[p], it.slope[p], stop.c1)


@kernel(inline=True)
def accepted(p, r, it, ft, Gt, stop):
    """Point ``p`` takes trial row ``r``: Armijo's sufficient decrease, or where the values are
    rounding noise the approximate Wolfe test on the gradient (:mod:`~fastsm._kernels.linesearch`)."""
    return armijo(p, r, it, ft, stop) or approx_wolfe_accept_min(it.f[p], ft[r], it.slope[p],
                                                                 dot(Gt[r], it.P[p]), stop.wolfe_eps)


@kernel(internal=True)
def start_step(p, r, it, start, ft, Gt, ey, exy):
    """Point ``p``'s start evaluated (trial row ``r``): True if its alternative is to be evaluated next;
    else the start is chosen (the lower of the two, :class:`Start`) and checked."""
    if it.state[p] == START:
        record(p, r, it, ft, Gt, ey, exy)
        if start.use_alt[p]:
            it.state[p] = ALT
            for c in range(Gt.shape[1]):
                it.trial[p, c] = start.alt[p, c]
            return True
    elif ft[r] < it.f[p]:
        for c in range(Gt.shape[1]):
            it.Y[p, c] = start.alt[p, c]
        record(p, r, it, ft, Gt, ey, exy)
    check_start(p, it)
    return False


@kernel(inline=True)
def record(p, r, it, ft, Gt, ey, exy):
    """Point ``p``'s value, gradient and certainty ingredients from trial row ``r``."""
    it.f[p] = ft[r]
    for c in range(Gt.shape[1]):
        it.G[p, c] = Gt[r, c]
    it.eta_y[p] = ey[r]
    it.eta_xy[p] = exy[r]


@kernel(inline=True)
def check_start(p, it):
    """Point ``p`` at its chosen start: stopped if its value or gradient is not finite, converged if the
    gradient is zero."""
    gmax = 0.0
    for c in range(it.G.shape[1]):
        gmax = max(gmax, abs(it.G[p, c]))
    if not np.isfinite(it.f[p]) or not np.isfinite(gmax):
        it.active[p] = False
    elif gmax == 0.0:
        it.active[p] = False
        it.converged[p] = True


@kernel(internal=True)
def backtrack_step(p, r, it, ft, slope_trial, opts):
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
    if not np.isfinite(step) or it.n_ls[p] >= opts.stop.max_linesearch:
        it.active[p] = False
    elif step < 0.1 * opts.stop.xtol[p]:
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


@kernel(internal=True)
def next_iteration(p, it, opts):
    """A new iteration of point ``p`` (its full step the next trial: True), or its end (False)."""
    stop = opts.stop
    if it.active[p] and it.n_iter[p] < stop.max_iter and direction(p, it, opts):
        if opts.use_bfgs and it.h_scaled[p]:
            # the quasi-Newton step from an accurate gradient: the minimiser is within xtol, or the
            # decrease it predicts (the Newton decrement g^T H g / 2; uncapped steps only) is below ftol |f|
            pn = 0.0
            for c in range(it.P.shape[1]):
                pn += it.P[p, c] * it.P[p, c]
            predicted = -0.5 * it.slope[p] if np.sqrt(pn) < opts.max_step[p] else np.inf
            if within_tolerance(stop, p, max_abs(it.P[p]), predicted, it.f[p]):
                it.converged[p] = True
                it.active[p] = False
                it.state[p] = DONE
                return False
        it.t[p] = 1.0
        it.n_ls[p] = 0
        it.state[p] = SEARCH
        for c in range(it.P.shape[1]):
            it.trial[p, c] = it.Y[p, c] + it.P[p, c]
        return True
    if it.active[p] and it.n_iter[p] < stop.max_iter:
        it.active[p] = False  # overflowing direction: unconverged
    it.state[p] = DONE
    return False


@kernel(inline=True)
def direction(p, it, opts):
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


@kernel(internal=True)
def accept(p, r, it, Yt, ft, Gt, opts, decreased):
    """Point ``p`` takes trial row ``r``: BFGS update of its inverse Hessian, then the convergence test.

    ``decreased``: the trial passed Armijo's test (a measured decrease); one accepted by the
    approximate Wolfe test alone may not have lowered the objective at all (it went down by
    less than the rounding floor), so its decrease says nothing about convergence.
    """
    Y, f, G, H, HY, h_scaled, t, gd_len = it.Y, it.f, it.G, it.H, it.HY, it.h_scaled, it.t, it.gd_len
    n_iter, converged, active = it.n_iter, it.converged, it.active
    use_bfgs = opts.use_bfgs
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
    full = t[p] == 1.0
    if (full and within_tolerance(opts.stop, p, step_inf, decrease if decreased else np.inf, f[p])) \
            or gmax == 0.0:
        converged[p] = True
        active[p] = False
