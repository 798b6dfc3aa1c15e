"""TGP prediction objectives: value and gradient per test point (MATH §3).

Per evaluation only ``K_Y^-1 k_y`` and one second product (``K_XY^-1 k_y``
for SMTGP, ``C k_y`` with ``C = K_Y^-1 K_X K_Y^-1`` for IKLTGP) depend on
``y``.  :func:`evaluate_rows` computes them for a whole batch of points as
GEMM tiles (BLAS-3); everything else per point is O(N·dy).

Per-point fixed data (depends on ``x`` only), one row per point in ``F``:

========  =====================  =========================================
method    ``F`` row              scalars
========  =====================  =========================================
KL        ``u_x = K_X^-1 k_x``   ``eta_x``
IKL       ``v_x = K_Y^-1 k_x``   ``eta_x``
SM        ``w_x = K_XY^-1 k_x``  ``eta_x``, ``xwx = k_x^T w_x``
SM_CUBIC  ``k_x``                ``eta_x`` (``cubic = K_X^-1``)
========  =====================  =========================================
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from fastsm._kernels.gemm import plan_products
from fastsm._kernels.rank_one import bordered_inverse
from fastsm._kernels.rbf import contract_jacobian, kernel_row
from fastsm.config import kernel

KL = 0
IKL = 1
SM = 2
SM_CUBIC = 3


class Objective(NamedTuple):
    """One method's objective of a fitted model: what every evaluation reads (MATH §3)."""

    method: int  # KL, IKL, SM or SM_CUBIC
    Z: np.ndarray  # training outputs, N × dy
    gamma: float  # the output kernel's gamma_y
    kyy: float  # k_Y(y, y) = 1 + lambda_y
    kxx: float  # k_X(x, x) = 1 + lambda_x
    alpha: float
    beta: float  # SM degree; 1.0 is the beta-free form the optimiser minimises
    floor: float  # floor of eta_y and eta_xy (hits are counted)
    M1: np.ndarray  # K_Y^-1
    M2: np.ndarray  # C (IKL), K_XY^-1 (SM), K_Y^-1 (KL, unused), K_Y^-1 (SM_CUBIC)
    logdet_y: float  # log |K_Y| (SM_CUBIC only)
    logdet_x: float  # log |K_X| (SM_CUBIC only)


class Points(NamedTuple):
    """What depends on the test input only, one row per point (the table above)."""

    F: np.ndarray
    eta_x: np.ndarray
    xwx: np.ndarray


class Evaluations(NamedTuple):
    """Outputs of :func:`evaluate_rows`, one row per evaluated row."""

    value: np.ndarray
    grad: np.ndarray
    eta_y: np.ndarray
    eta_xy: np.ndarray
    hits: np.ndarray  # eta floor hits


class Products(NamedTuple):
    """How the two N×N products of a round run: scratch, tiles, threads."""

    work: np.ndarray  # :func:`workspace`: kernel rows and the two products
    plan: object  # :class:`fastsm._kernels.gemm.TilePlan`, checked for this process's BLAS and N
    nthreads: int  # the caller's Numba thread count (a kernel reading it would be uncacheable)


@kernel()
def _dot(a, b, n, off):
    s = 0.0
    for j in range(n):
        s += a[j] * b[off + j]
    return s


