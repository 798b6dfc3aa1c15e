"""Products of rows with a lower-triangular factor, and substitutions with a Cholesky factor, by
vectorisable row loops: every triangular product of fastsm (#55).

A factor travels in *symmetric storage* ``S`` (:func:`symmetric_storage`): its lower triangle is the
factor ``M``, its strict upper triangle ``M^T``, so that row ``p`` of ``M`` (``S[p, :p]``) and column
``p`` below the diagonal (``S[p, p+1:]``) are both contiguous.  A row ``x`` becomes

* ``M x`` (forward) or ``M^T x`` (backward): a product (``M = W = L^-1`` of a model in inverse form, or
  IKLTGP's ``G``);
* ``M^-1 x`` or ``M^-T x``: a substitution with a Cholesky factor ``M = L`` (models in Cholesky form).

The pivots ``p`` are taken in order (ascending forward, descending backward) and each pivot's
coefficient ``a`` — ``-x[p]`` for a product, the solved entry ``y[p] * (1 / L[p, p])`` for a
substitution — is taken out of every entry it reaches, ``y[i] -= a * S[p, i]`` along ``S``'s row
``p`` (a column of ``M`` forward, a row backward).  An entry therefore takes its terms one at a time
in pivot order, one multiply-subtract each (:func:`fastsm._kernels.fma.msub`: rounded once where the
compile target has FMA, else a rounded product and a rounded difference): its bits depend on its row,
``S`` and whether the target fuses only — not on the other rows of the call, the thread, the vector
width or the BLAS (there is none).  The substitutions are backward stable; the
DTRSM tiles they replaced were 10-20x less accurate on the near-duplicate sets of #55
(docs/accuracy.md).

For speed, sets of four rows take four pivots per sweep (each ``S`` entry loaded once for sixteen
multiply-subtracts; each block's own triangle in registers: :func:`_block4`), in groups of :data:`GROUP`
rows that stay in cache while ``S`` streams once for all of them (:func:`rows4`).  From order
:data:`BLOCKED_FROM` on, and eight rows, a sweep goes only as far as the end of a block of :data:`BLOCK`
pivots; the block's terms then come off every later entry by tiles of four rows by 32 entries that
hold their sixteen vectors in registers while the block's rows of ``S`` stream
(:func:`_subtract_block`), as a matrix product does, where a sweep loaded and stored each entry once
per four pivots.  A row left over takes four pivots per sweep alone, its block's triangle in
registers too (:func:`row_forward`, :func:`row_backward`).  The single rows' routine for a block's
triangle, used by ``rows4`` too, made it 1.4x slower at 256 rows (session 37), so :func:`_block4`
writes out its two kinds.  Blocking changes which loads are shared, not an entry's operations.
One thread, a factor of ``N = 1000`` and 200 rows (``benchmarks/tri_rows.py --solve``, a 2-core Intel
Xeon with AVX-512, two sittings): 3.6-3.7 ms a substitution, against DTRSM's 4.7-5.2 ms and 4.7-4.9 ms
before the blocks (docs/performance.md).

The loops are compiled once, as two kernels (:func:`rows4`, and the rows left over, :func:`rows1`) that
:func:`rows_call` calls by symbol (:func:`fastsm._kernels.shared.call`; ``rows4`` calls
:func:`_subtract_block` so too): compiled into every kernel that
runs products, they cost the cold start several seconds; as C functions compiled at import (``cfunc``),
2.3 s of every cold ``import fastsm`` (#54).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import carray

from fastsm._kernels.fma import msub, vmsub
from fastsm._kernels.linalg import ptr, shift
from fastsm._kernels.shared import call
from fastsm._kernels.simd import vload, vsplat, vstore
from fastsm.config import kernel

#: Rows of one group of :func:`rows4` (four-row sets sweeping ``S`` together).
GROUP = 64
#: Pivots of one block of :func:`rows4` (their terms off the later entries by :func:`_subtract_block`).
BLOCK = 32
#: The least order ``n`` for which :func:`rows4` takes its pivots in blocks of :data:`BLOCK`.
BLOCKED_FROM = 128


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
def _sweep4(P, r, S, p0, step, A, g, t, lo, hi):
    """Rows ``r .. r+3`` of ``P``, entries ``lo .. hi-1``: ``-= A[g + q, t + u] * S[p0 + u step]`` for row
    ``r + q``, ``u = 0 .. 3``."""
    s0, s1, s2, s3 = S[p0, lo:hi], S[p0 + step, lo:hi], S[p0 + 2 * step, lo:hi], S[p0 + 3 * step, lo:hi]
    z0, z1, z2, z3 = P[r, lo:hi], P[r + 1, lo:hi], P[r + 2, lo:hi], P[r + 3, lo:hi]
    a0, a1, a2, a3 = A[g, t], A[g, t + 1], A[g, t + 2], A[g, t + 3]
    b0, b1, b2, b3 = A[g + 1, t], A[g + 1, t + 1], A[g + 1, t + 2], A[g + 1, t + 3]
    d0, d1, d2, d3 = A[g + 2, t], A[g + 2, t + 1], A[g + 2, t + 2], A[g + 2, t + 3]
    e0, e1, e2, e3 = A[g + 3, t], A[g + 3, t + 1], A[g + 3, t + 2], A[g + 3, t + 3]
    for i in range(hi - lo):
        w0, w1, w2, w3 = s0[i], s1[i], s2[i], s3[i]
        z0[i] = msub(msub(msub(msub(z0[i], a0, w0), a1, w1), a2, w2), a3, w3)
        z1[i] = msub(msub(msub(msub(z1[i], b0, w0), b1, w1), b2, w2), b3, w3)
        z2[i] = msub(msub(msub(msub(z2[i], d0, w0), d1, w1), d2, w2), d3, w3)
        z3[i] = msub(msub(msub(msub(z3[i], e0, w0), e1, w1), e2, w2), e3, w3)


@kernel(internal=True)
def _pivot(y, x, diag, solve):
    """A pivot's coefficient and its own entry: ``y * (1 / diag)`` for both (a substitution), or ``-x`` and
    ``y - (-x) diag`` (a product).  A kernel of its own (LLVM inlines it): ten copies inlined at Numba's IR
    level cost 0.25 s of a cold ``import fastsm``."""
    if solve:
        a = y * (1.0 / diag)
        return a, a
    a = -x
    return a, msub(y, a, diag)


@kernel(inline=True)
def _block4(P, X, r, S, p0, step, solve):
    """Row ``r`` of ``P``: the four pivots ``p0 + t step`` of a block among themselves, in registers (the
    operations of the loop for a short block, in its order); their coefficients returned.  (Written
    into a row view of an array instead, they cost two reference-count calls a row.)"""
    p1, p2, p3 = p0 + step, p0 + 2 * step, p0 + 3 * step
    y0, y1, y2, y3 = P[r, p0], P[r, p1], P[r, p2], P[r, p3]
    if solve:
        a0 = y0 * (1.0 / S[p0, p0])
        y1 = msub(y1, a0, S[p0, p1])
        y2 = msub(y2, a0, S[p0, p2])
        y3 = msub(y3, a0, S[p0, p3])
        a1 = y1 * (1.0 / S[p1, p1])
        y2 = msub(y2, a1, S[p1, p2])
        y3 = msub(y3, a1, S[p1, p3])
        a2 = y2 * (1.0 / S[p2, p2])
        y3 = msub(y3, a2, S[p2, p3])
        a3 = y3 * (1.0 / S[p3, p3])
        y0, y1, y2, y3 = a0, a1, a2, a3
    else:
        a0, a1, a2, a3 = -X[r, p0], -X[r, p1], -X[r, p2], -X[r, p3]
        y0 = msub(y0, a0, S[p0, p0])
        y1 = msub(y1, a0, S[p0, p1])
        y2 = msub(y2, a0, S[p0, p2])
        y3 = msub(y3, a0, S[p0, p3])
        y1 = msub(y1, a1, S[p1, p1])
        y2 = msub(y2, a1, S[p1, p2])
        y3 = msub(y3, a1, S[p1, p3])
        y2 = msub(y2, a2, S[p2, p2])
        y3 = msub(y3, a2, S[p2, p3])
        y3 = msub(y3, a3, S[p3, p3])
    P[r, p0], P[r, p1], P[r, p2], P[r, p3] = y0, y1, y2, y3
    return a0, a1, a2, a3


@kernel(inline=True)
def row_forward(x, y, S, solve):
    """``y <- L^-1 y`` (``solve``; ``y`` holds ``x``) or ``y <- y + M x`` for one row: four pivots per sweep,
    each block's own triangle in registers (the operations of :func:`rows4`, in the same order)."""
    n = S.shape[0]
    j = 0
    while j + 4 <= n:
        a0, y0 = _pivot(y[j], x[j], S[j, j], solve)
        y1 = msub(y[j + 1], a0, S[j, j + 1])
        y2 = msub(y[j + 2], a0, S[j, j + 2])
        y3 = msub(y[j + 3], a0, S[j, j + 3])
        a1, y1 = _pivot(y1, x[j + 1], S[j + 1, j + 1], solve)
        y2 = msub(y2, a1, S[j + 1, j + 2])
        y3 = msub(y3, a1, S[j + 1, j + 3])
        a2, y2 = _pivot(y2, x[j + 2], S[j + 2, j + 2], solve)
        y3 = msub(y3, a2, S[j + 2, j + 3])
        a3, y3 = _pivot(y3, x[j + 3], S[j + 3, j + 3], solve)
        y[j], y[j + 1], y[j + 2], y[j + 3] = y0, y1, y2, y3
        _sweep1((a0, a1, a2, a3), S[j, j + 4:], S[j + 1, j + 4:], S[j + 2, j + 4:], S[j + 3, j + 4:], y[j + 4:])
        j += 4
    while j < n:
        a, y[j] = _pivot(y[j], x[j], S[j, j], solve)
        col = S[j, j + 1:]
        tail = y[j + 1:]
        for i in range(n - j - 1):
            tail[i] = msub(tail[i], a, col[i])
        j += 1


