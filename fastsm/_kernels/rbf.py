"""Gaussian (RBF) kernel blocks and their derivative with respect to y.

``k(a, b) = exp(-gamma * ||a - b||^2)`` (scikit-learn's ``rbf_kernel``
convention; the papers' ``2 rho^2`` equals ``1 / gamma``).  The regulariser
``lambda`` is added to the diagonal of training matrices only (docs/math.md §1).
"""

from __future__ import annotations

import numpy as np

from fastsm._kernels.shared import call
from fastsm._kernels.simd import vadd, vhsum, vload, vmul, vsplat, vstore, vsub
from fastsm.config import kernel


@kernel(inline=True)
def sqdist_row(a, Zt, j0, out):
    """``out[j] = ||a - z_{j0+j}||^2`` from the transposed points ``Zt`` (d×n).

    Each entry is summed over the coordinates in order; the loop runs over ``j`` (contiguous in
    ``Zt``), so it vectorises without reassociation.  Every kernel entry in fastsm is computed so.
    Four coordinates per pass over ``out`` (the same additions in the same order: the same bits,
    with ``out`` loaded and stored a quarter as often).
    """
    d = Zt.shape[0]
    m = out.shape[0]
    for j in range(m):
        out[j] = 0.0
    c = 0
    while c + 4 <= d:
        a0, a1, a2, a3 = a[c], a[c + 1], a[c + 2], a[c + 3]
        z0, z1, z2, z3 = Zt[c, j0:j0 + m], Zt[c + 1, j0:j0 + m], Zt[c + 2, j0:j0 + m], Zt[c + 3, j0:j0 + m]
        for j in range(m):
            t0 = a0 - z0[j]
            t1 = a1 - z1[j]
            t2 = a2 - z2[j]
            t3 = a3 - z3[j]
            s = out[j]
            s += t0 * t0
            s += t1 * t1
            s += t2 * t2
            s += t3 * t3
            out[j] = s
        c += 4
    while c < d:
        ac = a[c]
        col = Zt[c, j0:j0 + m]
        for j in range(m):
            t = ac - col[j]
            out[j] += t * t
        c += 1


@kernel(internal=True)
def gram_upper(Z, gamma, K):
    """The strict upper triangle of the kernel matrix of ``Z`` into ``K``, row by row.

    Each entry as :func:`sqdist_row` and :func:`exp_neg_scaled` compute it (the same operations
    in the same order, the same bits): the squared distances eight columns at a time, summed over
    the coordinates in order in a vector register (:mod:`fastsm._kernels.simd`; ``Z``'s transpose
    is copied with zero columns past ``n``, so that every row is a whole number of vectors), the
    rows gathered into one buffer of up to :data:`GRAM_CHUNK` entries and exponentiated by one call
    (long loops instead of one short call per row), then copied to their rows.
    """
    n, d = Z.shape
    w = (n + 7) // 8 * 8 + 8
    Zt = np.empty(d * w)
    Zt[:] = 0.0
    for i in range(n):
        for c in range(d):
            Zt[c * w + i] = Z[i, c]
    size = GRAM_CHUNK + w
    buf = np.empty(size)
    scale = np.empty(size)
    low = np.empty(size)
    zero = vsplat(0.0)
    i = 0
    while i < n - 1:
        off = 0
        i1 = i
        while i1 < n - 1 and (off == 0 or off + n - i1 - 1 <= GRAM_CHUNK):
            j0 = i1 + 1
            for p in range(0, n - j0, 8):
                acc = zero
                for c in range(d):
                    t = vsub(vsplat(Z[i1, c]), vload(Zt, c * w + j0 + p))
                    acc = vadd(acc, vmul(t, t))
                vstore(buf, off + p, acc)
            off += (n - j0 + 7) // 8 * 8
            i1 += 1
        call(exp_neg_scaled, buf[:off], gamma, scale[:off], low[:off])
        off = 0
        for r in range(i, i1):
            m = n - r - 1
            for j in range(m):  # loops, not a slice assignment: its shape check costs compile time
                K[r, r + 1 + j] = buf[off + j]
            off += (m + 7) // 8 * 8
        i = i1


#: Entries :func:`gram_upper` exponentiates per call (32 KiB of squared distances).
GRAM_CHUNK = 4096