@kernel()
def point_value_grad(obj, y, k, P1, P2, pts, p, grad):
    """Objective and gradient of test point ``p`` at ``y`` from its precomputed products.

    ``k = k_Y(y, Z)``, ``P1 = K_Y^-1 k``; ``P2`` is ``C k`` (IKL) or
    ``K_XY^-1 k`` (SM).  Returns ``(value, eta_y, eta_xy, floor_hits)``;
    ``grad`` is filled.  ``eta_xy`` is NaN for KL and IKL.
    """
    method, Z, gamma, kyy, kxx, alpha, beta, floor = (obj.method, obj.Z, obj.gamma, obj.kyy, obj.kxx, obj.alpha,
                                                       obj.beta, obj.floor)
    F, eta_x, xwx = pts.F[p], pts.eta_x[p], pts.xwx[p]
    n = k.shape[0]
    hits = 0
    eta_y = kyy - _dot(k, P1, n, 0)
    if not eta_y > floor:
        eta_y = floor
        hits += 1
    kF = _dot(k, F, n, 0)
    eta_xy = np.nan
    if method == KL:
        # [SM] Eq. 5; gradient -2 (u_x - eta_x/eta_y u_y)^T J (MATH §3, Eq. 6 corrected)
        value = kyy - 2.0 * kF - eta_x * np.log(eta_y)
        contract_jacobian(y, Z, k, gamma, (-2.0, 2.0 * eta_x / eta_y, 0.0), (F, P1, P1), False, grad)
    elif method == IKL:
        # [SM] Eq. 7/8 with v_x = K_Y^-1 k_x and C k_y precomputed
        kP2 = _dot(k, P2, n, 0)
        ly = np.log(eta_y) - np.log(eta_x)
        value = -2.0 * kF + kP2 + eta_y * ly
        contract_jacobian(y, Z, k, gamma, (-2.0, -2.0 * (ly + 1.0), 2.0), (F, P1, P2), True, grad)
    else:
        # [SM] Eq. 16/17 in log space: s = a log eta_y - log eta_xy
        a = alpha
        kP2 = _dot(k, P2, n, 0)
        q = (1.0 - a) * (1.0 - a) * xwx + 2.0 * a * (1.0 - a) * kF + a * a * kP2
        eta_xy = (1.0 - a) * kxx + a * kyy - q
        if not eta_xy > floor:
            eta_xy = floor
            hits += 1
        s = a * np.log(eta_y) - np.log(eta_xy)
        if beta == 1.0:
            value = -s / (2.0 * (1.0 - a))
            dlds = -1.0 / (2.0 * (1.0 - a))
        else:
            c = (1.0 - beta) / (2.0 * (1.0 - a))
            value = np.exp(c * s) / (beta - 1.0)
            dlds = c * value
        coefs = (dlds * 2.0 * a * (1.0 - a) / eta_xy, dlds * (-2.0 * a / eta_y), dlds * 2.0 * a * a / eta_xy)
        contract_jacobian(y, Z, k, gamma, coefs, (F, P1, P2), True, grad)
    return value, eta_y, eta_xy, hits


@kernel()
def _cholesky(M):
    """Lower Cholesky factor of an SPD matrix by plain loops (reference path).

    Loops rather than ``np.linalg.cholesky`` keep the compile time of the
    O(N^3) reference objective below a second.  Returns ``(L, ok)``.
    """
    n = M.shape[0]
    L = np.zeros((n, n))
    for j in range(n):
        s = M[j, j]
        for k in range(j):
            s -= L[j, k] * L[j, k]
        if not s > 0.0:
            return L, False
        L[j, j] = np.sqrt(s)
        for i in range(j + 1, n):
            t = M[i, j]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / L[j, j]
    return L, True


@kernel()
def _cholesky_solve(L, b):
    n = L.shape[0]
    z = np.empty(n)
    for i in range(n):
        t = b[i]
        for k in range(i):
            t -= L[i, k] * z[k]
        z[i] = t / L[i, i]
    for i in range(n - 1, -1, -1):
        t = z[i]
        for k in range(i + 1, n):
            t -= L[k, i] * z[k]
        z[i] = t / L[i, i]
    return z