@kernel(inline=True)
def row_backward(x, y, S, solve):
    """``y <- L^-T y`` (``solve``) or ``y <- y + M^T x`` for one row, as :func:`row_forward` with the pivots
    descending."""
    n = S.shape[0]
    i = n - 1
    while i + 1 >= 4:
        a0, y0 = _pivot(y[i], x[i], S[i, i], solve)
        y1 = msub(y[i - 1], a0, S[i, i - 1])
        y2 = msub(y[i - 2], a0, S[i, i - 2])
        y3 = msub(y[i - 3], a0, S[i, i - 3])
        a1, y1 = _pivot(y1, x[i - 1], S[i - 1, i - 1], solve)
        y2 = msub(y2, a1, S[i - 1, i - 2])
        y3 = msub(y3, a1, S[i - 1, i - 3])
        a2, y2 = _pivot(y2, x[i - 2], S[i - 2, i - 2], solve)
        y3 = msub(y3, a2, S[i - 2, i - 3])
        a3, y3 = _pivot(y3, x[i - 3], S[i - 3, i - 3], solve)
        y[i], y[i - 1], y[i - 2], y[i - 3] = y0, y1, y2, y3
        h = i - 3
        _sweep1((a0, a1, a2, a3), S[i, :h], S[i - 1, :h], S[i - 2, :h], S[i - 3, :h], y[:h])
        i -= 4
    while i >= 0:
        a, y[i] = _pivot(y[i], x[i], S[i, i], solve)
        row = S[i, :i]
        for j in range(i):
            y[j] = msub(y[j], a, row[j])
        i -= 1


