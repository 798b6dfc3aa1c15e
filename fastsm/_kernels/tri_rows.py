"""Products of single rows with a lower-triangular factor, by vectorisable row loops.

A small model (``N <= config.ROW_PRODUCTS_MAX_N``) is asked for products of one or two rows at a
time: a KNN-local model predicts one test point, a region model a handful.  One DTRMM call per
row then costs its setup and the packing of the whole factor (measured at ``N = 200``, one row:
DTRMM 14.6 µs forward, 11.6 µs backward; these loops 8.7 and 6.3 µs — ``benchmarks/tri_rows.py``).
Here every row is computed by the same loop, whatever the batch, the thread count or the CPU:
deterministic by construction, with no BLAS involved.

Both directions are ``axpy`` sweeps over contiguous rows (vectorised by LLVM without
reassociation: no reductions), for which the factor ``W`` travels in *symmetric storage*
``S`` (:func:`symmetric_storage`): its lower triangle is ``W``, its strict upper triangle
``W^T``, so that row ``i`` of ``W`` is ``S[i, :i+1]`` and column ``j`` of ``W`` below the
diagonal is ``S[j, j:]``.  Every kernel that reads only a factor's lower triangle (DTRMM,
:func:`~fastsm._kernels.objectives.project_out`) reads ``S`` as ``W``.

* backward, ``y = W^T x``: ``y[:i+1] += x[i] * W[i, :i+1]`` for ``i = 0, 1, ...``;
* forward, ``y = W x``: ``y[j:] += x[j] * W[j:, j]`` for ``j = 0, 1, ...``.

Each entry of ``y`` is a sum in increasing order of the other index, one multiply and one add
per term (no fused multiply-add: ``config.FASTMATH_FLAGS``).

The same sweeps solve with a Cholesky factor ``L`` held in symmetric storage
(:func:`rows_product` with ``solve``; models in Cholesky form, :func:`fastsm.tgp.fitting.factorize_cholesky`):
``y = L^-1 x`` by forward substitution, each solved entry then taken out of the entries below it
along ``L``'s column (``S[j, j+1:]``), and ``y = L^-T x`` by backward substitution along ``L``'s
rows (``S[i, :i]``) — the products with ``W = L^-1`` without forming ``W``, for the same flops
(docs/accuracy.md: a substitution is backward stable).  A single row's substitutions take eight
columns (rows) of ``L`` per sweep over the rest of ``y``, each entry still taking its terms one at
a time in the same order: the same bits, with ``y`` loaded and stored an eighth as often (a
``K = 200`` solve 3.6 → 2.1 µs forward, 3.0 → 2.1 µs backward).  Each solved entry is the
remaining value times the reciprocal of the pivot (as BLAS substitution kernels do; the
reciprocal does not wait for the entries before it, a division would: a ``K = 200`` forward solve
2.25 → 2.07 µs), one rounding more than a division, far below the substitution's own error.
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def symmetric_storage(W):
    """``S`` with ``S``'s lower triangle that of ``W`` and its strict upper triangle ``W^T``'s
    (``W`` lower triangular, C-contiguous; its upper triangle is not read)."""
    n = W.shape[0]
    S = np.empty((n, n))
    for i in range(n):
        for j in range(i + 1):
            S[i, j] = W[i, j]
            S[j, i] = W[i, j]
    return S


@kernel(inline=True)
def row_backward(x, S, y):
    """``y = W^T x`` with ``W`` the lower triangle of ``S`` (rows of ``W`` swept in order)."""
    n = S.shape[0]
    for j in range(n):
        y[j] = 0.0
    for i in range(n):
        xi = x[i]
        Si = S[i]
        for j in range(i + 1):
            y[j] += xi * Si[j]


@kernel(inline=True)
def row_forward(x, S, y):
    """``y = W x`` with ``W`` the lower triangle of ``S``, its columns read from ``S``'s upper triangle."""
    n = S.shape[0]
    for j in range(n):
        y[j] = 0.0
    for j in range(n):
        xj = x[j]
        Sj = S[j, j:]  # W[j:, j]; slices keep the indices non-negative, so the loop vectorises
        yj = y[j:]
        for i in range(n - j):
            yj[i] += xj * Sj[i]


@kernel(inline=True)
def _backward4(X, r, S, P):
    """:func:`row_backward` of rows ``r .. r+3`` in one sweep over ``S`` (the same operations per row)."""
    n = S.shape[0]
    x0, x1, x2, x3 = X[r], X[r + 1], X[r + 2], X[r + 3]
    y0, y1, y2, y3 = P[r], P[r + 1], P[r + 2], P[r + 3]
    P[r:r + 4] = 0.0
    for i in range(n):
        a0, a1, a2, a3 = x0[i], x1[i], x2[i], x3[i]
        Si = S[i]
        for j in range(i + 1):
            w = Si[j]
            y0[j] += a0 * w
            y1[j] += a1 * w
            y2[j] += a2 * w
            y3[j] += a3 * w


