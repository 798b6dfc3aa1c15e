"""Removing a training point from a Cholesky factor by plane rotations, O(N^2) per point
(:func:`drop_index_cholesky`; the classic downdate by deletion, LINPACK's ``dchdd`` order).

Deleting row ``i`` of ``L`` (``K = L L^T``) leaves a factor of ``K`` without row and column ``i``
that is lower triangular but for one entry above the diagonal in each row from ``i`` on; column
rotations ``Q`` restore the shape.  IKLTGP's ``G = L_Y^-1 L_X`` follows without either factor:
``G' = [Q_Y^T G Q_X]_11`` (:func:`rotate_and_drop`), ``L_Y``'s rotations applied to the rows of
``G`` and ``L_X``'s to its columns.
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def rotate_and_drop(G, i, cy, sy, cx, sx):
    """``[Q_Y^T G Q_X]_11`` (module docstring): ``G`` without point ``i``, lower triangular."""
    n = G.shape[0]
    A = G.copy()
    for t in range(cy.shape[0]):
        j = i + t
        c, s = cy[t], sy[t]
        for q in range(n):
            u = A[j, q]
            v = A[j + 1, q]
            A[j, q] = c * u + s * v
            A[j + 1, q] = -s * u + c * v
    for t in range(cx.shape[0]):
        j = i + t
        c, s = cx[t], sx[t]
        for r in range(n):
            u = A[r, j]
            v = A[r, j + 1]
            A[r, j] = c * u + s * v
            A[r, j + 1] = -s * u + c * v
    out = np.zeros((n - 1, n - 1))
    for r in range(n - 1):
        for q in range(r + 1):
            out[r, q] = A[r, q]
    return out


@kernel()
def drop_index_cholesky(S, i):
    """``(S', c, s)``: the Cholesky factor of the model without point ``i``, from a factor ``L`` in
    symmetric storage ``S`` (a model in Cholesky form), and the rotations used.

    Deleting row ``i`` of ``L`` leaves ``L~`` (``(N-1) × N``), lower triangular but for one entry
    above the diagonal in each row from ``i`` on; ``K`` without row and column ``i`` is
    ``L~ L~^T``.  Column rotations ``(j, j+1)``, ``j = i .. N-2``, each zeroing entry
    ``(j, j+1)``, give ``L~ Q = [L', 0]`` with ``L'`` lower triangular and a positive diagonal (the
    classic downdate by deletion, LINPACK's ``dchdd`` order).  Rotation ``t`` acts on the pair
    ``(i + t, i + t + 1)`` as :func:`rotate_and_drop` applies it, so IKLTGP's
    ``G = L_Y^-1 L_X`` follows as ``[Q_Y^T G Q_X]_11`` there too.
    """
    n = S.shape[0]
    T = np.zeros((n - 1, n))
    for r in range(n - 1):
        src = r if r < i else r + 1
        for q in range(src + 1):
            T[r, q] = S[src, q]
    cs = np.empty(n - 1 - i)
    sn = np.empty(n - 1 - i)
    for j in range(i, n - 1):
        a = T[j, j]
        b = T[j, j + 1]
        rr = np.hypot(a, b)
        if rr == 0.0:
            c, s = 1.0, 0.0
        else:
            c, s = a / rr, b / rr
        cs[j - i] = c
        sn[j - i] = s
        for r in range(j + 1, n - 1):
            u = T[r, j]
            v = T[r, j + 1]
            T[r, j] = c * u + s * v
            T[r, j + 1] = -s * u + c * v
        T[j, j] = rr
        T[j, j + 1] = 0.0
    out = np.empty((n - 1, n - 1))
    for r in range(n - 1):
        for q in range(r + 1):
            out[r, q] = T[r, q]
            out[q, r] = T[r, q]
    return out, cs, sn
