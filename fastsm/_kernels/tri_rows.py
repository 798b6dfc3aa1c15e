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
(docs/accuracy.md: a substitution is backward stable).
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


@kernel()
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


@kernel()
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


@kernel()
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


@kernel()
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


@kernel()
def row_solve_forward(x, S, y):
    """``y = L^-1 x`` with ``L`` the lower triangle of ``S`` (forward substitution, column sweeps).

    Columns are taken eight at a time: their diagonal block is solved, then the eight columns
    are taken out of the entries below it in one pass (each entry loaded and stored once per
    block, not once per column), in the order a single-column sweep would take them, so that
    every entry sees the same operations (tests/test_tri_rows.py: bitwise a column sweep).
    """
    n = S.shape[0]
    for i in range(n):
        y[i] = x[i]
    j = 0
    while j + 8 <= n:
        e = j + 8
        for jc in range(j, e):
            v = y[jc] / S[jc, jc]
            y[jc] = v
            for i in range(jc + 1, e):
                y[i] -= v * S[jc, i]
        a0, a1, a2, a3 = y[j], y[j + 1], y[j + 2], y[j + 3]
        a4, a5, a6, a7 = y[j + 4], y[j + 5], y[j + 6], y[j + 7]
        s0, s1, s2, s3 = S[j, e:], S[j + 1, e:], S[j + 2, e:], S[j + 3, e:]  # L[e:, j .. j+3]
        s4, s5, s6, s7 = S[j + 4, e:], S[j + 5, e:], S[j + 6, e:], S[j + 7, e:]
        tail = y[e:]
        for i in range(n - e):
            t = tail[i]
            t -= a0 * s0[i]
            t -= a1 * s1[i]
            t -= a2 * s2[i]
            t -= a3 * s3[i]
            t -= a4 * s4[i]
            t -= a5 * s5[i]
            t -= a6 * s6[i]
            t -= a7 * s7[i]
            tail[i] = t
        j = e
    for jc in range(j, n):
        v = y[jc] / S[jc, jc]
        y[jc] = v
        for i in range(jc + 1, n):
            y[i] -= v * S[jc, i]


@kernel()
def row_solve_backward(x, S, y):
    """``y = L^-T x`` with ``L`` the lower triangle of ``S`` (backward substitution, row sweeps).

    Rows are taken eight at a time from the bottom, as :func:`row_solve_forward` takes columns:
    each entry above a block sees the block's rows in decreasing order, as in a single-row sweep.
    """
    n = S.shape[0]
    for i in range(n):
        y[i] = x[i]
    e = n
    while e >= 8:
        b = e - 8
        for ic in range(e - 1, b - 1, -1):
            v = y[ic] / S[ic, ic]
            y[ic] = v
            for j in range(b, ic):
                y[j] -= v * S[ic, j]
        a7, a6, a5, a4 = y[e - 1], y[e - 2], y[e - 3], y[e - 4]
        a3, a2, a1, a0 = y[b + 3], y[b + 2], y[b + 1], y[b]
        s7, s6, s5, s4 = S[e - 1, :b], S[e - 2, :b], S[e - 3, :b], S[e - 4, :b]  # L[b+7 .. b+4, :b]
        s3, s2, s1, s0 = S[b + 3, :b], S[b + 2, :b], S[b + 1, :b], S[b, :b]
        head = y[:b]
        for j in range(b):
            t = head[j]
            t -= a7 * s7[j]
            t -= a6 * s6[j]
            t -= a5 * s5[j]
            t -= a4 * s4[j]
            t -= a3 * s3[j]
            t -= a2 * s2[j]
            t -= a1 * s1[j]
            t -= a0 * s0[j]
            head[j] = t
        e = b
    for ic in range(e - 1, -1, -1):
        v = y[ic] / S[ic, ic]
        y[ic] = v
        for j in range(ic):
            y[j] -= v * S[ic, j]


