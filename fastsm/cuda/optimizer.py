"""The GPU engine's optimiser: :mod:`fastsm._kernels.quasi_newton`'s quasi-Newton steps, Armijo line search,
stop rule and curvature schedule, taken by every point of a chunk at once, with masks.

Every round evaluates the pending trial of every point still in flight (one call of ``evaluate``), then
each point takes exactly the step the Numba driver (:func:`fastsm._kernels.optimize.minimize_batch`)
would take with that evaluation: the start's choice, acceptance (Armijo or the approximate Wolfe test)
and the BFGS update, backtracking, the next direction capped at the trust radius, and for SMTGP the exact
Hessian that seeds the BFGS matrix on :data:`fastsm.config.CURVATURE_SCHEDULE`.  A point's path depends
on its own evaluations only, as in the Numba engine: the two differ where the evaluations' rounding does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from fastsm import config
from fastsm._kernels import curvature
from fastsm.cuda.linalg import batched_cholesky, inverse_from_cholesky

#: Point states, as :mod:`fastsm._kernels.quasi_newton`'s.
WAITING, START, SEARCH, DONE, ALT = 0, 1, 2, 3, 4


class Rule(NamedTuple):
    """The optimiser's options (:class:`fastsm._kernels.quasi_newton.Options` with its stop rule)."""

    max_iter: int
    xtol: Any  # per point
    ftol: float
    max_step: Any  # per point: the trust radius
    use_bfgs: bool
    hessian: bool  # SMTGP's exact curvature seeds BFGS


class Result(NamedTuple):
    """Per point: where the run ended and how (:func:`fastsm._kernels.optimize.minimize_batch`'s outputs)."""

    Y: Any
    f: Any
    n_iter: Any
    n_eval: Any
    converged: Any
    hits: Any
    eta_y: Any
    eta_xy: Any


def hessian_cost(d: int) -> int:
    """A ``d``-output exact Hessian in evaluations: :func:`fastsm._kernels.curvature.hessian_cost` itself."""
    return int(curvature.hessian_cost.py_func(d))


def _first_try(d: int) -> int:
    return max(config.CURVATURE_SCHEDULE[0], hessian_cost(d))


class _State:
    """The iterates of ``B`` points (:class:`fastsm._kernels.quasi_newton.Iterates`), as arrays."""

    def __init__(self, xp, Y0):
        B, d = Y0.shape
        self.Y = Y0.copy()
        self.trial = Y0.copy()
        self.f = xp.full(B, np.nan)
        self.G = xp.zeros((B, d))
        self.H = xp.zeros((B, d, d))
        self.P = xp.zeros((B, d))
        self.t = xp.ones(B)
        self.slope = xp.zeros(B)
        self.gd_len = xp.zeros(B)
        self.eta_y = xp.full(B, np.nan)
        self.eta_xy = xp.full(B, np.nan)
        self.n_iter = xp.zeros(B, dtype=np.int64)
        self.n_ls = xp.zeros(B, dtype=np.int64)
        self.n_eval = xp.zeros(B, dtype=np.int64)
        self.hits = xp.zeros(B, dtype=np.int64)
        self.state = xp.full(B, START, dtype=np.int64)
        self.h_scaled = xp.zeros(B, dtype=bool)
        self.h_exact = xp.zeros(B, dtype=bool)
        self.converged = xp.zeros(B, dtype=bool)
        self.active = xp.ones(B, dtype=bool)


def _within(rule: Rule, p, step_inf, decrease, f):
    """The stop rule's tolerance test (:func:`fastsm._kernels.quasi_newton.within_tolerance`)."""
    ok = step_inf <= rule.xtol[p]
    if rule.ftol > 0.0:
        ok = ok | (decrease <= rule.ftol * abs(f))
    return ok


