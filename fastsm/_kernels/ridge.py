"""The ridge start and the output spread of a small model in one GIL-free call.

:func:`ridge_start` computes what :func:`fastsm.tgp.fitting.ridge` and
:func:`fastsm.tgp.fitting.output_spread` compute with NumPy (the same least-squares problem; NumPy
solves it by LAPACK's ``dgelsd``, an SVD with the cut-off ``eps * max(M, N)``), for the local models
(:func:`fastsm.tgp.fitting.factorize_cholesky`), where those two functions' twenty-odd NumPy
calls per model held the GIL for longer than the solve took.  Call on one BLAS thread.

The problem (``K + dx`` rows, ``dx + 1`` columns; the penalty rows make it full rank) is solved by
Householder QR (:func:`householder_lstsq`: 21 µs for K = 200, dx = 12, dy = 10 where NumPy's ``lstsq``
took 62 µs; the whole start 97 → 29 µs, one thread), both backward stable; where ``R``'s diagonal spans more
than :data:`QR_MAX_SPREAD` (the inputs nearly collinear at the penalty's scale, identical, or a single point:
the SVD's rank cut-off may then drop directions) the minimal-norm ``dgelsd`` solution is used, in NumPy
(:func:`solve_ridge_start`): the kernels that call :func:`ridge_start` leave such a model to Python.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm._kernels.kliep_problem import dot_lanes
from fastsm._kernels.points import linear_rows
from fastsm.config import kernel

#: ``max |R_ii| / min |R_ii|`` above which :func:`ridge_start` leaves the least-squares problem to
#: ``dgelsd`` (``1 / sqrt(eps)``: far below where the SVD's cut-off ``eps * max(M, N)`` acts).
QR_MAX_SPREAD = 2.0 ** 26

EPS = float(np.finfo(np.float64).eps)


@kernel()
def householder_lstsq(A, b):
    """``(z, ok)``: ``argmin ||A z - b||`` by Householder QR (``A``: m × n, m >= n; ``b``: m × k).

    Works on ``[A b]^T`` (columns contiguous): each reflector's product with a column is a dot
    product (:func:`~fastsm._kernels.kliep_problem.dot_lanes`) and an ``axpy``.  ``ok`` is False
    (``z`` meaningless) where ``R``'s diagonal spans more than :data:`QR_MAX_SPREAD` or is not finite.
    """
    m, n = A.shape
    k = b.shape[1]
    T = np.empty((n + k, m))
    for i in range(m):
        for c in range(n):
            T[c, i] = A[i, c]
        for c in range(k):
            T[n + c, i] = b[i, c]
    diag = np.empty(n)
    z = np.zeros((n, k))
    for j in range(n):
        v = T[j, j:]  # becomes the reflector's vector
        top = v[0]
        s = dot_lanes(v, v)
        a = -np.sqrt(s) if top >= 0.0 else np.sqrt(s)  # R[j, j]; v = x - a e_1 without cancellation
        if not (a != 0.0 and np.isfinite(a)):
            return z, False
        v[0] = top - a
        tau = 1.0 / (a * v[0])  # I - 2 v v^T / ||v||^2 with 2 / ||v||^2 = -1 / (a v_1)
        for c in range(j + 1, n + k):
            col = T[c, j:]
            f = tau * dot_lanes(v, col)
            for i in range(m - j):
                col[i] += f * v[i]
        diag[j] = a
    big = 0.0
    small = np.inf
    for j in range(n):
        big = max(big, abs(diag[j]))
        small = min(small, abs(diag[j]))
    if not small * QR_MAX_SPREAD >= big:
        return z, False
    for j in range(n - 1, -1, -1):  # R z = Q^T b: R[j, l] = T[l, j] (l > j), (Q^T b)[j, c] = T[n + c, j]
        zj = z[j]
        for c in range(k):
            zj[c] = T[n + c, j]
        for l in range(j + 1, n):
            r = T[l, j]
            zl = z[l]
            for c in range(k):
                zj[c] -= r * zl[c]
        for c in range(k):
            zj[c] /= diag[j]
    return z, True


class RidgeSystem(NamedTuple):
    """:func:`ridge_start`'s least-squares problem ``min ||A z - b||`` and the frame its solution is read in."""

    A: np.ndarray  # (n + dx) × (dx + 1): centred, scaled (and weighted) inputs, a bias column, penalty rows
    b: np.ndarray  # (n + dx) × dy: the (weighted) outputs, zeros on the penalty rows
    mu: np.ndarray  # the inputs' column means
    scale: np.ndarray  # their root mean squares about the means (1 where constant)
    constant: np.ndarray  # bool: columns constant to rounding (they drop out)