@kernel()
def _solve_forward4(X, r, S, P):
    """:func:`row_solve_forward` of rows ``r .. r+3`` in one sweep over ``S``, four columns per block
    (the same operations per row)."""
    n = S.shape[0]
    y0, y1, y2, y3 = P[r], P[r + 1], P[r + 2], P[r + 3]
    P[r:r + 4] = X[r:r + 4]
    j = 0
    while j + 4 <= n:
        e = j + 4
        _solve_diagonal4(y0, y1, y2, y3, S, j, e, True)
        a00, a01, a02, a03 = y0[j], y0[j + 1], y0[j + 2], y0[j + 3]
        a10, a11, a12, a13 = y1[j], y1[j + 1], y1[j + 2], y1[j + 3]
        a20, a21, a22, a23 = y2[j], y2[j + 1], y2[j + 2], y2[j + 3]
        a30, a31, a32, a33 = y3[j], y3[j + 1], y3[j + 2], y3[j + 3]
        s0, s1, s2, s3 = S[j, e:], S[j + 1, e:], S[j + 2, e:], S[j + 3, e:]
        z0, z1, z2, z3 = y0[e:], y1[e:], y2[e:], y3[e:]
        for i in range(n - e):
            w0, w1, w2, w3 = s0[i], s1[i], s2[i], s3[i]
            t = z0[i]
            t -= a00 * w0
            t -= a01 * w1
            t -= a02 * w2
            t -= a03 * w3
            z0[i] = t
            t = z1[i]
            t -= a10 * w0
            t -= a11 * w1
            t -= a12 * w2
            t -= a13 * w3
            z1[i] = t
            t = z2[i]
            t -= a20 * w0
            t -= a21 * w1
            t -= a22 * w2
            t -= a23 * w3
            z2[i] = t
            t = z3[i]
            t -= a30 * w0
            t -= a31 * w1
            t -= a32 * w2
            t -= a33 * w3
            z3[i] = t
        j = e
    _solve_diagonal4(y0, y1, y2, y3, S, j, n, True)


@kernel()
def _solve_backward4(X, r, S, P):
    """:func:`row_solve_backward` of rows ``r .. r+3`` in one sweep over ``S``, four rows of ``S`` per
    block (the same operations per row)."""
    n = S.shape[0]
    y0, y1, y2, y3 = P[r], P[r + 1], P[r + 2], P[r + 3]
    P[r:r + 4] = X[r:r + 4]
    e = n
    while e >= 4:
        b = e - 4
        _solve_diagonal4(y0, y1, y2, y3, S, b, e, False)
        a03, a02, a01, a00 = y0[b + 3], y0[b + 2], y0[b + 1], y0[b]
        a13, a12, a11, a10 = y1[b + 3], y1[b + 2], y1[b + 1], y1[b]
        a23, a22, a21, a20 = y2[b + 3], y2[b + 2], y2[b + 1], y2[b]
        a33, a32, a31, a30 = y3[b + 3], y3[b + 2], y3[b + 1], y3[b]
        s3, s2, s1, s0 = S[b + 3, :b], S[b + 2, :b], S[b + 1, :b], S[b, :b]
        for j in range(b):
            w3, w2, w1, w0 = s3[j], s2[j], s1[j], s0[j]
            t = y0[j]
            t -= a03 * w3
            t -= a02 * w2
            t -= a01 * w1
            t -= a00 * w0
            y0[j] = t
            t = y1[j]
            t -= a13 * w3
            t -= a12 * w2
            t -= a11 * w1
            t -= a10 * w0
            y1[j] = t
            t = y2[j]
            t -= a23 * w3
            t -= a22 * w2
            t -= a21 * w1
            t -= a20 * w0
            y2[j] = t
            t = y3[j]
            t -= a33 * w3
            t -= a32 * w2
            t -= a31 * w1
            t -= a30 * w0
            y3[j] = t
        e = b
    _solve_diagonal4(y0, y1, y2, y3, S, 0, e, False)


@kernel()
def _solve_diagonal4(y0, y1, y2, y3, S, b, e, forward):
    """Entries ``b .. e-1`` of four rows solved with ``L[b:e, b:e]`` (``forward``: ``L``, else ``L^T``),
    the block's columns (rows) one at a time."""
    if forward:
        for jc in range(b, e):
            d = S[jc, jc]
            v0 = y0[jc] / d
            v1 = y1[jc] / d
            v2 = y2[jc] / d
            v3 = y3[jc] / d
            y0[jc], y1[jc], y2[jc], y3[jc] = v0, v1, v2, v3
            for i in range(jc + 1, e):
                w = S[jc, i]
                y0[i] -= v0 * w
                y1[i] -= v1 * w
                y2[i] -= v2 * w
                y3[i] -= v3 * w
    else:
        for ic in range(e - 1, b - 1, -1):
            d = S[ic, ic]
            v0 = y0[ic] / d
            v1 = y1[ic] / d
            v2 = y2[ic] / d
            v3 = y3[ic] / d
            y0[ic], y1[ic], y2[ic], y3[ic] = v0, v1, v2, v3
            for j in range(b, ic):
                w = S[ic, j]
                y0[j] -= v0 * w
                y1[j] -= v1 * w
                y2[j] -= v2 * w
                y3[j] -= v3 * w


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