def _direction(xp, s: _State, p, rule: Rule):
    """Search directions of the points ``p``, capped at the trust radius; False where one overflows
    (:func:`fastsm._kernels.quasi_newton.direction`)."""
    G = s.G[p]
    gn = xp.sqrt((G * G).sum(axis=1))
    max_step = rule.max_step[p]
    P = xp.empty_like(G)
    quasi = s.h_scaled[p] if rule.use_bfgs else xp.zeros(p.shape[0], dtype=bool)
    if rule.use_bfgs:
        Pq = -xp.einsum("bce,be->bc", s.H[p], G)
        lost = ~((Pq * G).sum(axis=1) < 0.0)
        quasi = quasi & ~lost
        s.h_scaled[p] = quasi
        P = Pq
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = xp.where(s.gd_len[p] == 0.0, max_step, s.gd_len[p]) / gn
        P = xp.where(quasi[:, None], P, -scale[:, None] * G)
        pn = xp.sqrt((P * P).sum(axis=1))
        sl = (P * G).sum(axis=1)
        ok = xp.isfinite(pn) & xp.isfinite(sl)
        cap = pn > max_step
        ratio = xp.where(cap, max_step / pn, 1.0)
    P = xp.where(cap[:, None], P * ratio[:, None], P)
    sl = xp.where(cap, sl * ratio, sl)
    s.P[p] = P
    s.slope[p] = xp.where(ok, sl, s.slope[p])
    return ok


def _next_iteration(xp, s: _State, p, rule: Rule) -> None:
    """A new iteration of each point ``p`` (its full step the next trial) or its end
    (:func:`fastsm._kernels.quasi_newton.next_iteration`)."""
    if p.shape[0] == 0:
        return
    can = s.active[p] & (s.n_iter[p] < rule.max_iter)
    q = p[can]
    ok = _direction(xp, s, q, rule) if q.shape[0] else xp.zeros(0, dtype=bool)
    go, failed = q[ok], q[~ok]
    s.active[failed] = False  # overflowing direction: unconverged
    if rule.use_bfgs and go.shape[0]:
        quasi = s.h_scaled[go]
        P = s.P[go]
        pn2 = (P * P).sum(axis=1)
        predicted = xp.where(xp.sqrt(pn2) < rule.max_step[go], -0.5 * s.slope[go], np.inf)
        done = quasi & _within(rule, go, xp.abs(P).max(axis=1), predicted, s.f[go])
        stop = go[done]
        s.converged[stop] = True
        s.active[stop] = False
        go = go[~done]
    s.state[p] = DONE
    s.t[go] = 1.0
    s.n_ls[go] = 0
    s.state[go] = SEARCH
    s.trial[go] = s.Y[go] + s.P[go]


def _record(s: _State, p, r, ev) -> None:
    s.f[p] = ev.value[r]
    s.G[p] = ev.grad[r]
    s.eta_y[p] = ev.eta_y[r]
    s.eta_xy[p] = ev.eta_xy[r]


def _check_start(xp, s: _State, p) -> None:
    """:func:`fastsm._kernels.quasi_newton.check_start` of the points ``p``."""
    gmax = xp.abs(s.G[p]).max(axis=1) if s.G.shape[1] else xp.zeros(p.shape[0])
    bad = ~xp.isfinite(s.f[p]) | ~xp.isfinite(gmax)
    flat = ~bad & (gmax == 0.0)
    s.active[p[bad | flat]] = False
    s.converged[p[flat]] = True


def _accept(xp, s: _State, p, r, Yt, ev, rule: Rule, decreased) -> None:
    """BFGS update and convergence test of the points ``p`` taking trial rows ``r``
    (:func:`fastsm._kernels.quasi_newton.accept`)."""
    Yn, Gn = Yt[r], ev.grad[r]
    sv = Yn - s.Y[p]
    yv = Gn - s.G[p]
    sy = (sv * yv).sum(axis=1)
    yy = (yv * yv).sum(axis=1)
    ss = (sv * sv).sum(axis=1)
    step_inf = xp.abs(sv).max(axis=1)
    if rule.use_bfgs:
        up = sy > 1e-12 * xp.sqrt(ss * yy)
        fresh = up & ~s.h_scaled[p]
        d = Yn.shape[1]
        H = s.H[p]
        with np.errstate(divide="ignore", invalid="ignore"):
            H = xp.where(fresh[:, None, None], (sy / yy)[:, None, None] * xp.eye(d), H)
            rho = 1.0 / sy
            hy = xp.einsum("bce,be->bc", H, yv)
            yhy = (yv * hy).sum(axis=1)
            coef = rho * rho * yhy + rho
            Hn = (H - rho[:, None, None] * (sv[:, :, None] * hy[:, None, :] + hy[:, :, None] * sv[:, None, :])
                  + coef[:, None, None] * sv[:, :, None] * sv[:, None, :])
        s.H[p] = xp.where(up[:, None, None], Hn, H)
        s.h_scaled[p] = s.h_scaled[p] | up
    full = s.t[p] == 1.0
    s.gd_len[p] = xp.sqrt(ss) * xp.where(full, 2.0, 1.0)
    decrease = s.f[p] - ev.value[r]
    s.Y[p] = Yn
    s.G[p] = Gn
    s.f[p] = ev.value[r]
    s.n_iter[p] += 1
    gmax = xp.abs(Gn).max(axis=1)
    done = (full & _within(rule, p, step_inf, xp.where(decreased, decrease, np.inf), s.f[p])) | (gmax == 0.0)
    s.converged[p[done]] = True
    s.active[p[done]] = False


