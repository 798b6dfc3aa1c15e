"""Batched quasi-Newton / gradient descent over many test points at once.

All points that need an objective evaluation (first evaluation or a
line-search trial) are evaluated together by
:func:`~fastsm._kernels.objectives.evaluate_rows` (two GEMMs); the per-point
bookkeeping (direction, Armijo test, BFGS update of a ``dy×dy`` inverse
Hessian) is O(dy^2) per point and runs serially: it is negligible beside
the O(N^2) evaluations, and a serial driver compiles in a third of the time
of a parallel one (the cold start).  Points leave the active set when they
converge.

Every step is capped at a trust radius ``max_step`` (Euclidean norm): far
from the training outputs the objectives go flat, and an unbounded
quasi-Newton step can jump onto that plateau, out of the basin of its start.
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.linesearch import approx_wolfe_accept_min, armijo_accept_min, backtrack
from fastsm._kernels.objectives import evaluate_rows, workspace
from fastsm.config import kernel

#: Line-search trials per iteration before the direction is declared useless.
MAX_LINESEARCH = 40


@kernel()
def _compact(mask):
    n = 0
    for i in range(mask.shape[0]):
        if mask[i]:
            n += 1
    out = np.empty(n, dtype=np.int64)
    n = 0
    for i in range(mask.shape[0]):
        if mask[i]:
            out[n] = i
            n += 1
    return out


@kernel()
def minimize_batch(method, Y0, Z, gamma, kyy, kxx, alpha, beta, floor, M1, M2, F, eta_x, xwx,
                   logdet_y, logdet_x, max_iter, xtol, max_step, use_bfgs, stop, cubic, held):
    """Minimise the TGP objective of every point, starting from ``Y0``.

    ``stop`` is a one-element int64 array polled before every evaluation
    round: a non-zero value (set by another thread, e.g. on Ctrl-C) ends the
    run with the points still active marked unconverged.  ``cubic``: see
    :func:`~fastsm._kernels.objectives.evaluate_rows`, and ``held`` (exact
    leave-one-out) too.  ``xtol`` and ``max_step`` are per point (a
    leave-one-out model's output spread is its own).  A point whose step or
    objective becomes non-finite stops unconverged.

    Returns ``(Y, f, n_iter, n_eval, converged, floor_hits)``.
    """
    B, d = Y0.shape
    n = Z.shape[0]
    Y = Y0.copy()
    f = np.empty(B)
    G = np.empty((B, d))
    H = np.zeros((B, d, d))
    HY = np.empty((B, d))
    h_scaled = np.zeros(B, dtype=np.bool_)
    P = np.empty((B, d))
    t = np.ones(B)
    slope = np.zeros(B)
    gd_len = np.zeros(B)
    n_iter = np.zeros(B, dtype=np.int64)
    n_eval = np.ones(B, dtype=np.int64)
    hits = np.zeros(B, dtype=np.int64)
    converged = np.zeros(B, dtype=np.bool_)
    active = np.ones(B, dtype=np.bool_)

    work = workspace(B, n)
    Yt = np.empty((B, d))
    ft = np.empty(B)
    Gt = np.empty((B, d))
    ey = np.empty(B)
    exy = np.empty(B)
    ht = np.zeros(B, dtype=np.int64)

    idx = np.arange(B)
    evaluate_rows(method, idx, Y, Z, gamma, kyy, kxx, alpha, beta, floor, M1, M2, F, eta_x, xwx,
                  logdet_y, logdet_x, work, f, G, ey, exy, ht, cubic, held)
    for p in range(B):
        hits[p] += ht[p]
        gmax = 0.0
        for c in range(d):
            gmax = max(gmax, abs(G[p, c]))
        if not np.isfinite(f[p]) or not np.isfinite(gmax):
            active[p] = False
        elif gmax == 0.0:
            active[p] = False
            converged[p] = True

    for _ in range(max_iter):
        if stop[0] != 0:
            break
        act = _compact(active)
        na = act.shape[0]
        if na == 0:
            break
        # search directions
        for r in range(na):
            p = act[r]
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
                if use_bfgs or gd_len[p] == 0.0:
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
                active[p] = False  # overflowing direction: stop, unconverged
                continue
            if pn > max_step[p]:
                for c in range(d):
                    P[p, c] *= max_step[p] / pn
                sl *= max_step[p] / pn
            slope[p] = sl
            t[p] = 1.0

        searching = np.zeros(B, dtype=np.bool_)
        for r in range(na):
            searching[act[r]] = active[act[r]]
        for _ls in range(MAX_LINESEARCH):
            if stop[0] != 0:
                break
            ls = _compact(searching)
            nl = ls.shape[0]
            if nl == 0:
                break
            for r in range(nl):
                p = ls[r]
                for c in range(d):
                    Yt[r, c] = Y[p, c] + t[p] * P[p, c]
            evaluate_rows(method, ls, Yt[:nl], Z, gamma, kyy, kxx, alpha, beta, floor, M1, M2, F,
                          eta_x, xwx, logdet_y, logdet_x, work, ft[:nl], Gt[:nl], ey[:nl], exy[:nl], ht[:nl],
                          cubic, held)
            for r in range(nl):
                p = ls[r]
                n_eval[p] += 1
                hits[p] += ht[r]
                slope_t = 0.0
                for c in range(d):
                    slope_t += Gt[r, c] * P[p, c]
                if armijo_accept_min(f[p], ft[r], t[p], slope[p]) or approx_wolfe_accept_min(
                        f[p], ft[r], slope[p], slope_t):
                    searching[p] = False
                    _accept(p, r, Y, f, G, H, HY, h_scaled, t, Yt, ft, Gt, gd_len, n_iter, converged,
                            active, xtol, use_bfgs)
                else:
                    step = 0.0
                    for c in range(d):
                        v = abs(t[p] * P[p, c])
                        if not v <= step:  # NaN propagates
                            step = v
                    if not np.isfinite(step):
                        searching[p] = False
                        active[p] = False
                    elif step < 0.1 * xtol[p]:
                        # no decrease at a step below tolerance: stationary to
                        # precision unless the quasi-Newton direction was stale
                        searching[p] = False
                        if use_bfgs and h_scaled[p]:
                            h_scaled[p] = False
                        else:
                            active[p] = False
                            converged[p] = True
                    else:
                        t[p] = backtrack(f[p], ft[r], t[p], slope[p])
        # points still searching after MAX_LINESEARCH trials stop unconverged
        for p in range(B):
            if searching[p]:
                active[p] = False
    return Y, f, n_iter, n_eval, converged, hits


@kernel()
def _accept(p, r, Y, f, G, H, HY, h_scaled, t, Yt, ft, Gt, gd_len, n_iter, converged, active, xtol, use_bfgs):
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
    if not use_bfgs:
        gd_len[p] = np.sqrt(ss) * (2.0 if t[p] == 1.0 else 1.0)
    for c in range(d):
        Y[p, c] = Yt[r, c]
        G[p, c] = Gt[r, c]
    f[p] = ft[r]
    n_iter[p] += 1
    gmax = 0.0
    for c in range(d):
        gmax = max(gmax, abs(G[p, c]))
    # a small step is evidence of convergence only if it was a full step; a
    # step shrunk by backtracking says nothing about the distance to the minimum
    if (t[p] == 1.0 and step_inf <= xtol[p]) or gmax == 0.0:
        converged[p] = True
        active[p] = False