@kernel()
def rbf_gram(Z, gamma, lam):
    """Training kernel matrix ``K`` (n×n) with ``lam`` on its diagonal: :func:`gram_upper`'s upper
    triangle, mirrored (every entry as :func:`sqdist_row` and :func:`exp_neg_scaled` compute a kernel
    row's), in this thread (a fit computes its two matrices in two threads,
    :func:`fastsm.tgp.fitting.factorize`)."""
    n = Z.shape[0]
    K = np.empty((n, n))
    gram_upper(Z, gamma, K)
    for i in range(n):
        K[i, i] = 1.0 + lam
        for j in range(i):
            K[i, j] = K[j, i]
    return K


@kernel()
def rbf_cross(A, Z, gamma, out):
    """Cross-kernel rows: ``out[i, j] = exp(-gamma ||A_i - Z_j||^2)`` (:func:`sqdist_row`, :func:`exp_neg_scaled`).

    One row per test point (the transposed ``N×B`` column block of
    DESIGN.md), so that each point's column is contiguous.  ``out`` must be
    at least ``len(A)`` rows by ``len(Z)`` columns.  In this thread: threads split the points
    (:func:`fastsm._threads.run_chunks`).
    """
    m = A.shape[0]
    n = Z.shape[0]
    Zt = np.empty((Z.shape[1], n))
    for j in range(n):
        for c in range(Z.shape[1]):
            Zt[c, j] = Z[j, c]
    scratch = np.empty((2, n))
    for i in range(m):
        row = out[i, :n]
        sqdist_row(A[i], Zt, 0, row)
        call(exp_neg_scaled, row, gamma, scratch[0], scratch[1])


@kernel()
def contract_jacobian(y, Z, k, gamma, coefs, vecs, use_v3, grad):
    """``grad = a^T J`` with ``a = c1 v1 + c2 v2 + c3 v3`` in O(N·d).

    ``coefs = (c1, c2, c3)`` and ``vecs = (v1, v2, v3)``; the third term is
    skipped unless ``use_v3``.

    ``J`` is never formed: ``sum_i a_i J[i, d] = -2 gamma (y[d] S - T[d])``
    with ``S = sum_i a_i k_i`` and ``T[d] = sum_i a_i k_i z_i[d]``.

    The loop over ``i`` stays scalar on purpose: written as vectorisable
    reductions over ``i`` it ran 2× faster, but LLVM then vectorised it
    differently in a fresh compile and in the cached object code, so a
    process that compiled the kernel and one that loaded it from the cache
    gave gradients differing in the last bit (docs/performance.md).
    """
    c1, c2, c3 = coefs
    v1, v2, v3 = vecs
    n, d = Z.shape
    for c in range(d):
        grad[c] = 0.0
    s = 0.0
    for i in range(n):
        a = c1 * v1[i] + c2 * v2[i]
        if use_v3:
            a += c3 * v3[i]
        w = a * k[i]
        s += w
        for c in range(d):
            grad[c] += w * Z[i, c]
    for c in range(d):
        grad[c] = -2.0 * gamma * (y[c] * s - grad[c])


@kernel(inline=True)
def combine_weights(c1, v1, c2, v2, k, w):
    """``w_i = (c1 v1_i + c2 v2_i) k_i``: the weights ``a_i k_i`` of :func:`contract_lanes`."""
    for i in range(k.shape[0]):
        w[i] = (c1 * v1[i] + c2 * v2[i]) * k[i]