def _backtrack(xp, s: _State, p, r, ev, rule: Rule):
    """Refused trials of the points ``p``: the next, shorter trial (True) or the end of the search
    (:func:`fastsm._kernels.quasi_newton.backtrack_step`, :func:`fastsm._kernels.linesearch.backtrack`)."""
    s.n_ls[p] += 1
    slope_trial = (ev.grad[r] * s.P[p]).sum(axis=1)
    tP = xp.abs(s.t[p][:, None] * s.P[p])
    step = xp.zeros(p.shape[0])
    for c in range(tP.shape[1]):  # a NaN entry is taken, as the Numba loop takes it
        v = tP[:, c]
        step = xp.where(~(v <= step), v, step)
    stop = ~xp.isfinite(step) | (s.n_ls[p] >= config.MAX_LINESEARCH)
    tiny = ~stop & (step < 0.1 * rule.xtol[p])
    retry = tiny & s.h_scaled[p] if rule.use_bfgs else xp.zeros(p.shape[0], dtype=bool)
    end = tiny & ~retry
    s.h_scaled[p[retry]] = False
    s.active[p[stop | end]] = False
    s.converged[p[end]] = slope_trial[end] >= 0.0
    more = ~stop & ~tiny
    f0, ft, t, sl = s.f[p], ev.value[r], s.t[p], s.slope[p]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        denom = 2.0 * (ft - f0 - sl * t)
        tn = -sl * t * t / denom
        tn = xp.where(tn < 0.1 * t, 0.1 * t, xp.where(tn > 0.5 * t, 0.5 * t, tn))
        tn = xp.where(denom <= 0.0, 0.5 * t, tn)
        tn = xp.where(xp.isfinite(ft), tn, 0.1 * t)
    q = p[more]
    s.t[q] = tn[more]
    s.trial[q] = s.Y[q] + s.t[q][:, None] * s.P[q]
    return more


def _seed_inverse(xp, s: _State, p, Hx) -> None:
    """Exact Hessians ``Hx`` of the points ``p`` arrived: their inverses become the BFGS matrices where
    positive definite, else shifted by :func:`fastsm._kernels.curvature.seed_inverse`'s rule."""
    h, d, _ = Hx.shape
    finite = xp.isfinite(Hx).reshape(h, -1).all(axis=1)
    A = xp.where(finite[:, None, None], Hx, xp.eye(d))
    L, ok = batched_cholesky(xp, A)
    ok = ok & finite
    first0, every, last = config.CURVATURE_SCHEDULE
    later = (hessian_cost(d) < config.CURVATURE_SHIFT_COST) & (s.n_iter[p] + every <= _first_try(d) + last - first0)
    shift = finite & ~ok & ~later
    if bool(shift.any()):
        fro = xp.sqrt((A * A).reshape(h, -1).sum(axis=1))
        beta = config.CURVATURE_SHIFT * fro
        low = xp.diagonal(A, axis1=1, axis2=2).min(axis=1)
        tau = xp.maximum(beta, beta - low)
        pending = shift.copy()
        for _ in range(64):
            Ls, oks = batched_cholesky(xp, A + tau[:, None, None] * xp.eye(d))
            take = pending & oks
            L = xp.where(take[:, None, None], Ls, L)
            ok = ok | take
            pending = pending & ~oks
            if not bool(pending.any()):
                break
            tau = xp.where(pending, 2.0 * tau, tau)
    q = p[ok]
    if q.shape[0]:
        s.H[q] = inverse_from_cholesky(xp, L[ok])
        s.h_scaled[q] = True
        s.h_exact[q] = True