@kernel(inline=True)
def _forward4(X, r, S, P):
    """:func:`row_forward` of rows ``r .. r+3`` in one sweep over ``S`` (the same operations per row)."""
    n = S.shape[0]
    y0, y1, y2, y3 = P[r], P[r + 1], P[r + 2], P[r + 3]
    P[r:r + 4] = 0.0
    for j in range(n):
        a0, a1, a2, a3 = X[r, j], X[r + 1, j], X[r + 2, j], X[r + 3, j]
        Sj = S[j, j:]
        z0, z1, z2, z3 = y0[j:], y1[j:], y2[j:], y3[j:]
        for i in range(n - j):
            w = Sj[i]
            z0[i] += a0 * w
            z1[i] += a1 * w
            z2[i] += a2 * w
            z3[i] += a3 * w


@kernel(inline=True)
def row_solve_forward(x, S, y):
    """``y = L^-1 x`` with ``L`` the lower triangle of ``S`` (forward substitution, column sweeps).

    Eight columns per sweep over the rest of ``y`` (:data:`SOLVE_BLOCK`): the block's own
    triangle first, then each remaining entry takes the eight columns' terms in column order, the
    operations of one-column sweeps in the same order (bitwise the same ``y``), with ``y`` loaded
    and stored once per eight columns instead of once per column.
    """
    n = S.shape[0]
    for i in range(n):
        y[i] = x[i]
    j = 0
    while j + SOLVE_BLOCK <= n:
        for t in range(SOLVE_BLOCK):
            a = y[j + t] * (1.0 / S[j + t, j + t])
            y[j + t] = a
            for u in range(t + 1, SOLVE_BLOCK):
                y[j + u] -= a * S[j + t, j + u]
        c = j + SOLVE_BLOCK
        _sweep8(y[j:c], S, j, c, n, y[c:], True)
        j = c
    while j < n:
        a = y[j] * (1.0 / S[j, j])
        y[j] = a
        col = S[j, j + 1:]  # L[j+1:, j]
        tail = y[j + 1:]
        for i in range(n - j - 1):
            tail[i] -= a * col[i]
        j += 1


@kernel(inline=True)
def row_solve_backward(x, S, y):
    """``y = L^-T x`` with ``L`` the lower triangle of ``S`` (backward substitution, row sweeps),
    eight rows per sweep over the head of ``y`` as :func:`row_solve_forward` (bitwise the one-row
    sweeps)."""
    n = S.shape[0]
    for i in range(n):
        y[i] = x[i]
    i = n - 1
    while i + 1 >= SOLVE_BLOCK:
        for t in range(SOLVE_BLOCK):
            a = y[i - t] * (1.0 / S[i - t, i - t])
            y[i - t] = a
            for u in range(t + 1, SOLVE_BLOCK):
                y[i - u] -= a * S[i - t, i - u]
        h = i + 1 - SOLVE_BLOCK
        _sweep8(y[h:i + 1][::-1], S, i, 0, h, y[:h], False)
        i = h - 1
    while i >= 0:
        a = y[i] * (1.0 / S[i, i])
        y[i] = a
        row = S[i, :i]  # L[i, :i]
        for j in range(i):
            y[j] -= a * row[j]
        i -= 1


#: Columns (rows) of the factor per sweep of :func:`row_solve_forward` (:func:`row_solve_backward`).
SOLVE_BLOCK = 8


@kernel(inline=True)
def _sweep8(a, S, first, c0, c1, z, down):
    """``z[i] -= a[t] * S[first ± t, c0 + i]`` for ``t = 0 .. 7`` in that order, every ``i < c1 - c0``
    (``+`` if ``down``, else ``-``): eight axpys over ``z`` fused into one pass."""
    step = 1 if down else -1
    a0, a1, a2, a3, a4, a5, a6, a7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
    r0, r1, r2, r3 = S[first, c0:c1], S[first + step, c0:c1], S[first + 2 * step, c0:c1], S[first + 3 * step, c0:c1]
    r4, r5, r6, r7 = (S[first + 4 * step, c0:c1], S[first + 5 * step, c0:c1], S[first + 6 * step, c0:c1],
                      S[first + 7 * step, c0:c1])
    for i in range(c1 - c0):
        v = z[i]
        v -= a0 * r0[i]
        v -= a1 * r1[i]
        v -= a2 * r2[i]
        v -= a3 * r3[i]
        v -= a4 * r4[i]
        v -= a5 * r5[i]
        v -= a6 * r6[i]
        v -= a7 * r7[i]
        z[i] = v


