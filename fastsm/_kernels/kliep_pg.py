"""KLIEP by projected gradient ascent in ``alpha``, as Sugiyama et al. (2008) solve it (docs/math.md §5)."""

from __future__ import annotations

import numpy as np

from fastsm._kernels.kliep_problem import (
    STOP_INTERRUPTED,
    STOP_MAX_ITER,
    STOP_OBJECTIVE,
    combine,
    fw_gap,
    gradient,
    log_sum,
    record,
)
from fastsm.config import kernel


@kernel(internal=True)
def _project_pg(alpha, b, bn, c):
    """Sugiyama et al.'s KLIEP projection: onto ``b^T alpha = 1``, clip at 0, rescale.

    ``b / (b^T b)`` as ``bn c`` with ``bn = b / max(b)`` (an array, so that
    fast-math cannot fold the scale back) and ``c = 1 / (max(b) |bn|^2)``: at
    narrow kernels ``b ~ 1e-160`` and ``b^T b`` itself underflows to zero.
    """
    s = 0.0
    for l in range(alpha.shape[0]):
        s += b[l] * alpha[l]
    for l in range(alpha.shape[0]):
        alpha[l] += bn[l] * ((1.0 - s) * c)
        if alpha[l] < 0.0:
            alpha[l] = 0.0
    s = 0.0
    for l in range(alpha.shape[0]):
        s += b[l] * alpha[l]
    if s > 0.0:
        for l in range(alpha.shape[0]):
            alpha[l] /= s



@kernel(internal=True)
def _record_pg(p, z, mu, score, it, r, gt, trace):
    """Gradient ``gt`` at ``z`` (``r = 1/z`` as scratch) and the trace row ``it`` of a projected-gradient step."""
    for j in range(z.shape[0]):
        r[j] = 1.0 / z[j]
    gradient(p, r, gt)
    _, gmax, mg = fw_gap(gt, mu)
    nnz = 0
    for l in range(mu.shape[0]):
        if mu[l] > 0.0:
            nnz += 1
    record(trace, it, gmax - mg, score, nnz)
    if it < trace.step.shape[0]:
        trace.step[it] = -1



@kernel()
def projected_gradient(p, b, mu, max_iter, iter_per_step, trace, stop):
    """KLIEP as Sugiyama et al. (2008) solve it: projected gradient ascent in ``alpha``.

    Step sizes ``eps = 10^3, 10^2, ..., 10^-3``; at each, up to
    ``iter_per_step`` ascent steps ``alpha += eps A^T (1 / A alpha)`` each
    followed by the projection, until the mean log-likelihood stops
    increasing.  ``mu`` (simplex coordinates) is the start and the result.

    Returns ``(n_iter, stop_reason)``.
    """
    n_c = mu.shape[0]
    n = p.Xte.shape[0]
    buf = np.empty(n)
    bmax = 0.0
    for l in range(n_c):
        bmax = max(bmax, b[l])
    bn = np.empty(n_c)
    for l in range(n_c):
        bn[l] = b[l] / bmax
    bbn = 0.0
    for l in range(n_c):
        bbn += bn[l] * bn[l]
    c = 1.0 / bmax / bbn
    alpha = np.empty(n_c)
    for l in range(n_c):
        alpha[l] = mu[l] * p.inv_b[l]
    _project_pg(alpha, b, bn, c)
    for l in range(n_c):
        mu[l] = alpha[l] * b[l]
    z = np.empty(n)
    combine(p, mu, z, buf)
    score = log_sum(z)
    r = np.empty(n)
    gt = np.empty(n_c)
    trial = np.empty(n_c)
    mu_t = np.empty(n_c)
    z_t = np.empty(n)
    it = 0
    reason = STOP_OBJECTIVE
    eps = 1e3
    for _ in range(7):
        for _ in range(iter_per_step):
            _record_pg(p, z, mu, score, it, r, gt, trace)
            if it >= max_iter:
                return it, STOP_MAX_ITER
            if stop[0] != 0:
                return it, STOP_INTERRUPTED
            for l in range(n_c):  # A^T r = b * gt
                trial[l] = alpha[l] + eps * b[l] * gt[l]
            _project_pg(trial, b, bn, c)
            for l in range(n_c):
                mu_t[l] = trial[l] * b[l]
            combine(p, mu_t, z_t, buf)
            s_new = log_sum(z_t)
            if not s_new > score:
                break
            score = s_new
            alpha[:] = trial
            mu[:] = mu_t
            z[:] = z_t
            it += 1
        eps *= 0.1
    _record_pg(p, z, mu, score, it, r, gt, trace)
    return it, reason
