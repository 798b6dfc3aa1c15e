"""What a prediction computes per test point before and around its optimisation: the ridge start,
the per-point data, single evaluations and the supported start, as kernels.

:mod:`fastsm.tgp.prediction` calls these for every model, and :mod:`fastsm._kernels.predict`
calls them inside one GIL-free kernel per local model, so that both give the same bits by
construction.  A fitted model's arrays travel as one :class:`Fitted`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm._kernels.objectives import (
    IKL,
    KL,
    SM,
    project_rows,
)
from fastsm._kernels.quasi_newton import Start
from fastsm._kernels.rank_one import sumsq_rows
from fastsm._kernels.rbf import rbf_cross
from fastsm._kernels.shared import call
from fastsm._kernels.tri_rows import run_products
from fastsm.config import EXTRAPOLATION_K, kernel


class Fitted(NamedTuple):
    """A fitted model's arrays as the point kernels read them (:func:`fastsm.tgp.views.fitted`)."""

    X: np.ndarray  # training inputs, N × dx
    Y: np.ndarray  # training outputs, N × dy
    coef: np.ndarray  # ridge coefficients, (dx + 1) × dy, bias last
    gamma_x: float
    kxx: float  # k_X(x, x) = 1 + lambda_x
    floor: float  # floor of eta_x
    Wx: np.ndarray  # the factors as the products read them (plan)
    Wy: np.ndarray
    Wxy: np.ndarray
    Vx: np.ndarray  # leave-one-out only (else 0 × 0): row h holds column h of W_X = L_X^-1
    Vy: np.ndarray  # the same of W_Y
    Vxy: np.ndarray  # the same of W_XY


@kernel()
def linear_rows(X, coef):
    """The ridge start ``[X, 1] @ coef``, row by row in one fixed order (a row's value does not
    depend on the other rows, as a BLAS product's would)."""
    m, dx = X.shape
    dy = coef.shape[1]
    out = np.empty((m, dy))
    for i in range(m):
        for k in range(dy):
            s = 0.0
            for c in range(dx):
                s += X[i, c] * coef[c, k]
            out[i, k] = s + coef[dx, k]
    return out


@kernel(inline=True)
def tri_rows_of(A, M, forward, plan):
    """Each row ``x`` of ``A`` times the stored factor ``M``: ``M x`` (``forward``) or ``M^T x``
    (:func:`~fastsm._kernels.tri_rows.run_products`); a new C-ordered array."""
    m, n = A.shape
    work = np.empty((2, m, n))
    for r in range(m):  # loops, not a slice assignment: its shape check costs compile time
        for j in range(n):
            work[0, r, j] = A[r, j]
    ops = np.empty((1, 4), dtype=np.int64)
    ops[:] = 0
    ops[0, 2] = 1 if forward else 0
    ops[0, 3] = 1
    run_products(work, M, M, ops, m, plan)
    return work[1, :m].copy()


@kernel(inline=True)
def _any_held(held):
    """Whether a row of ``held`` leaves a training point out (a loop: ``held.max()`` compiles four of
    Numba's implementations)."""
    for h in held:
        if h >= 0:
            return True
    return False


@kernel(internal=True)
def _forward(Kx, W, V, plan, held):
    """``W k`` for each kernel row ``k`` of ``Kx``, projected onto the leave-one-out models of ``held``
    (a kernel of its own: inlined, its three calls in :func:`point_data` cost 0.3 s of a cold start)."""
    Z = tri_rows_of(Kx, W, True, plan)
    if _any_held(held):
        project_rows(Z, V, held)
    return Z


@kernel(inline=True)
def point_data(fit, Xb, method, plan, held):
    """``(F, eta_x, g_xy, extrapolated, nearest)`` of the points ``Xb`` for ``method`` (docs/math.md §2; the table of
    :mod:`fastsm._kernels.objectives`), ``g_xy = W_XY k_x`` (SMTGP's ``F``, and the certainty's).

    ``held`` (leave-one-out): the training point left out of each row's model; every forward product
    is projected onto the ``N-1``-point model with ``fit``'s ``V`` arrays
    (:func:`~fastsm._kernels.objectives.project_out`, from the full kernel row: the left-out entry's
    value drops out).  A point is extrapolated where every
    ``k(x, x_i) < config.EXTRAPOLATION_K`` over its model's points (NaN: not); ``nearest`` is its model's
    training point of the largest ``k(x, x_i)`` (the supported start's alternative,
    :func:`supported_alternatives`).
    """
    m = Xb.shape[0]
    n = fit.X.shape[0]
    Kx = np.empty((m, n))
    call(rbf_cross, Xb, fit.X, fit.gamma_x, Kx)
    ex = np.empty(m, dtype=np.bool_)
    nearest = np.empty(m, dtype=np.int64)
    for r in range(m):
        top = -np.inf
        skip = held[r]
        for j in range(n):
            if j == skip:
                continue
            v = Kx[r, j]
            if np.isnan(v):
                top = v
                break
            top = max(top, v)
        ex[r] = top < EXTRAPOLATION_K
        nearest[r] = _nearest(Kx[r], skip)
    Hx = call(_forward, Kx, fit.Wx, fit.Vx, plan, held)
    eta_x = np.empty(m)
    sumsq_rows(Hx, fit.kxx, fit.floor, eta_x)
    Gxy = call(_forward, Kx, fit.Wxy, fit.Vxy, plan, held)
    if method == KL:
        F = tri_rows_of(Hx, fit.Wx, False, plan)  # u_x = K_X^-1 k_x
    elif method == IKL:
        F = call(_forward, Kx, fit.Wy, fit.Vy, plan, held)
    elif method == SM:
        F = Gxy
    else:
        F = Kx
    return F, eta_x, Gxy, ex, nearest


