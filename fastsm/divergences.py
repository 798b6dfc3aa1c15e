"""The Sharma–Mittal family between Gaussians, batched ([SM] §2, §3.4; docs/math.md §4).

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
  as [SM] §2.1 states (docs/math.md §4; the test suite shows the paper's form wrong).

``form="cholesky"`` uses [SM] Lemma 3.1 / Eq. 18 (corrected): three Cholesky
factorisations (of ``S_p``, ``S_q`` and ``a S_q + (1-a) S_p``).
``form="nielsen"`` uses the Nielsen–Nock closed form ([SM] Eq. 3 with the
inverse restored), through ``S_p^-1`` and ``S_q^-1``; it exists for the
speed comparison of [SM] App. 3.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fastsm._kernels import gaussian as _g
from fastsm._threads import thread_limits
from fastsm._validation import as_float_array, check_choice, check_scalar

Form = Literal["cholesky", "nielsen"]

__all__ = ["log_chernoff", "sm", "renyi", "tsallis", "kl", "bhattacharyya"]

_STATUS_NAMES = {1: "S_p", 2: "S_q"}


#: Pairs handled per kernel call: broadcast stacks are never materialised whole
#: (all pairs of 3 000 Gaussians in d = 3 took +1.8 GB before; now a few MB).
CHUNK = 1 << 15

#: Below this |1 - alpha|, the order-alpha quantities are computed from the
#: eigenvalues of ``L_q^-1 (S_p - S_q) L_q^-T`` (see :func:`_renyi_near_one`).
NEAR_ONE = 1e-3


def _prepare(mu_p, S_p, mu_q, S_q):
    """Validated inputs as broadcast *views* (no copy), their batch shape and size."""
    mp = as_float_array("mu_p", mu_p, ndim=tuple(range(1, 33)))
    mq = as_float_array("mu_q", mu_q, ndim=tuple(range(1, 33)))
    Sp = as_float_array("S_p", S_p, ndim=tuple(range(2, 34)))
    Sq = as_float_array("S_q", S_q, ndim=tuple(range(2, 34)))
    d = mp.shape[-1]
    if mq.shape[-1] != d:
        raise ValueError(f"mu_q must have dimension {d} (that of mu_p), got {mq.shape[-1]}")
    for name, S in (("S_p", Sp), ("S_q", Sq)):
        if S.shape[-2:] != (d, d):
            raise ValueError(f"{name} must have trailing shape {(d, d)} to match the means, got {S.shape[-2:]}")
        if not np.allclose(S, np.swapaxes(S, -1, -2), rtol=1e-10, atol=1e-12 * np.abs(S).max()):
            raise ValueError(f"{name} must be symmetric")
    try:
        batch = np.broadcast_shapes(mp.shape[:-1], Sp.shape[:-2], mq.shape[:-1], Sq.shape[:-2])
    except ValueError as exc:
        raise ValueError(f"the batch dimensions of mu_p, S_p, mu_q, S_q do not broadcast: {exc}") from None
    views = [np.broadcast_to(a, batch + a.shape[k:]) for a, k in ((mp, -1), (Sp, -2), (mq, -1), (Sq, -2))]
    return views, batch, int(np.prod(batch))


def _chunks(views, batch, n):
    """``(start, stop, [mp, Sp, mq, Sq])`` with contiguous chunk arrays of at most CHUNK pairs."""
    for s in range(0, n, CHUNK):
        e = min(n, s + CHUNK)
        if len(batch) == 0:  # one pair: a copy, writable as the gathered chunks are (one kernel signature for both)
            yield s, e, [v.reshape((1,) + v.shape).copy() for v in views]
        else:
            idx = np.unravel_index(np.arange(s, e), batch)
            yield s, e, [np.ascontiguousarray(v[idx]).reshape((e - s,) + v.shape[len(batch):]) for v in views]


def _raise_status(status, s, batch):
    bad = np.flatnonzero(status)
    if bad.size:
        code = int(status[bad[0]])
        where = f" (pair {np.unravel_index(s + bad[0], batch) if batch else ()})"
        if code in _STATUS_NAMES:
            raise ValueError(f"{_STATUS_NAMES[code]} is not symmetric positive definite{where}")
        raise ValueError(f"a*S_q + (1-a)*S_p is not positive definite{where}: alpha > 1 needs it to be")


def _shape(values, batch):
    values = values.reshape(batch)
    return float(values) if values.ndim == 0 else values


def _renyi_near_one(mp, Sp, mq, Sq, a):
    """``R_a = log(rho_a) / (a - 1)`` without cancellation near ``a = 1``; returns ``(R, status)``.

    With ``t = 1 - a``, ``L`` the Cholesky factor of ``S_q`` and ``lam`` the
    eigenvalues (eigenvectors ``V``) of ``L^-1 (S_p - S_q) L^-T``::

        R_a = 1/2 sum_i [log1p(t lam_i) / t - log1p(lam_i)]
              + a/2 z^T V diag(1 / (1 + t lam)) V^T z,      z = L^-1 Delta

    (``S = a S_q + (1-a) S_p = L (I + t Lam) L^T``).  ``log1p(t lam) / t`` is
    accurate for every ``t``, so ``R_a -> KL(p || q)`` continuously; the
    direct form divides a ~1e-16 rounding error by ``t`` (5.54 instead of
    0.843 at ``a = 1 - 1e-16``).
    """
    c = mp.shape[0]
    status = np.zeros(c, dtype=np.int64)
    t = 1.0 - a
    R = np.full(c, np.nan)
    for k in range(c):
        try:
            np.linalg.cholesky(Sp[k])
        except np.linalg.LinAlgError:
            status[k] = 1
            continue
        try:
            L = np.linalg.cholesky(Sq[k])
        except np.linalg.LinAlgError:
            status[k] = 2
            continue
        X = np.linalg.solve(L, Sp[k] - Sq[k])
        A = np.linalg.solve(L, X.T)
        lam, V = np.linalg.eigh(0.5 * (A + A.T))
        if not np.all(1.0 + t * lam > 0.0):
            status[k] = 3
            continue
        z = V.T @ np.linalg.solve(L, mp[k] - mq[k])
        R[k] = 0.5 * np.sum(np.log1p(t * lam) / t - np.log1p(lam)) + 0.5 * a * np.sum(z * z / (1.0 + t * lam))
    return R, status


def _renyi(mu_p, S_p, mu_q, S_q, a, form, threads):
    """``R_a`` over the broadcast batch, chunk by chunk (kernel, or the near-one form)."""
    views, batch, n = _prepare(mu_p, S_p, mu_q, S_q)
    out = np.empty(n)
    near_one = abs(1.0 - a) < NEAR_ONE
    with thread_limits(threads):
        for s, e, (mp, Sp, mq, Sq) in _chunks(views, batch, n):
            if near_one:
                r, status = _renyi_near_one(mp, Sp, mq, Sq, a)
            else:
                lr = np.empty(e - s)
                status = np.zeros(e - s, dtype=np.int64)
                _g.log_rho_batch(mp, Sp, mq, Sq, a, _g.FORM_CHOLESKY if form == "cholesky" else _g.FORM_NIELSEN,
                                 lr, status)
                r = lr / (a - 1.0)
            _raise_status(status, s, batch)
            out[s:e] = r
    return out, batch


def _alpha(alpha):
    a = check_scalar("alpha", alpha, low=0.0, low_open=True)
    if a == 1.0:
        raise ValueError("alpha must differ from 1 (use kl() for the alpha -> 1 limit)")
    return a


def log_chernoff(mu_p: ArrayLike, S_p: ArrayLike, mu_q: ArrayLike, S_q: ArrayLike, alpha: float, *,
                 form: Form = "cholesky", threads: int | None = None) -> float | np.ndarray:
    """``log rho_a = log ∫ p(t)^a q(t)^(1-a) dt`` between Gaussians (docs/math.md §4)."""
    a = _alpha(alpha)
    check_choice("form", form, ("cholesky", "nielsen"))
    R, batch = _renyi(mu_p, S_p, mu_q, S_q, a, form, threads)
    return _shape((a - 1.0) * R, batch)


def sm(mu_p: ArrayLike, S_p: ArrayLike, mu_q: ArrayLike, S_q: ArrayLike, alpha: float, beta: float, *,
       form: Form = "cholesky", threads: int | None = None) -> float | np.ndarray:
    """Sharma–Mittal divergence ``D_{a,b}(p : q)`` ([SM] Eq. 1, 3, 13, 18).

    Computed as ``expm1((b-1) R_a) / (b-1)`` from the Rényi divergence
    ``R_a``, which is evaluated without cancellation near ``a = 1``.

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
        Broadcast stacks are processed in chunks of :data:`CHUNK` pairs:
        memory beyond the output is bounded.
    """
    b = check_scalar("beta", beta, low=0.0, low_open=True)
    a = _alpha(alpha)
    check_choice("form", form, ("cholesky", "nielsen"))
    R, batch = _renyi(mu_p, S_p, mu_q, S_q, a, form, threads)
    if b == 1.0:
        return _shape(R, batch)
    with np.errstate(over="ignore"):
        return _shape(np.expm1((b - 1.0) * R) / (b - 1.0), batch)


def renyi(mu_p: ArrayLike, S_p: ArrayLike, mu_q: ArrayLike, S_q: ArrayLike, alpha: float, *, form: Form = "cholesky",
          threads: int | None = None) -> float | np.ndarray:
    """Rényi divergence ``R_a(p : q) = log(rho_a) / (a - 1)`` (the ``beta -> 1`` limit of :func:`sm`)."""
    a = _alpha(alpha)
    check_choice("form", form, ("cholesky", "nielsen"))
    R, batch = _renyi(mu_p, S_p, mu_q, S_q, a, form, threads)
    return _shape(R, batch)


def tsallis(mu_p: ArrayLike, S_p: ArrayLike, mu_q: ArrayLike, S_q: ArrayLike, alpha: float, *,
            form: Form = "cholesky", threads: int | None = None) -> float | np.ndarray:
    """Tsallis divergence ``T_a(p : q) = (rho_a - 1) / (a - 1)`` (:func:`sm` with ``beta = alpha``)."""
    a = _alpha(alpha)
    check_choice("form", form, ("cholesky", "nielsen"))
    R, batch = _renyi(mu_p, S_p, mu_q, S_q, a, form, threads)
    return _shape(np.expm1((a - 1.0) * R) / (a - 1.0), batch)


def bhattacharyya(mu_p: ArrayLike, S_p: ArrayLike, mu_q: ArrayLike, S_q: ArrayLike, *, form: Form = "cholesky",
                  threads: int | None = None) -> float | np.ndarray:
    """Bhattacharyya distance ``B = -log ∫ sqrt(p q) = R_{1/2} / 2``."""
    check_choice("form", form, ("cholesky", "nielsen"))
    R, batch = _renyi(mu_p, S_p, mu_q, S_q, 0.5, form, threads)
    return _shape(0.5 * R, batch)


def kl(mu_p: ArrayLike, S_p: ArrayLike, mu_q: ArrayLike, S_q: ArrayLike, *,
       threads: int | None = None) -> float | np.ndarray:
    """Kullback–Leibler divergence ``KL(p || q)`` (the ``alpha, beta -> 1`` limit of :func:`sm`).

    ``1/2 [tr(S_q^-1 S_p) + Delta^T S_q^-1 Delta - d + log(|S_q| / |S_p|)]``
    (docs/math.md §4; [GMM] Eq. 4 drops the 1/2 and inverts the log ratio).
    """
    views, batch, n = _prepare(mu_p, S_p, mu_q, S_q)
    out = np.empty(n)
    with thread_limits(threads):
        for s, e, (mp, Sp, mq, Sq) in _chunks(views, batch, n):
            status = np.zeros(e - s, dtype=np.int64)
            _g.kl_batch(mp, Sp, mq, Sq, out[s:e], status)
            _raise_status(status, s, batch)
    return _shape(out, batch)