@kernel(inline=True)
def _sweep1(a, r0, r1, r2, r3, z):
    """``z[i] -= a[0] r0[i]``, then ``a[1] r1[i]``, ``a[2] r2[i]``, ``a[3] r3[i]``, for every ``i``."""
    a0, a1, a2, a3 = a
    for i in range(z.shape[0]):
        z[i] = msub(msub(msub(msub(z[i], a0, r0[i]), a1, r1[i]), a2, r2[i]), a3, r3[i])


@kernel(inline=True)
def _tile4x32(P, pr, ldp, S, n, A, g, kb, p0, step, j):
    """Rows at flat offsets ``pr + q ldp`` (``q = 0 .. 3``) of ``P``, entries ``j .. j+31``, each minus the
    ``kb`` terms ``A[g + q, t] * S[p0 + t step, ...]`` in order ``t = 0, 1, ...``: sixteen vectors in
    registers while the terms stream (:func:`_subtract_block`)."""
    q0, q1, q2, q3 = pr + j, pr + ldp + j, pr + 2 * ldp + j, pr + 3 * ldp + j
    c00, c01, c02, c03 = vload(P, q0), vload(P, q0 + 8), vload(P, q0 + 16), vload(P, q0 + 24)
    c10, c11, c12, c13 = vload(P, q1), vload(P, q1 + 8), vload(P, q1 + 16), vload(P, q1 + 24)
    c20, c21, c22, c23 = vload(P, q2), vload(P, q2 + 8), vload(P, q2 + 16), vload(P, q2 + 24)
    c30, c31, c32, c33 = vload(P, q3), vload(P, q3 + 8), vload(P, q3 + 16), vload(P, q3 + 24)
    for t in range(kb):
        sp = (p0 + t * step) * n + j
        s0, s1, s2, s3 = vload(S, sp), vload(S, sp + 8), vload(S, sp + 16), vload(S, sp + 24)
        u = vsplat(A[g, t])
        c00, c01, c02, c03 = vmsub(c00, u, s0), vmsub(c01, u, s1), vmsub(c02, u, s2), vmsub(c03, u, s3)
        u = vsplat(A[g + 1, t])
        c10, c11, c12, c13 = vmsub(c10, u, s0), vmsub(c11, u, s1), vmsub(c12, u, s2), vmsub(c13, u, s3)
        u = vsplat(A[g + 2, t])
        c20, c21, c22, c23 = vmsub(c20, u, s0), vmsub(c21, u, s1), vmsub(c22, u, s2), vmsub(c23, u, s3)
        u = vsplat(A[g + 3, t])
        c30, c31, c32, c33 = vmsub(c30, u, s0), vmsub(c31, u, s1), vmsub(c32, u, s2), vmsub(c33, u, s3)
    vstore(P, q0, c00), vstore(P, q0 + 8, c01), vstore(P, q0 + 16, c02), vstore(P, q0 + 24, c03)
    vstore(P, q1, c10), vstore(P, q1 + 8, c11), vstore(P, q1 + 16, c12), vstore(P, q1 + 24, c13)
    vstore(P, q2, c20), vstore(P, q2 + 8, c21), vstore(P, q2 + 16, c22), vstore(P, q2 + 24, c23)
    vstore(P, q3, c30), vstore(P, q3 + 8, c31), vstore(P, q3 + 16, c32), vstore(P, q3 + 24, c33)