@kernel(inline=True)
def _solve_forward4(X, r, S, P):
    """:func:`row_solve_forward` of rows ``r .. r+3`` in one sweep over ``S`` (the same operations per row)."""
    n = S.shape[0]
    y0, y1, y2, y3 = P[r], P[r + 1], P[r + 2], P[r + 3]
    for q in range(4):  # loops, not a slice assignment: its shape check costs compile time
        for j in range(X.shape[1]):
            P[r + q, j] = X[r + q, j]
    for j in range(n):
        d = 1.0 / S[j, j]
        a0 = y0[j] * d
        a1 = y1[j] * d
        a2 = y2[j] * d
        a3 = y3[j] * d
        y0[j], y1[j], y2[j], y3[j] = a0, a1, a2, a3
        col = S[j, j + 1:]
        z0, z1, z2, z3 = y0[j + 1:], y1[j + 1:], y2[j + 1:], y3[j + 1:]
        for i in range(n - j - 1):
            w = col[i]
            z0[i] -= a0 * w
            z1[i] -= a1 * w
            z2[i] -= a2 * w
            z3[i] -= a3 * w


@kernel(inline=True)
def _solve_backward4(X, r, S, P):
    """:func:`row_solve_backward` of rows ``r .. r+3`` in one sweep over ``S`` (the same operations per row)."""
    n = S.shape[0]
    y0, y1, y2, y3 = P[r], P[r + 1], P[r + 2], P[r + 3]
    for q in range(4):  # loops, not a slice assignment: its shape check costs compile time
        for j in range(X.shape[1]):
            P[r + q, j] = X[r + q, j]
    for i in range(n - 1, -1, -1):
        d = 1.0 / S[i, i]
        a0 = y0[i] * d
        a1 = y1[i] * d
        a2 = y2[i] * d
        a3 = y3[i] * d
        y0[i], y1[i], y2[i], y3[i] = a0, a1, a2, a3
        row = S[i, :i]
        for j in range(i):
            w = row[j]
            y0[j] -= a0 * w
            y1[j] -= a1 * w
            y2[j] -= a2 * w
            y3[j] -= a3 * w


@kernel()
def rows_product(X, r0, h, S, fwd, P, solve=False):
    """``P[r] = W X[r]`` (``fwd``) or ``W^T X[r]`` for ``r`` in ``r0 .. r0+h-1``, ``W`` the lower
    triangle of ``S`` (symmetric storage): four rows per sweep over ``S``, the rest one by one.
    Every row gets the same operations either way, so the result of a row does not depend on
    ``r0``, ``h`` or the other rows.  With ``solve`` the lower triangle of ``S`` is a Cholesky
    factor ``L`` and ``W = L^-1``: the rows are solved by substitution (same sweeps)."""
    r = r0
    while r + 4 <= r0 + h:
        if solve:
            if fwd:
                _solve_forward4(X, r, S, P)
            else:
                _solve_backward4(X, r, S, P)
        elif fwd:
            _forward4(X, r, S, P)
        else:
            _backward4(X, r, S, P)
        r += 4
    while r < r0 + h:
        if solve:
            if fwd:
                row_solve_forward(X[r], S, P[r])
            else:
                row_solve_backward(X[r], S, P[r])
        elif fwd:
            row_forward(X[r], S, P[r])
        else:
            row_backward(X[r], S, P[r])
        r += 1


@kernel()
def pack_lower(M):
    """The lower triangle of the square ``M``, row by row (``M[np.tri(n, dtype=bool)]``), ``(n (n+1) / 2,)``."""
    n = M.shape[0]
    out = np.empty(n * (n + 1) // 2)
    k = 0
    for i in range(n):
        out[k:k + i + 1] = M[i, :i + 1]
        k += i + 1
    return out


@kernel()
def unpack_lower(packed, n, symmetric):
    """The ``n × n`` matrix whose lower triangle :func:`pack_lower` packed: zeros above the diagonal,
    or with ``symmetric`` the transposed lower triangle (symmetric storage)."""
    M = np.zeros((n, n))
    k = 0
    for i in range(n):
        M[i, :i + 1] = packed[k:k + i + 1]
        k += i + 1
    if symmetric:
        for i in range(n):
            for j in range(i):
                M[j, i] = M[i, j]
    return M