@kernel(inline=True)
def _nearest(k, skip):
    """The training point of the largest kernel value ``k[j]``, ``j != skip`` (the left-out point reads as
    ``-1``): NumPy's ``argmax``, the first maximum, a NaN first."""
    best = 0
    for j in range(1, k.shape[0]):
        kb = -1.0 if best == skip else k[best]
        if np.isnan(kb):
            break
        kj = -1.0 if j == skip else k[j]
        if kj > kb or np.isnan(kj):
            best = j
    return best


@kernel(internal=True)
def _column_extremes(Y):
    """Per column of the training outputs, the two smallest and the two largest values
    ``(lo1, lo2, hi1, hi2)`` (a value present twice fills both places; ``lo2 = lo1`` and
    ``hi2 = hi1`` for one row).  O(N dy), once per call."""
    n, dy = Y.shape
    lo1, lo2, hi1, hi2 = np.empty(dy), np.empty(dy), np.empty(dy), np.empty(dy)
    lo1[:] = np.inf
    lo2[:] = np.inf
    hi1[:] = -np.inf
    hi2[:] = -np.inf
    for i in range(n):
        for c in range(dy):
            v = Y[i, c]
            if v < lo1[c]:
                lo2[c] = lo1[c]
                lo1[c] = v
            elif v < lo2[c]:
                lo2[c] = v
            if v > hi1[c]:
                hi2[c] = hi1[c]
                hi1[c] = v
            elif v > hi2[c]:
                hi2[c] = v
    if n == 1:
        for c in range(dy):
            lo2[c] = lo1[c]
            hi2[c] = hi1[c]
    return lo1, lo2, hi1, hi2


@kernel(internal=True)
def _column_bounds(Y, ext, held, r, lo, hi):
    """The training outputs' per-column bounds into ``lo`` and ``hi``, without the row ``held[r]``
    if ``held`` (the second extreme where the held row is the extreme); ``ext`` is
    :func:`_column_extremes` of ``Y``.  O(dy)."""
    lo1, lo2, hi1, hi2 = ext
    for c in range(Y.shape[1]):
        lo[c] = lo1[c]
        hi[c] = hi1[c]
        if held[r] >= 0:
            y = Y[held[r], c]
            if y == lo1[c]:
                lo[c] = lo2[c]
            if y == hi1[c]:
                hi[c] = hi2[c]


@kernel(inline=True)
def supported_alternatives(Y, Y0, nearest, ex, held, spread):
    """The supported ridge start: :class:`~fastsm._kernels.optimize.Start` from ``Y0``, with the output
    ``Y[nearest[r]]`` of the nearest training input as the alternative of each row whose start leaves
    the training outputs' bounding box (:func:`fastsm.tgp.prediction.supported_start`, which
    documents why); :func:`~fastsm._kernels.optimize.minimize_batch` starts there if the objective
    is lower.

    Rows are independent; extrapolated rows (``ex``) and rows with a non-finite start keep the ridge
    start.  ``held``: each row's left-out training point (excluded from its bounds; ``nearest``
    already excludes it) or ``-1``; ``spread``: each row's model's output spread.  O(N dy + m dy).
    """
    m, dy = Y0.shape
    n = Y.shape[0]
    absmax = np.empty(dy)
    absmax[:] = 0.0
    for i in range(n):
        for c in range(dy):
            absmax[c] = max(absmax[c], abs(Y[i, c]))
    ext = call(_column_extremes, Y)
    lo = np.empty(dy)
    hi = np.empty(dy)
    alt = np.empty((m, dy))
    use = np.empty(m, dtype=np.bool_)
    use[:] = False
    for r in range(m):
        _column_bounds(Y, ext, held, r, lo, hi)
        outside = False
        finite = True
        for c in range(dy):
            # beyond the box by more than rounding and a thousandth of the spread
            margin = 1e-3 * spread[r] + 1e-9 * absmax[c]
            if Y0[r, c] < lo[c] - margin or Y0[r, c] > hi[c] + margin:
                outside = True
            finite = finite and np.isfinite(Y0[r, c])
            alt[r, c] = Y[nearest[r], c]
        use[r] = outside and finite and not ex[r]
    return Start(Y0, alt, use)