@kernel(inline=True)
def _tile4x8(P, pr, ldp, S, n, A, g, kb, p0, step, j):
    """:func:`_tile4x32` for entries ``j .. j+7``, returned (not stored)."""
    q0, q1, q2, q3 = pr + j, pr + ldp + j, pr + 2 * ldp + j, pr + 3 * ldp + j
    c0, c1, c2, c3 = vload(P, q0), vload(P, q1), vload(P, q2), vload(P, q3)
    for t in range(kb):
        v = vload(S, (p0 + t * step) * n + j)
        c0 = vmsub(c0, vsplat(A[g, t]), v)
        c1 = vmsub(c1, vsplat(A[g + 1, t]), v)
        c2 = vmsub(c2, vsplat(A[g + 2, t]), v)
        c3 = vmsub(c3, vsplat(A[g + 3, t]), v)
    return c0, c1, c2, c3


@kernel(inline=True)
def _store4x8(P, pr, ldp, j, c):
    """Store :func:`_tile4x8`'s vectors ``c`` at entries ``j .. j+7`` of the rows at ``pr + q ldp``."""
    c0, c1, c2, c3 = c
    vstore(P, pr + j, c0), vstore(P, pr + ldp + j, c1), vstore(P, pr + 2 * ldp + j, c2), vstore(P, pr + 3 * ldp + j, c3)


