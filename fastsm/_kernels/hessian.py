"""Exact Hessian of SMTGP's criterion (the beta-free form ``-s / (2(1-a))``), from the factors.

With ``k = k_Y(y)``, ``J = dk/dy`` (N×dy, docs/math.md §1), ``u_y = K_Y^-1 k`` and ``u_xy = K_XY^-1 k_xy``
(both from one evaluation, :func:`~fastsm._kernels.objectives.evaluate_rows`)::

    grad eta_y  = -2 J^T u_y                 H eta_y  = -2 (||W_Y J||^2       + B(u_y))
    grad eta_xy = -2 a J^T u_xy              H eta_xy = -2 (a^2 ||W_XY J||^2 + a B(u_xy))
    B(u) = sum_i u_i d^2 k_i / dy^2 = 4 gamma^2 sum_i u_i k_i d_i d_i^T - 2 gamma (u . k) I,  d_i = y - z_i
    H log eta = H eta / eta - grad eta grad eta^T / eta^2
    H f = -(a H log eta_y - H log eta_xy) / (2 (1 - a))

``||W J||^2`` is the Gram matrix ``(W J)^T (W J)`` of the dy forward products ``W J[:, d]``: the only
O(N^2) part, 2 dy triangular products per point (an evaluation has 4), by the row loops of the
evaluations (:func:`~fastsm._kernels.tri_rows.run_products`), so a point's Hessian depends on its
own data only.  The optimiser (:mod:`fastsm._kernels.optimize`) uses it to seed
its quasi-Newton matrix where it is positive definite, or shifted to positive definite at the schedule's
last request (:func:`~fastsm._kernels.curvature.seed_inverse`).
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.linalg import a_bt, at_b
from fastsm._kernels.objectives import (
    K_ROW,
    R1_ROW,
    R2_ROW,
    Z1_ROW,
    Z2_ROW,
    ops2,
    project_out,
)
from fastsm._kernels.shared import call
from fastsm._kernels.tri_rows import run_products
from fastsm.config import kernel


@kernel(internal=True)
def hessian_rows(obj, rr, Yt, out, work, hess, jprod, held):
    """Exact Hessian (``hess[q]``, dy × dy) of the SM criterion at ``Yt[rr[q]]``, from the evaluation
    that just ran there (:func:`~fastsm._kernels.objectives.evaluate_rows` with
    ``obj.method == SM``, ``obj.beta == 1``): its kernel row and ``u_y``, ``u_xy`` are still rows
    ``rr[q]`` of ``work``, its etas rows ``rr[q]`` of ``out``.  ``held[r]``: the training point left
    out of evaluated row ``r``'s model, ``-1`` for none (leave-one-out: the left-out point's kernel
    entry is already zero, so is its Jacobian row, and the Jacobian's forward products are
    projected like the kernel row's, :func:`~fastsm._kernels.objectives.project_out`).

    ``jprod`` (:class:`~fastsm._kernels.objectives.Products`) holds a workspace of at least
    ``len(rr) * dy`` rows for the Jacobian's products (``2 dy`` triangular products of ``N^2`` a
    point; the rest is O(N dy^2) a point).  A row whose ``eta_y`` or ``eta_xy`` hit the
    floor gets a NaN Hessian (its curvature is not the criterion's).
    """
    m = rr.shape[0]
    dy = obj.Z.shape[1]
    gamma, Z = obj.gamma, obj.Z
    n = Z.shape[0]
    jw = jprod.work
    for q in range(m):
        k = work[K_ROW, rr[q]]
        y = Yt[rr[q]]
        for d in range(dy):
            row = jw[K_ROW, q * dy + d]
            for i in range(n):
                row[i] = -2.0 * gamma * (y[d] - Z[i, d]) * k[i]
    run_products(jw, obj.W1, obj.W2, ops2(K_ROW, 0, 1, Z1_ROW, K_ROW, 1, 1, Z2_ROW), m * dy, jprod.plan)
    for t in range(m * dy):  # O(N) a row beside the products' O(N^2): a parallel loop costs more to compile
        h = held[rr[t // dy]]
        if h >= 0:
            project_out(jw[Z1_ROW, t], obj.V1, h)
            project_out(jw[Z2_ROW, t], obj.V2, h)
    for q in range(m):
        r = rr[q]
        call(_assemble, obj, np.int64(q), r, Yt, work, jw, out, hess[q])


@kernel(internal=True)
def _assemble(obj, q, r, Yt, work, jw, out, H):
    """The ``q``-th Hessian, at evaluated row ``r``: from its kernel row, ``u_y``, ``u_xy`` (``work``), its
    etas (:class:`~fastsm._kernels.objectives.Evaluations` ``out``) and the Jacobian's products ``jw``.

    The O(N dy^2) sums are DGEMM calls of one shape per model (``dy × N`` times ``N × dy``), so a
    point's Hessian does not depend on the other points of the call either.
    """
    a, gamma, Z = obj.alpha, obj.gamma, obj.Z
    y, k, u_y, u_xy = Yt[r], work[K_ROW, r], work[R1_ROW, r], work[R2_ROW, r]
    eta_y, eta_xy = out.eta_y[r], out.eta_xy[r]
    n, dy = Z.shape
    if out.hits[r] > 0:
        for c in range(dy):
            for e in range(dy):
                H[c, e] = np.nan
        return
    D = np.empty((n, dy))  # rows y - z_i
    Dw = np.empty((n, 2 * dy))  # rows (u_y,i k_i, u_xy,i k_i) (y - z_i)
    sy = 0.0
    sxy = 0.0
    for i in range(n):
        wy = u_y[i] * k[i]
        wxy = u_xy[i] * k[i]
        sy += wy
        sxy += wxy
        for c in range(dy):
            D[i, c] = y[c] - Z[i, c]
            Dw[i, c] = wy * D[i, c]
            Dw[i, dy + c] = wxy * D[i, c]
    B = np.empty((dy, 2 * dy))
    at_b(D, Dw, B)  # [B(u_y) | B(u_xy)] without their factors and diagonals
    gy = np.empty(dy)  # grad eta_y = 4 gamma sum_i u_y,i k_i d_i
    gxy = np.empty(dy)  # grad eta_xy = 4 a gamma sum_i u_xy,i k_i d_i
    gy[:] = 0.0
    gxy[:] = 0.0
    for i in range(n):
        for c in range(dy):
            gy[c] += Dw[i, c]
            gxy[c] += Dw[i, dy + c]
    for c in range(dy):
        gy[c] *= 4.0 * gamma
        gxy[c] *= 4.0 * gamma * a
    Zq = jw[Z1_ROW, q * dy:(q + 1) * dy]
    Xq = jw[Z2_ROW, q * dy:(q + 1) * dy]
    Ay = np.empty((dy, dy))
    a_bt(Zq, Zq, Ay)
    Axy = np.empty((dy, dy))
    a_bt(Xq, Xq, Axy)
    g2 = 4.0 * gamma * gamma
    cf = -1.0 / (2.0 * (1.0 - a))
    for c in range(dy):
        for e in range(c + 1):
            by = g2 * 0.5 * (B[c, e] + B[e, c])
            bxy = g2 * 0.5 * (B[c, dy + e] + B[e, dy + c])
            if c == e:
                by -= 2.0 * gamma * sy
                bxy -= 2.0 * gamma * sxy
            h_eta_y = -2.0 * (0.5 * (Ay[c, e] + Ay[e, c]) + by)
            h_eta_xy = -2.0 * (a * a * 0.5 * (Axy[c, e] + Axy[e, c]) + a * bxy)
            hly = h_eta_y / eta_y - gy[c] * gy[e] / (eta_y * eta_y)
            hlxy = h_eta_xy / eta_xy - gxy[c] * gxy[e] / (eta_xy * eta_xy)
            H[c, e] = cf * (a * hly - hlxy)
            H[e, c] = H[c, e]