@kernel()
def contract_lanes(y, Zt, w, gamma, grad):
    """:func:`contract_jacobian`'s ``grad = a^T J`` from the weights ``w_i = a_i k_i``
    (:func:`combine_weights`), its sums over ``i`` in explicit eight-lane vectors
    (:mod:`fastsm._kernels.simd`).

    ``Zt`` is ``Z`` transposed (``dy × N``, C-ordered).  ``S = sum_i w_i`` and
    ``T[d] = sum_i w_i z_i[d]`` are each summed in eight lanes (lane ``l`` takes ``i = l mod 8`` in
    order up to the last whole vector), the lanes
    combined by :func:`~fastsm._kernels.simd.vhsum`, then the last ``N mod 8`` terms in order: one
    fixed order written in the code, so the bits do not depend on how LLVM compiled it (cold or
    cached) or on the CPU.  Four coordinates share each load of ``w``.
    """
    d, n = Zt.shape
    m = n - n % 8
    acc = vsplat(0.0)
    for i in range(0, m, 8):
        acc = vadd(acc, vload(w, i))
    s = vhsum(acc)
    for i in range(m, n):
        s += w[i]
    c = 0
    while c + 4 <= d:
        a0 = vsplat(0.0)
        a1 = vsplat(0.0)
        a2 = vsplat(0.0)
        a3 = vsplat(0.0)
        for i in range(0, m, 8):
            wv = vload(w, i)
            a0 = vadd(a0, vmul(wv, vload(Zt, c * n + i)))
            a1 = vadd(a1, vmul(wv, vload(Zt, (c + 1) * n + i)))
            a2 = vadd(a2, vmul(wv, vload(Zt, (c + 2) * n + i)))
            a3 = vadd(a3, vmul(wv, vload(Zt, (c + 3) * n + i)))
        t0, t1, t2, t3 = vhsum(a0), vhsum(a1), vhsum(a2), vhsum(a3)
        for i in range(m, n):
            t0 += w[i] * Zt[c, i]
            t1 += w[i] * Zt[c + 1, i]
            t2 += w[i] * Zt[c + 2, i]
            t3 += w[i] * Zt[c + 3, i]
        grad[c] = -2.0 * gamma * (y[c] * s - t0)
        grad[c + 1] = -2.0 * gamma * (y[c + 1] * s - t1)
        grad[c + 2] = -2.0 * gamma * (y[c + 2] * s - t2)
        grad[c + 3] = -2.0 * gamma * (y[c + 3] * s - t3)
        c += 4
    while c < d:
        a0 = vsplat(0.0)
        for i in range(0, m, 8):
            a0 = vadd(a0, vmul(vload(w, i), vload(Zt, c * n + i)))
        t0 = vhsum(a0)
        for i in range(m, n):
            t0 += w[i] * Zt[c, i]
        grad[c] = -2.0 * gamma * (y[c] * s - t0)
        c += 1


_LOG2E = 1.4426950408889634
#: ln 2 split Cody–Waite style: ``k * _LN2_HI`` is exact for |k| < 2^11.
_LN2_HI = 0.693145751953125
_LN2_LO = 1.4286068203094173e-06  # ln 2 - _LN2_HI to double precision
#: ``2^52 + 1023``: an integer k added to it lands in the low mantissa bits
#: (exactly, for 0 <= k + 1023 < 2^52), from where it moves to the exponent.
_MAGIC = 4503599627370496.0 + 1023.0
_MAGIC_BITS = 0x4330000000000000
#: Arguments below this give 0 (``exp(-700) = 9.9e-305``; no subnormals).
_EXP_LOW = -700.0


@kernel()
def exp_neg_scaled(x, gamma, scale, low):
    """``x[j] = exp(-gamma * x[j])`` in place, in loops LLVM vectorises.

    Numba calls libm's scalar ``exp`` (9.5 ns per entry here); this form —
    ``exp(v) = 2^k e^r`` with ``k = rint(v / ln 2)``, ``|r| <= ln 2 / 2``, a
    degree-13 Taylor polynomial (truncation < 4e-18 relative) and ``2^k``
    built in the exponent bits through the integer view of ``scale`` —
    runs ~2.6× faster, within 2 ulp of libm (tests/test_performance.py).
    ``r`` uses ln 2 in two parts (Cody–Waite); the low part's product goes
    through the scratch ``low`` so that fast-math reassociation cannot fold
    the two parts back into one rounded constant.  ``scale`` and ``low``:
    scratch arrays of ``len(x)``.  Arguments below ``-700`` give 0, NaN
    stays NaN.
    """
    n = x.shape[0]
    bits = scale.view(np.int64)
    # separate loops keep fast-math reassociation from merging the two halves of ln 2
    for j in range(n):
        v = -gamma * x[j]
        vc = _EXP_LOW if v < _EXP_LOW else v  # max(v, _EXP_LOW), NaN kept
        k = np.rint(vc * _LOG2E)
        x[j] = vc - k * _LN2_HI
        low[j] = k * _LN2_LO
        # k = -1023 (exponent bits 0) makes 2^k exactly 0 below the range; NaN keeps its k
        scale[j] = k + _MAGIC if not v < _EXP_LOW else _MAGIC - 1023.0
    for j in range(n):
        r = x[j] - low[j]
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        x[j] = p
    for j in range(n):
        bits[j] = (bits[j] - _MAGIC_BITS) << 52
    for j in range(n):
        x[j] *= scale[j]


@kernel()
def kernel_row(y, Zt, gamma, out, scale, low):
    """``out[j] = exp(-gamma ||y - z_j||^2)`` from the transposed training outputs ``Zt`` (d×n).

    :func:`sqdist_row`, then :func:`exp_neg_scaled` (``scale``: scratch and ``low``: scratch of n).
    """
    sqdist_row(y, Zt, 0, out)
    call(exp_neg_scaled, out, gamma, scale, low)