@kernel(internal=True)
def _subtract_block(P, ldp, rows, S, n, A, kb, p0, step, lo, hi):
    """Entries ``lo .. hi-1`` of ``P``'s first ``rows`` rows (a multiple of four; ``P`` flat, rows ``ldp``
    apart), each minus the ``kb`` terms ``A[g, t] * S[p0 + t step, i]`` (row ``g``, entry ``i``) in order
    ``t = 0, 1, ...``: one multiply-subtract each, as the four-pivot sweeps would take them.

    Tiles of four rows by 32 entries (:func:`_tile4x32`), every tile of the rows before the next 32
    entries (the ``kb × 32`` terms stay in cache for all of them); then vectors of eight.  A last partial
    vector is taken as the vector ending at ``hi``, computed into ``A[g, kb:kb+8]`` before the others are
    stored: where it overlaps them, it stores the same values.  Fewer than eight entries go one by one."""
    la = A.shape[1]
    if hi - lo < 8:
        for g in range(rows):
            for i in range(lo, hi):
                z = P[g * ldp + i]
                for t in range(kb):
                    z = msub(z, A[g, t], S[(p0 + t * step) * n + i])
                P[g * ldp + i] = z
        return
    e = lo + (hi - lo) // 8 * 8
    if e < hi:
        for g in range(0, rows, 4):
            c0, c1, c2, c3 = _tile4x8(P, g * ldp, ldp, S, n, A, g, kb, p0, step, hi - 8)
            _store4x8(A, g * la, la, kb, (c0, c1, c2, c3))
    j = lo
    while e - j >= 32:
        for g in range(0, rows, 4):
            _tile4x32(P, g * ldp, ldp, S, n, A, g, kb, p0, step, j)
        j += 32
    while j < e:
        for g in range(0, rows, 4):
            _store4x8(P, g * ldp, ldp, j, _tile4x8(P, g * ldp, ldp, S, n, A, g, kb, p0, step, j))
        j += 8
    if e < hi:
        for g in range(rows):
            vstore(P, g * ldp + hi - 8, vload(A, g * la + kb))


@kernel(internal=True)
def rows4(x, ldx, m, s, n, p, ldp, mode):
    """``P[r, :n]`` for ``r < m`` (``m`` a multiple of four): row ``X[r, :n]`` times the lower triangle ``M``
    of ``S`` (``n × n``, symmetric storage): ``M x`` (``fwd``) or ``M^T x``; with ``solve`` ``M^-1 x`` or
    ``M^-T x``; ``x``, ``s`` and ``p`` point to ``X[0, 0]``, ``S[0, 0]`` and ``P[0, 0]``, ``X`` and ``P`` of
    leading dimensions ``ldx`` and ``ldp``, ``mode`` bit 0 ``fwd``, bit 1 ``solve``.

    In groups of :data:`GROUP` rows, the pivots in blocks of :data:`BLOCK` (one block of all ``n`` for
    ``n`` below :data:`BLOCKED_FROM` or fewer than eight rows): within a block, four rows and four pivots
    per sweep over the block's own entries, the coefficients kept; then the block's terms off every later
    entry (:func:`_subtract_block`).  The loops are the kernel's own body: inlined into it from a kernel
    of their own, their Numba IR was copied once more (0.25 s, #54)."""
    X = carray(x, (m, ldx))
    S = carray(s, (n, n))
    P = carray(p, (m, ldp))
    fwd, solve = (mode & 1) == 1, (mode & 2) == 2
    kb = BLOCK if n >= BLOCKED_FROM and m >= 8 else n
    A = np.empty((min(m, GROUP), kb + 8))  # a row's coefficients of the block, then its last vector
    step = 1 if fwd else -1
    for r0 in range(0, m, GROUP):
        r1 = min(r0 + GROUP, m)
        for r in range(r0, r1):
            for j in range(n):
                P[r, j] = X[r, j] if solve else 0.0
        k0 = 0
        while k0 < n:
            kend = min(k0 + kb, n)
            k = k0
            while k < kend:
                b = min(4, n - k)
                p0 = k if fwd else n - 1 - k
                for r in range(r0, r1, 4):
                    if b == 4:
                        g, t = r - r0, k - k0
                        for q in range(4):
                            A[g + q, t], A[g + q, t + 1], A[g + q, t + 2], A[g + q, t + 3] = \
                                _block4(P, X, r + q, S, p0, step, solve)
                        lo, hi = (k + 4, kend) if fwd else (n - kend, n - k - 4)
                        _sweep4(P, r, S, p0, step, A, g, t, lo, hi)
                        continue
                    for t in range(b):  # a short last block: its own pivots, no entry past it
                        p = p0 + t * step
                        d = 1.0 / S[p, p] if solve else S[p, p]
                        for q in range(4):
                            if solve:
                                a = P[r + q, p] * d
                                P[r + q, p] = a
                            else:
                                a = -X[r + q, p]
                                P[r + q, p] = msub(P[r + q, p], a, d)
                            for u in range(t + 1, b):
                                pu = p0 + u * step
                                P[r + q, pu] = msub(P[r + q, pu], a, S[p, pu])
                k += b
            if kend < n:
                lo, hi = (kend, n) if fwd else (0, n - kend)
                call(_subtract_block, P[r0:].reshape(-1), ldp, r1 - r0, S.reshape(-1), n, A, kb,
                     k0 if fwd else n - 1 - k0, step, lo, hi)
            k0 = kend