@kernel()
def sm_cubic_point(obj, ky, kx, Kxinv):
    """SM divergence ``D(p_X : p_Y)`` by the Nielsen–Nock form, O(N^3).

    ``[SM] Eq. 9`` with the inverse restored (MATH §3)::

        rho = (|Sp|^a |Sq|^(1-a) |a Sp^-1 + (1-a) Sq^-1|)^(-1/2)

    with ``Sp = K_{X∪x}``, ``Sq = K_{Y∪y}``.  Returns the full divergence
    ``(log rho^2, A[:, N], eta_y)`` with ``A = Sq^-1 - Sq^-1 M^-1 Sq^-1``, from
    which the caller forms the value (constants kept) and gradient.  Reference only: the
    quadratic form (Eq. 16) has the same argmin at O(N^2) per evaluation.
    ``log rho^2`` is NaN if ``M`` is not numerically positive definite.
    """
    Kyinv, logdet_y, logdet_x, kyy, kxx = obj.M1, obj.logdet_y, obj.logdet_x, obj.kyy, obj.kxx
    a = obj.alpha
    n = Kyinv.shape[0]
    Sp_inv, eta_x = bordered_inverse(Kxinv, kx, kxx)
    Sq_inv, eta_y = bordered_inverse(Kyinv, ky, kyy)
    M = a * Sp_inv + (1.0 - a) * Sq_inv
    L, ok = _cholesky(M)
    e = np.empty(n + 1)
    for i in range(n + 1):
        e[i] = Sq_inv[i, n]
    if not ok:
        return np.nan, e, eta_y
    logdet_m = 0.0
    for i in range(n + 1):
        logdet_m += 2.0 * np.log(L[i, i])
    log_rho2 = -(a * (logdet_x + np.log(eta_x)) + (1.0 - a) * (logdet_y + np.log(eta_y)) + logdet_m)
    # d log rho^2 / dy = -2 (1-a) A[:N, N]^T J, A = Sq^-1 - Sq^-1 M^-1 Sq^-1
    z = _cholesky_solve(L, e)
    col = e.copy()
    for i in range(n + 1):
        t = 0.0
        for j in range(n + 1):
            t += Sq_inv[i, j] * z[j]
        col[i] -= t
    return log_rho2, col, eta_y


@kernel()
def workspace(m, n, top):
    """Scratch for :func:`evaluate_rows` of up to ``m`` rows (plus padding below ``top``, the plan's
    largest tile): kernel rows, two products."""
    return np.empty((3, m + top, n))


@kernel(parallel=True)
def evaluate_rows(obj, pts, idx, Yt, out, prod, cubic, held):
    """Evaluate objective and gradient at ``Yt[r]`` for points ``idx[r]``.

    Row ``r`` of ``out`` (:class:`Evaluations`) belongs to trial point
    ``Yt[r]`` of test point ``idx[r]`` (whose fixed data is row ``idx[r]`` of
    ``pts``, :class:`Points`).  ``obj`` is the :class:`Objective`, with the
    method's precomputed ``N×N`` matrices ``M1``/``M2``; ``prod``
    (:class:`Products`) holds a :func:`workspace` of at least ``len(idx)``
    rows for ``prod.plan.heights[0]``, the plan and the thread count.

    Three parallel loops: kernel rows (one task per row); the products
    ``K M1`` and ``K M2`` by the tiles of ``plan``
    (:func:`~fastsm._kernels.gemm.plan_products`: call shapes from a menu
    that depends on ``N`` only, checked on this process's BLAS to give every
    row the same arithmetic wherever it sits); then the O(N·dy) per-point
    work.  The tiles' padding rows are zero rows (set by ``plan_products``).  A row's
    result therefore depends on nothing but its own data: not on the other
    rows of the call, their number, the thread count or ``nthreads``, which
    only chooses between full-width tiles and column panels.

    ``cubic`` is ``None``, or ``K_X^-1`` for the O(N^3) reference form
    (``method == SM_CUBIC``).  Being ``None`` at compile time removes that
    branch (Numba prunes ``is None`` tests on arguments), so the fast path
    does not pay its compile time.

    ``held`` is ``None``, or (leave-one-out) the index ``held[idx[r]]`` of
    the training point left out of point ``idx[r]``'s model (``-1``: none).
    Its kernel entry is zeroed and the products are downdated to the
    inverses of the ``N-1`` remaining points (:func:`downdate_products`).

    ``prod.nthreads``: the caller's Numba thread count (``numba.get_num_threads()``
    inside a kernel would make it uncacheable).
    """
    m = idx.shape[0]
    Zt = np.ascontiguousarray(obj.Z.T)
    work = prod.work  # a parfor takes arrays and flat tuples, not the TilePlan inside prod
    Kbuf = work[0]
    P1 = work[1]
    P2 = work[2]
    for r in prange(m):
        # P1's and P2's rows are free until the products land: scratch of the exponential
        kernel_row(Yt[r], Zt, obj.gamma, Kbuf[r], P1[r], P2[r])
        if held is not None:
            if held[idx[r]] >= 0:
                Kbuf[r, held[idx[r]]] = 0.0
    if cubic is not None:
        for r in prange(m):
            _cubic_row(obj, pts, r, idx, Yt, Kbuf, cubic, out)
        return
    plan_products(Kbuf, m, obj.M1, obj.M2, 1 if obj.method == KL else 2, P1, P2, prod.plan, prod.nthreads)
    for r in prange(m):
        _row_value_grad(obj, pts, r, idx, Yt, work, out, held)


