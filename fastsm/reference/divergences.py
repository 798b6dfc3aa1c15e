"""Plain NumPy/SciPy twins of :mod:`fastsm.divergences` (same signatures).

A Python loop over pairs with ``numpy.linalg.slogdet``/``inv`` per pair, the
way the formulas read.  ``form`` and ``threads`` are accepted; ``form``
selects the textbook formula.
"""

from __future__ import annotations

import numpy as np


def _pairs(mu_p, S_p, mu_q, S_q):
    mp, Sp, mq, Sq = (np.asarray(a, dtype=float) for a in (mu_p, S_p, mu_q, S_q))
    batch = np.broadcast_shapes(mp.shape[:-1], Sp.shape[:-2], mq.shape[:-1], Sq.shape[:-2])
    d = mp.shape[-1]
    arrs = [np.broadcast_to(a, batch + a.shape[k:]).reshape((-1,) + a.shape[k:])
            for a, k in ((mp, -1), (Sp, -2), (mq, -1), (Sq, -2))]
    return (*arrs, batch, d)


def _shape(vals, batch):
    out = np.array(vals).reshape(batch)
    return float(out) if out.ndim == 0 else out


def log_chernoff(mu_p, S_p, mu_q, S_q, alpha, *, form="cholesky", threads=None):
    mp, Sp, mq, Sq, batch, _ = _pairs(mu_p, S_p, mu_q, S_q)
    a = alpha
    vals = []
    for i in range(len(mp)):
        D = mp[i] - mq[i]
        if form == "cholesky":
            S = a * Sq[i] + (1 - a) * Sp[i]
            v = 0.5 * ((1 - a) * np.linalg.slogdet(Sp[i])[1] + a * np.linalg.slogdet(Sq[i])[1]
                       - np.linalg.slogdet(S)[1]) - 0.5 * a * (1 - a) * D @ np.linalg.solve(S, D)
        else:
            Pi, Qi = np.linalg.inv(Sp[i]), np.linalg.inv(Sq[i])
            M = a * Pi + (1 - a) * Qi
            v = -0.5 * (a * np.linalg.slogdet(Sp[i])[1] + (1 - a) * np.linalg.slogdet(Sq[i])[1]
                        + np.linalg.slogdet(M)[1]) - 0.5 * a * (1 - a) * D @ Qi @ np.linalg.inv(M) @ Pi @ D
        vals.append(v)
    return _shape(vals, batch)


def sm(mu_p, S_p, mu_q, S_q, alpha, beta, *, form="cholesky", threads=None):
    lr = np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, alpha, form=form))
    out = lr / (alpha - 1) if beta == 1 else (np.exp(lr * (1 - beta) / (1 - alpha)) - 1) / (beta - 1)
    return float(out) if out.ndim == 0 else out


def renyi(mu_p, S_p, mu_q, S_q, alpha, *, form="cholesky", threads=None):
    out = np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, alpha, form=form)) / (alpha - 1)
    return float(out) if out.ndim == 0 else out


def tsallis(mu_p, S_p, mu_q, S_q, alpha, *, form="cholesky", threads=None):
    out = (np.exp(np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, alpha, form=form))) - 1) / (alpha - 1)
    return float(out) if out.ndim == 0 else out


def bhattacharyya(mu_p, S_p, mu_q, S_q, *, form="cholesky", threads=None):
    out = -np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, 0.5, form=form))
    return float(out) if out.ndim == 0 else out


def kl(mu_p, S_p, mu_q, S_q, *, threads=None):
    mp, Sp, mq, Sq, batch, d = _pairs(mu_p, S_p, mu_q, S_q)
    vals = []
    for i in range(len(mp)):
        Qi = np.linalg.inv(Sq[i])
        D = mp[i] - mq[i]
        vals.append(0.5 * (np.trace(Qi @ Sp[i]) + D @ Qi @ D - d
                           + np.linalg.slogdet(Sq[i])[1] - np.linalg.slogdet(Sp[i])[1]))
    return _shape(vals, batch)