@kernel(internal=True)
def rows1(x, ldx, m, s, n, p, ldp, mode):
    """The rows of :func:`rows4` one by one (:func:`row_forward`, :func:`row_backward`): any ``m``."""
    S = carray(s, (n, n))
    X = carray(x, (m, ldx))
    P = carray(p, (m, ldp))
    fwd, solve = (mode & 1) == 1, (mode & 2) == 2
    for r in range(m):
        y = P[r, :n]
        for j in range(n):
            y[j] = X[r, j] if solve else 0.0
        if fwd:
            row_forward(X[r, :n], y, S, solve)
        else:
            row_backward(X[r, :n], y, S, solve)


@kernel(internal=True)
def rows_call(x, ldx, m, s, n, p, ldp, mode):
    """The products of ``m`` rows at ``x`` into ``p`` (:func:`rows4`'s arguments): sets of four rows by
    :func:`rows4`, the rows left over one by one (:func:`row_forward`, :func:`row_backward`); every row gets
    the same operations either way."""
    m4 = m // 4 * 4
    if m4 > 0:
        call(rows4, x, ldx, m4, s, n, p, ldp, mode)
    if m > m4:
        call(rows1, shift(x, m4 * ldx), ldx, m - m4, s, n, shift(p, m4 * ldp), ldp, mode)


class ProductPlan(NamedTuple):
    """Which factors of :func:`run_products` are Cholesky factors ``L`` (models in Cholesky form): bit ``f``
    of ``solve`` for factor ``f``; a "product with ``W = L^-1``" by such a factor is a substitution.
    ``0``: every factor is multiplied (inverse factors ``W``, and IKLTGP's ``G`` in every form)."""

    solve: int


@kernel()
def solves(plan, factor):
    """Whether factor ``factor`` (0 or 1) of ``plan``'s products is a Cholesky factor (:class:`ProductPlan`)."""
    return (plan.solve >> factor) & 1 == 1


@kernel()
def run_products(work, M0, M1, ops, m, plan):
    """Products of row buffers with lower-triangular factors, in this thread.

    ``work`` is a stack of row buffers, ``M0`` and ``M1`` ``N × N`` factors in symmetric storage and
    ``ops`` one row ``(source, factor, fwd, target)`` per product: ``work[target, :m]`` gets each row
    ``x`` of ``work[source, :m]`` times ``M`` (``M0`` for factor 0, else ``M1``): ``M x`` (``fwd``) or
    ``M^T x``, or for a factor that ``plan.solve`` marks ``M^-1 x`` or ``M^-T x``.  The products of one
    call are independent (no target is another's source).  Every row by :data:`rows_call`: its result
    depends on its own data and ``M`` only, so threads split the points, not the products
    (:func:`fastsm._threads.run_chunks`).
    """
    n = work.shape[2]
    size = work.shape[1] * n
    for g in range(ops.shape[0]):
        f = ops[g, 1]
        M = M0 if f == 0 else M1
        mode = (1 if ops[g, 2] == 1 else 0) + (2 if solves(plan, f) else 0)
        rows_call(ptr(work, ops[g, 0] * size), n, m, ptr(M, 0), M.shape[0], ptr(work, ops[g, 3] * size), n, mode)


#: The plans of the two forms: every factor multiplied (inverse form), or both solved (Cholesky form;
#: IKLTGP's ``G`` is multiplied: ``ProductPlan(1)``).
MULTIPLY_PLAN = ProductPlan(0)
SOLVE_PLAN = ProductPlan(3)


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