def _wants_curvature(xp, s: _State, p, rule: Rule):
    """:func:`fastsm._kernels.curvature.wants_curvature` of the points ``p`` that just moved."""
    first0, every, last = config.CURVATURE_SCHEDULE
    d = s.Y.shape[1]
    first = _first_try(d)
    k = s.n_iter[p]
    return (s.active[p] & (k < rule.max_iter) & ~s.h_exact[p] & (first <= k) & (k <= first + last - first0)
            & ((k - first) % every == 0))


def minimize(xp, evaluate: Callable, hessian: Callable | None, Y0, alt, use_alt, rule: Rule) -> Result:
    """Minimise every point's objective from ``Y0`` (``use_alt``: from the lower of ``Y0`` and ``alt``), as
    :func:`fastsm._kernels.optimize.minimize_batch` with all points in flight.

    ``evaluate(idx, Yt)``: the :class:`~fastsm.cuda.evaluation.Evaluations` of points ``idx`` at the trials
    ``Yt``; ``hessian(Yt, ev, rows, points)``: exact Hessians at rows ``rows`` of that evaluation, the points
    ``points`` (``rule.hessian``).
    """
    s = _State(xp, Y0)
    while True:
        idx = xp.flatnonzero((s.state == START) | (s.state == ALT) | (s.state == SEARCH))
        if idx.shape[0] == 0:
            break
        Yt = s.trial[idx]
        ev = evaluate(idx, Yt)
        s.n_eval[idx] += 1
        s.hits[idx] += ev.hits
        rows = xp.arange(idx.shape[0])
        st = s.state[idx]
        nxt = []
        # the start and its alternative (start_step)
        first = st == START
        pa, ra = idx[first], rows[first]
        _record(s, pa, ra, ev)
        to_alt = use_alt[pa]
        s.state[pa[to_alt]] = ALT
        s.trial[pa[to_alt]] = alt[pa[to_alt]]
        second = st == ALT
        pb, rb = idx[second], rows[second]
        lower = ev.value[rb] < s.f[pb]
        s.Y[pb[lower]] = alt[pb[lower]]
        _record(s, pb[lower], rb[lower], ev)
        chosen = xp.concatenate([pa[~to_alt], pb])
        _check_start(xp, s, chosen)
        nxt.append(chosen)
        # line-search trials
        search = st == SEARCH
        ps, rs = idx[search], rows[search]
        f0, ft, t, sl = s.f[ps], ev.value[rs], s.t[ps], s.slope[ps]
        with np.errstate(invalid="ignore", over="ignore"):
            arm = xp.isfinite(ft) & (ft <= f0 + config.ARMIJO_C1 * t * sl)
            st_trial = (ev.grad[rs] * s.P[ps]).sum(axis=1)
            wolfe = (xp.isfinite(ft) & (ft <= f0 + config.WOLFE_EPS * abs(f0)) & (0.9 * sl <= st_trial)
                     & (st_trial <= -0.8 * sl))
        acc = arm | wolfe
        pacc, racc = ps[acc], rs[acc]
        _accept(xp, s, pacc, racc, Yt, ev, rule, arm[acc])
        s.eta_y[pacc] = ev.eta_y[racc]
        s.eta_xy[pacc] = ev.eta_xy[racc]
        if rule.hessian and hessian is not None and pacc.shape[0]:
            want = _wants_curvature(xp, s, pacc, rule)
            ph, rh = pacc[want], racc[want]
            if ph.shape[0]:
                s.n_eval[ph] += hessian_cost(s.Y.shape[1])
                _seed_inverse(xp, s, ph, hessian(Yt, ev, rh, ph))
        nxt.append(pacc)
        refused = ~acc
        pr, rr = ps[refused], rs[refused]
        more = _backtrack(xp, s, pr, rr, ev, rule)
        nxt.append(pr[~more])
        _next_iteration(xp, s, xp.concatenate(nxt), rule)
    return Result(s.Y, s.f, s.n_iter, s.n_eval, s.converged, s.hits, s.eta_y, s.eta_xy)