@kernel()
def ridge_system(X, Y, w, weighted):
    """The problem of :func:`fastsm.tgp.fitting.ridge` (:class:`RidgeSystem`): on centred columns scaled to unit
    root mean square (a column constant to rounding is 0, as in :func:`fastsm.tgp.fitting.ridge_frame`), penalty
    ``r = 1e-6 * max(mean_c sum_i Xc[i, c]^2, 1e-300)`` on the inputs, none on the bias; with weights ``w`` (if
    ``weighted``) rows scaled by ``sqrt(w / max w)`` and ``r`` by ``mean(w / max w)``."""
    n, dx = X.shape
    dy = Y.shape[1]
    mu = np.zeros(dx)
    for i in range(n):
        for c in range(dx):
            mu[c] += X[i, c]
    for c in range(dx):
        mu[c] /= n
    var = np.zeros(dx)
    top_x = np.zeros(dx)
    for i in range(n):
        for c in range(dx):
            d = X[i, c] - mu[c]
            var[c] += d * d
            top_x[c] = max(top_x[c], abs(X[i, c]))
    scale = np.empty(dx)
    constant = np.zeros(dx, dtype=np.bool_)
    total = 0.0
    for c in range(dx):
        s = np.sqrt(var[c] / n)
        if s <= n * EPS * top_x[c]:  # constant to rounding (fastsm.tgp.fitting.ridge_frame)
            constant[c] = True
            scale[c] = 1.0
        else:
            total += var[c]
            scale[c] = s
    r = 1e-6 * max(total / dx, 1e-300)
    top = 1.0
    if weighted:
        top = w.max()
        r *= (w / top).mean()
    A = np.zeros((n + dx, dx + 1))
    b = np.zeros((n + dx, dy))
    for i in range(n):
        si = np.sqrt(w[i] / top) if weighted else 1.0
        for c in range(dx):
            A[i, c] = 0.0 if constant[c] else si * ((X[i, c] - mu[c]) / scale[c])
        A[i, dx] = si
        for c in range(dy):
            b[i, c] = si * Y[i, c]
    root = np.sqrt(r)
    for c in range(dx):
        A[n + c, c] = root / scale[c]
    return RidgeSystem(A, b, mu, scale, constant)


@kernel()
def ridge_coefficients(system, z):
    """The ridge coefficients ``(dx+1, dy)`` (bias last) in the inputs' own frame from the solution ``z`` of
    ``system`` (:class:`RidgeSystem`)."""
    dx = system.mu.shape[0]
    dy = z.shape[1]
    coef = np.empty((dx + 1, dy))
    for c in range(dx):
        for k in range(dy):
            coef[c, k] = z[c, k] / system.scale[c]
    for k in range(dy):
        t = 0.0
        for c in range(dx):
            if not system.constant[c]:
                t += system.mu[c] * coef[c, k]
        coef[dx, k] = z[dx, k] - t
    return coef


@kernel()
def ridge_start(X, Y, w, weighted):
    """``(coef, spread, solved)``: ridge coefficients ``(dx+1, dy)`` (bias last) of :func:`ridge_system`'s
    problem by Householder QR, and ``sqrt(sum_c var(Y[:, c]))``.  ``solved`` is False (``coef`` meaningless)
    where ``R`` is near singular (:func:`householder_lstsq`): :func:`solve_ridge_start` then takes ``dgelsd``'s
    minimal-norm solution in NumPy, and the kernels that call this one leave such a point to Python (LAPACK's
    least squares compiled into this kernel cost every first local prediction about 5 s)."""
    n = X.shape[0]
    dy = Y.shape[1]
    system = ridge_system(X, Y, w, weighted)
    z, solved = householder_lstsq(system.A, system.b)
    coef = ridge_coefficients(system, z)
    ym = np.zeros(dy)
    for i in range(n):
        for k in range(dy):
            ym[k] += Y[i, k]
    for k in range(dy):
        ym[k] /= n
    ss = 0.0
    for k in range(dy):
        v = 0.0
        for i in range(n):
            t = Y[i, k] - ym[k]
            v += t * t
        ss += v / n
    return coef, np.sqrt(ss), solved


def solve_ridge_start(X: np.ndarray, Y: np.ndarray, w: np.ndarray, weighted: bool) -> tuple[np.ndarray, float]:
    """``(coef, spread)`` of :func:`ridge_start`, with ``dgelsd``'s minimal-norm solution (NumPy, the cut-off
    ``eps * max(M, N)``) where its QR refuses the problem."""
    coef, spread, solved = ridge_start(X, Y, w, weighted)
    if not solved:
        system = ridge_system(X, Y, w, weighted)
        m, n = system.A.shape
        z = np.linalg.lstsq(system.A, system.b, rcond=EPS * max(m, n))[0]
        coef = ridge_coefficients(system, z)
    return coef, float(spread)


@kernel()
def ridge_starts(X, Y, w, weighted, members, Xq, Y0, given):
    """Per test point ``q`` of a KNN-local prediction: :func:`ridge_start` of its members ``members[q]`` (the
    training rows of ``X``, ``Y`` and, if ``weighted``, ``w``, gathered as :func:`fastsm._kernels.knn.knn_rows`
    gathers them: the same bits) and its start, ``[Xq[q], 1] coef`` (or ``Y0[q]`` if ``given``).

    Returns ``(starts, spread, refused)``: ``refused[q]`` where the members' outputs have no spread, the QR
    refuses their problem (:func:`ridge_start`) or the start overflows, the points that path leaves to Python.
    One thread (a ``prange`` compiles several times slower): the caller splits the points between threads
    (:func:`fastsm.cuda.local.host_starts`).
    """
    m, k = members.shape
    dx, dy = X.shape[1], Y.shape[1]
    starts = np.empty((m, dy))
    spread = np.empty(m)
    refused = np.empty(m, dtype=np.bool_)
    for q in range(m):
        Xm = np.empty((k, dx))
        Ym = np.empty((k, dy))
        wm = np.empty(k if weighted else 1)
        wm[:] = 1.0
        for i in range(k):
            Xm[i] = X[members[q, i]]
            Ym[i] = Y[members[q, i]]
            if weighted:
                wm[i] = w[members[q, i]]
        coef, s, solved = ridge_start(Xm, Ym, wm, weighted)
        spread[q] = s
        refused[q] = not (solved and s > 0.0)
        if given:
            for c in range(dy):
                starts[q, c] = Y0[q, c]
        elif not refused[q]:
            y0 = linear_rows(Xq[q:q + 1], coef)
            for c in range(dy):
                starts[q, c] = y0[0, c]
                if not np.isfinite(y0[0, c]):
                    refused[q] = True
    return starts, spread, refused
