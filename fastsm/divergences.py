"""The Sharma–Mittal family between Gaussians, batched ([SM] §2, §3.4; MATH §4).

Every function takes ``mu_p (..., d)``, ``S_p (..., d, d)``, ``mu_q``,
``S_q`` with broadcastable leading (batch) dimensions and returns an array of
the batch shape (a float for a single pair).  Pairs are evaluated in parallel
by Numba kernels through Cholesky factors.

With ``rho_a = ∫ p^a q^(1-a)``:

* ``sm``:            ``D_{a,b} = (rho_a^((1-b)/(1-a)) - 1) / (b - 1)``  ([SM] Eq. 1)
* ``renyi``:         ``R_a = log(rho_a) / (a - 1)``                   (b -> 1)
* ``tsallis``:       ``T_a = (rho_a - 1) / (a - 1)``                  (b = a)
* ``kl``:            ``KL(p||q)``                                     (a, b -> 1)
* ``bhattacharyya``: ``B = -log rho_{1/2} = R_{1/2} / 2`` — **not** ``2 R_{1/2}``
  as [SM] §2.1 states (MATH §4; the test suite shows the paper's form wrong).

``form="cholesky"`` uses [SM] Lemma 3.1 / Eq. 18 (corrected): three Cholesky
factorisations (of ``S_p``, ``S_q`` and ``a S_q + (1-a) S_p``).
``form="nielsen"`` uses the Nielsen–Nock closed form ([SM] Eq. 3 with the
inverse restored), through ``S_p^-1`` and ``S_q^-1``; it exists for the
speed comparison of [SM] App. 3.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from fastsm._kernels import gaussian as _g
from fastsm._threads import thread_limits
from fastsm._validation import as_float_array, check_choice, check_scalar

Form = Literal["cholesky", "nielsen"]

__all__ = ["log_chernoff", "sm", "renyi", "tsallis", "kl", "bhattacharyya"]

_STATUS_NAMES = {1: "S_p", 2: "S_q"}


def _prepare(mu_p, S_p, mu_q, S_q):
    mp = as_float_array("mu_p", mu_p, ndim=tuple(range(1, 33)))
    mq = as_float_array("mu_q", mu_q, ndim=tuple(range(1, 33)))
    Sp = as_float_array("S_p", S_p, ndim=tuple(range(2, 34)))
    Sq = as_float_array("S_q", S_q, ndim=tuple(range(2, 34)))
    d = mp.shape[-1]
    for name, m in (("mu_q", mq),):
        if m.shape[-1] != d:
            raise ValueError(f"{name} must have dimension {d} (that of mu_p), got {m.shape[-1]}")
    for name, S in (("S_p", Sp), ("S_q", Sq)):
        if S.shape[-2:] != (d, d):
            raise ValueError(f"{name} must have trailing shape {(d, d)} to match the means, got {S.shape[-2:]}")
        if not np.allclose(S, np.swapaxes(S, -1, -2), rtol=1e-10, atol=1e-12 * np.abs(S).max()):
            raise ValueError(f"{name} must be symmetric")
    try:
        batch = np.broadcast_shapes(mp.shape[:-1], Sp.shape[:-2], mq.shape[:-1], Sq.shape[:-2])
    except ValueError as exc:
        raise ValueError(f"the batch dimensions of mu_p, S_p, mu_q, S_q do not broadcast: {exc}") from None
    n = int(np.prod(batch))
    out = [np.ascontiguousarray(np.broadcast_to(a, batch + a.shape[k:]).reshape((n,) + a.shape[k:]))
           for a, k in ((mp, -1), (Sp, -2), (mq, -1), (Sq, -2))]
    return (*out, batch)


def _finish(values, status, batch):
    bad = np.flatnonzero(status)
    if bad.size:
        code = int(status[bad[0]])
        where = f" (pair {np.unravel_index(bad[0], batch) if batch else ()})"
        if code in _STATUS_NAMES:
            raise ValueError(f"{_STATUS_NAMES[code]} is not symmetric positive definite{where}")
        raise ValueError(f"a*S_q + (1-a)*S_p is not positive definite{where}: alpha > 1 needs it to be")
    values = values.reshape(batch)
    return float(values) if values.ndim == 0 else values


def _alpha(alpha):
    a = check_scalar("alpha", alpha, low=0.0, low_open=True)
    if a == 1.0:
        raise ValueError("alpha must differ from 1 (use kl() for the alpha -> 1 limit)")
    return a


def log_chernoff(mu_p, S_p, mu_q, S_q, alpha: float, *, form: Form = "cholesky", threads: int | None = None):
    """``log rho_a = log ∫ p(t)^a q(t)^(1-a) dt`` between Gaussians (MATH §4)."""
    a = _alpha(alpha)
    check_choice("form", form, ("cholesky", "nielsen"))
    mp, Sp, mq, Sq, batch = _prepare(mu_p, S_p, mu_q, S_q)
    out = np.empty(mp.shape[0])
    status = np.zeros(mp.shape[0], dtype=np.int64)
    with thread_limits(threads):
        _g.log_rho_batch(mp, Sp, mq, Sq, a, _g.FORM_CHOLESKY if form == "cholesky" else _g.FORM_NIELSEN,
                         out, status)
    return _finish(out, status, batch)


def sm(mu_p, S_p, mu_q, S_q, alpha: float, beta: float, *, form: Form = "cholesky", threads: int | None = None):
    """Sharma–Mittal divergence ``D_{a,b}(p : q)`` ([SM] Eq. 1, 3, 13, 18).

    Parameters
    ----------
    mu_p, mu_q : array_like (..., d)
        Means.
    S_p, S_q : array_like (..., d, d)
        Symmetric positive definite covariances.
    alpha : float
        Order, ``alpha > 0``, ``alpha != 1`` (``alpha > 1`` needs
        ``alpha S_q + (1-alpha) S_p`` positive definite).
    beta : float
        Degree, ``beta > 0``; ``beta == 1`` returns the Rényi limit.
    form : {"cholesky", "nielsen"}
        Lemma 3.1 form or the inverse-based Nielsen–Nock form.
    threads : int, optional
        Threads for this call.

    Returns
    -------
    float or ndarray of the broadcast batch shape
    """
    b = check_scalar("beta", beta, low=0.0, low_open=True)
    a = _alpha(alpha)
    lr = np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, a, form=form, threads=threads))
    if b == 1.0:
        out = lr / (a - 1.0)
    else:
        out = np.expm1(lr * (1.0 - b) / (1.0 - a)) / (b - 1.0)
    return float(out) if out.ndim == 0 else out


def renyi(mu_p, S_p, mu_q, S_q, alpha: float, *, form: Form = "cholesky", threads: int | None = None):
    """Rényi divergence ``R_a(p : q) = log(rho_a) / (a - 1)`` (the ``beta -> 1`` limit of :func:`sm`)."""
    a = _alpha(alpha)
    out = np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, a, form=form, threads=threads)) / (a - 1.0)
    return float(out) if out.ndim == 0 else out


def tsallis(mu_p, S_p, mu_q, S_q, alpha: float, *, form: Form = "cholesky", threads: int | None = None):
    """Tsallis divergence ``T_a(p : q) = (rho_a - 1) / (a - 1)`` (:func:`sm` with ``beta = alpha``)."""
    a = _alpha(alpha)
    out = np.expm1(np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, a, form=form, threads=threads))) / (a - 1.0)
    return float(out) if out.ndim == 0 else out


def bhattacharyya(mu_p, S_p, mu_q, S_q, *, form: Form = "cholesky", threads: int | None = None):
    """Bhattacharyya distance ``B = -log ∫ sqrt(p q) = R_{1/2} / 2``."""
    out = -np.asarray(log_chernoff(mu_p, S_p, mu_q, S_q, 0.5, form=form, threads=threads))
    return float(out) if out.ndim == 0 else out


def kl(mu_p, S_p, mu_q, S_q, *, threads: int | None = None):
    """Kullback–Leibler divergence ``KL(p || q)`` (the ``alpha, beta -> 1`` limit of :func:`sm`).

    ``1/2 [tr(S_q^-1 S_p) + Delta^T S_q^-1 Delta - d + log(|S_q| / |S_p|)]``
    (MATH §4; [GMM] Eq. 4 drops the 1/2 and inverts the log ratio).
    """
    mp, Sp, mq, Sq, batch = _prepare(mu_p, S_p, mu_q, S_q)
    out = np.empty(mp.shape[0])
    status = np.zeros(mp.shape[0], dtype=np.int64)
    with thread_limits(threads):
        _g.kl_batch(mp, Sp, mq, Sq, out, status)
    return _finish(out, status, batch)
