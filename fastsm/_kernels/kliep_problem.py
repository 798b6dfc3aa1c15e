"""KLIEP on the simplex: the problem, its products and line search, shared by every solver.

Solvers: :mod:`~fastsm._kernels.frank_wolfe` (FW, away-step, pairwise),
:mod:`~fastsm._kernels.kliep_pg` (projected gradient), :mod:`~fastsm._kernels.kliep_polish`
(the Newton polish).

docs/math.md §5.  With ``A[j, l] = k_l(x_te_j)`` and ``b_l = mean_i k_l(x_tr_i)``
KLIEP maximises ``F(alpha) = sum_j log (A alpha)_j`` over
``{alpha >= 0, b^T alpha = 1}``, a simplex with vertices ``e_l / b_l``
([CS] Eq. 4).  Every solver here works in the simplex coordinates
``mu = b * alpha`` (the paper's atoms, ``alpha = sum_l mu_l beta^(l)``):

* the scaled kernel ``A[j, l] / b_l`` (stored as ``p.A``, by test point:
  the gradient streams its rows);
* ``z = (A / b) mu = A alpha`` (kept up to date in O(n_te) per step);
* ``gt = (A / b)^T (1 / z) = g * beta`` — the paper's ``g ⊙ beta`` ([CS] Eq. 3–4),
  the one O(n_te n_c) product of an iteration;
* the duality gap ``<g, d_FW> = max_l gt_l - mu^T gt`` (``mu^T gt = n_te`` in
  exact arithmetic).

The problem travels as a :class:`KliepProblem`.  With ``stored = False`` the
matrix is never formed: a centre's column is recomputed from ``Xte``/``C`` when
needed (memory O(n_te + n_c), one ``exp`` per entry and iteration).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from fastsm._kernels.linesearch import backtrack
from fastsm._kernels.rbf import kernel_row
from fastsm.config import kernel

FW = 0
AFW = 1
PFW = 2
PG = 3

GOOD = 0
DROP = 1
SWAP = 2

STOP_GAP = 0
STOP_MAX_ITER = 1
STOP_OBJECTIVE = 2
STOP_LINE_SEARCH = 3
STOP_INTERRUPTED = 4

#: Backtracking steps before a line search gives up (the step is then below 2^-60 of its start).
MAX_BACKTRACK = 60


class KliepProblem(NamedTuple):
    """A KLIEP problem in simplex coordinates (what the solvers need, nothing else)."""

    A: np.ndarray  # n_te × n_c scaled kernel A / b (column l: centre l), or 0 × 0 when not stored
    Xte: np.ndarray  # n_te × d test inputs
    Xte_t: np.ndarray  # d × n_te: Xte transposed, C-ordered (kernel rows vectorise along it)
    C: np.ndarray  # n_c × d centres
    gamma: float  # 1 / (2 sigma^2)
    inv_b: np.ndarray  # beta_l = 1 / b_l
    stored: bool



@kernel()
def record(trace, it, gap, f, n_active):
    """Row ``it`` of the trace, if it has one."""
    if it < trace.gap.shape[0]:
        trace.gap[it] = gap
        trace.objective[it] = f
        trace.n_active[it] = n_active



class FWTrace(NamedTuple):
    """Per-iteration records, preallocated; iterations beyond their length are not recorded."""

    gap: np.ndarray
    objective: np.ndarray
    step: np.ndarray  # kind of the step from iterate i to i + 1: GOOD / DROP / SWAP (-1: none)
    n_active: np.ndarray



#: Rows of a kernel block per parallel task (each task owns its ``exp`` scratch).
ROW_BLOCK = 16
#: Test points per partial sum of the gradient: a fixed split, so the result does not depend on the threads.
GRADIENT_CHUNK = 256


@kernel(internal=True)
def dot_lanes(a, x):
    """``sum_j a[j] x[j]`` in eight interleaved partial sums, combined pairwise.

    The order of the additions is fixed by the code (fast-math here has no
    reassociation), so the result does not depend on how the kernel was
    compiled (cold or cached) or on the thread count.  Eight independent
    chains instead of one: the n = 2000 KLIEP gradient 1.96 -> 0.86 ms
    (the matrix-free path's dot; the stored path streams rows instead).
    """
    n = a.shape[0]
    m = n - n % 8
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for j in range(0, m, 8):
        s0 += a[j] * x[j]
        s1 += a[j + 1] * x[j + 1]
        s2 += a[j + 2] * x[j + 2]
        s3 += a[j + 3] * x[j + 3]
        s4 += a[j + 4] * x[j + 4]
        s5 += a[j + 5] * x[j + 5]
        s6 += a[j + 6] * x[j + 6]
        s7 += a[j + 7] * x[j + 7]
    t = 0.0
    for j in range(m, n):
        t += a[j] * x[j]
    return (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + t


@kernel(internal=True)
def sum_lanes(a):
    """``sum_j a[j]`` in the lanes of :func:`dot_lanes`."""
    n = a.shape[0]
    m = n - n % 8
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for j in range(0, m, 8):
        s0 += a[j]
        s1 += a[j + 1]
        s2 += a[j + 2]
        s3 += a[j + 3]
        s4 += a[j + 4]
        s5 += a[j + 5]
        s6 += a[j + 6]
        s7 += a[j + 7]
    t = 0.0
    for j in range(m, n):
        t += a[j]
    return (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + t


@kernel(parallel=True)
def center_means(C, Xt, gamma, out):
    """``out[l] = mean_i exp(-gamma ||C_l - X_i||^2)`` without storing the block ([CS] Eq. 4);
    ``Xt`` holds the training inputs transposed (d×n)."""
    n_c = C.shape[0]
    n = Xt.shape[1]
    for blk in prange((n_c + ROW_BLOCK - 1) // ROW_BLOCK):
        row = np.empty(n)
        scale = np.empty(n)
        low = np.empty(n)
        for l in range(blk * ROW_BLOCK, min(n_c, (blk + 1) * ROW_BLOCK)):
            kernel_row(C[l], Xt, gamma, row, scale, low)
            out[l] = sum_lanes(row) / n


@kernel(parallel=True)
def scaled_kernel(X, Ct, gamma, inv_b, A):
    """``A[j, l] = exp(-gamma ||x_j - C_l||^2) / b_l`` (built in parallel over blocks of points);
    ``Ct``: the centres transposed (d×n_c)."""
    n = X.shape[0]
    n_c = Ct.shape[1]
    for blk in prange((n + ROW_BLOCK - 1) // ROW_BLOCK):
        scale = np.empty(n_c)
        low = np.empty(n_c)
        for j in range(blk * ROW_BLOCK, min(n, (blk + 1) * ROW_BLOCK)):
            row = A[j]
            kernel_row(X[j], Ct, gamma, row, scale, low)
            for l in range(n_c):
                row[l] *= inv_b[l]



@kernel(internal=True)
def center_row(p, l, buf):
    """Column ``l`` of ``A`` (centre ``l`` at every test point) into ``buf``; returns ``buf``."""
    n = buf.shape[0]
    if p.stored:
        for j in range(n):
            buf[j] = p.A[j, l]
        return buf
    kernel_row(p.C[l], p.Xte_t, p.gamma, buf, np.empty(n), np.empty(n))
    for j in range(n):
        buf[j] *= p.inv_b[l]
    return buf


@kernel(internal=True)
def _columns_into(A, r, j0, j1, out):
    """``out += sum_{j0 <= j < j1} r_j A[j]``, eight rows per pass over ``out`` (each entry summed in ``j``
    order: the unrolling changes no rounding)."""
    n_c = out.shape[0]
    j = j0
    while j + 8 <= j1:
        a0, a1, a2, a3 = A[j], A[j + 1], A[j + 2], A[j + 3]
        a4, a5, a6, a7 = A[j + 4], A[j + 5], A[j + 6], A[j + 7]
        r0, r1, r2, r3 = r[j], r[j + 1], r[j + 2], r[j + 3]
        r4, r5, r6, r7 = r[j + 4], r[j + 5], r[j + 6], r[j + 7]
        for l in range(n_c):
            s = ((out[l] + a0[l] * r0) + a1[l] * r1) + a2[l] * r2
            s = ((s + a3[l] * r3) + a4[l] * r4) + a5[l] * r5
            out[l] = (s + a6[l] * r6) + a7[l] * r7
        j += 8
    while j < j1:
        a0 = A[j]
        r0 = r[j]
        for l in range(n_c):
            out[l] += a0[l] * r0
        j += 1



@kernel(parallel=True)
def gradient(p, r, gt):
    """``gt = A^T r``.

    Stored: partial sums over fixed chunks of ``GRADIENT_CHUNK`` test points
    in parallel (rows of ``A`` streamed, the loop over centres vectorised),
    added in chunk order — the result does not depend on the thread count.
    Matrix-free: a kernel row per centre, in parallel over blocks of centres.
    """
    n_c = p.inv_b.shape[0]
    n = p.Xte_t.shape[1]
    if p.stored:
        n_ch = (n + GRADIENT_CHUNK - 1) // GRADIENT_CHUNK
        part = np.zeros((n_ch, n_c))
        for c in prange(n_ch):
            _columns_into(p.A, r, c * GRADIENT_CHUNK, min(n, (c + 1) * GRADIENT_CHUNK), part[c])
        for l in range(n_c):
            gt[l] = part[0, l]
        for c in range(1, n_ch):
            for l in range(n_c):
                gt[l] += part[c, l]
    else:
        for blk in prange((n_c + ROW_BLOCK - 1) // ROW_BLOCK):
            row = np.empty(n)
            scale = np.empty(n)
            low = np.empty(n)
            for l in range(blk * ROW_BLOCK, min(n_c, (blk + 1) * ROW_BLOCK)):
                kernel_row(p.C[l], p.Xte_t, p.gamma, row, scale, low)
                gt[l] = dot_lanes(row, r) * p.inv_b[l]



@kernel()
def combine(p, mu, z, buf):
    """``z = A mu`` over the nonzero entries of ``mu`` (O(n_te · nnz); each ``z_j`` summed in centre order)."""
    if p.stored:
        idx = np.flatnonzero(mu)
        for j in range(z.shape[0]):
            row = p.A[j]
            s = 0.0
            for q in range(idx.shape[0]):
                s += mu[idx[q]] * row[idx[q]]
            z[j] = s
        return
    z[:] = 0.0
    for l in range(mu.shape[0]):
        if mu[l] != 0.0:
            row = center_row(p, l, buf)
            for j in range(z.shape[0]):
                z[j] += mu[l] * row[j]



@kernel()
def log_sum(z):
    """``sum_j log z_j``; ``-inf`` if any ``z_j <= 0``."""
    s = 0.0
    for j in range(z.shape[0]):
        if not z[j] > 0.0:
            return -np.inf
        s += np.log(z[j])
    return s



@kernel(internal=True)
def _trial(z, dz, rho):
    s = 0.0
    for j in range(z.shape[0]):
        v = z[j] + rho * dz[j]
        if not v > 0.0:
            return -np.inf
        s += np.log(v)
    return s



@kernel(internal=True)
def armijo_max(z, dz, f0, slope, rho_max, tau, noise):
    """[CS] Alg. 3: largest ``rho <= rho_max`` (backtracking) with ``F(rho) >= F0 + tau rho slope - noise``.

    Backtracking uses the safeguarded quadratic interpolation of
    :func:`fastsm._kernels.linesearch.backtrack` (``rho`` shrinks by a
    factor in ``[0.1, 0.5]``, the paper's ``xi``).  ``noise = 0`` is the
    paper's rule; the polish passes the rounding level of ``F`` so that
    Newton steps whose gain is below it are still taken.  Returns
    ``(rho, F, ok)``.
    """
    rho = rho_max
    for _ in range(MAX_BACKTRACK):
        f = _trial(z, dz, rho)
        if np.isfinite(f) and f >= f0 + tau * rho * slope - noise:
            return rho, f, True
        rho = backtrack(-f0, -f, rho, -slope)
    return 0.0, f0, False



@kernel(internal=True)
def fw_gap(gt, mu):
    """``(l_fw, max gt, mu^T gt)``."""
    l_fw = 0
    gmax = gt[0]
    s = 0.0
    for l in range(gt.shape[0]):
        if gt[l] > gmax:
            gmax = gt[l]
            l_fw = l
        if mu[l] != 0.0:
            s += mu[l] * gt[l]
    return l_fw, gmax, s