@kernel()
def _row_value_grad(obj, pts, r, idx, Yt, work, out, held):
    Kbuf, P1, P2 = work[0], work[1], work[2]
    Q2 = P1[r] if obj.method == KL else P2[r]
    p = idx[r]
    if held is not None:
        if held[p] >= 0:
            downdate_products(obj.method, Kbuf[r], P1[r], Q2, obj.M1, obj.M2, held[p])
    v, ey, exy, h = point_value_grad(obj, Yt[r], Kbuf[r], P1[r], Q2, pts, p, out.grad[r])
    out.value[r] = v
    out.eta_y[r] = ey
    out.eta_xy[r] = exy
    out.hits[r] = h


@kernel()
def _cubic_row(obj, pts, r, idx, Yt, Kbuf, Kxinv, out):
    v, ey = _cubic_value_grad(obj, Yt[r], Kbuf[r], pts.F[idx[r]], Kxinv, out.grad[r])
    out.value[r] = v
    out.eta_y[r] = ey
    out.eta_xy[r] = np.nan
    out.hits[r] = 0


@kernel()
def downdate_products(method, k, P1, P2, M1, M2, h):
    """Products of ``k`` with the inverses of the model without training point ``h`` (exact LOO).

    On entry ``k[h] = 0`` and ``P1 = M1 k``, ``P2 = M2 k`` with the full
    model's ``M1 = K_Y^-1`` and ``M2`` (``K_XY^-1`` for SM, ``C`` for IKL;
    for KL ``P2`` is ``P1``).  With ``A = K^-1``, the inverse of ``K``
    without row and column ``h`` is ``A - a_h a_h^T / A_hh`` (entry ``h``
    ignored), so ``K_{-h}^-1 k = A k - a_h (A k)_h / A_hh``; for IKL,
    ``C_{-h} = D K_X D`` with ``D = B - b_h b_h^T / B_hh`` gives
    ``C_{-h} k = C k - c_h (B k)_h / B_hh - b_h ((C k)_h - C_hh (B k)_h / B_hh) / B_hh``.
    O(N) per row; entry ``h`` of both products is set to zero.
    """
    n = k.shape[0]
    c1 = P1[h] / M1[h, h]
    if method == IKL:
        t = (P2[h] - M2[h, h] * c1) / M1[h, h]
        for j in range(n):
            P2[j] -= M2[h, j] * c1 + M1[h, j] * t
        P2[h] = 0.0
    elif method != KL:
        c2 = P2[h] / M2[h, h]
        for j in range(n):
            P2[j] -= M2[h, j] * c2
        P2[h] = 0.0
    for j in range(n):
        P1[j] -= M1[h, j] * c1
    P1[h] = 0.0


@kernel()
def _cubic_value_grad(obj, y, ky, kx, Kxinv, grad):
    log_rho2, col, eta_y = sm_cubic_point(obj, ky, kx, Kxinv)
    a, beta, Z, gamma = obj.alpha, obj.beta, obj.Z, obj.gamma
    if beta == 1.0:
        value = -log_rho2 / (2.0 * (1.0 - a))
        dl = -1.0 / (2.0 * (1.0 - a))
    else:
        c = (1.0 - beta) / (2.0 * (1.0 - a))
        value = np.expm1(c * log_rho2) / (beta - 1.0)
        dl = c * np.exp(c * log_rho2) / (beta - 1.0)
    coef = dl * (-2.0 * (1.0 - a))
    contract_jacobian(y, Z, ky, gamma, (coef, 0.0, 0.0), (col, col, col), False, grad)
    return value, eta_y
