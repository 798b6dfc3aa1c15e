"""KLIEP on the simplex: the problem, its products and line search, shared by every solver.

Solvers: :mod:`~fastsm._kernels.frank_wolfe` (FW, away-step, pairwise),
:mod:`~fastsm._kernels.kliep_pg` (projected gradient), :mod:`~fastsm._kernels.kliep_polish`
(the Newton polish).

MATH §5.  With ``A[j, l] = k_l(x_te_j)`` and ``b_l = mean_i k_l(x_tr_i)``
KLIEP maximises ``F(alpha) = sum_j log (A alpha)_j`` over
``{alpha >= 0, b^T alpha = 1}``, a simplex with vertices ``e_l / b_l``
([CS] Eq. 4).  Every solver here works in the simplex coordinates
``mu = b * alpha`` (the paper's atoms, ``alpha = sum_l mu_l beta^(l)``):

* ``At[l, j] = A[j, l] / b_l`` (the scaled kernel, stored transposed so that
  a centre's column is a contiguous row);
* ``z = At^T mu = A alpha`` (kept up to date in O(n_te) per step);
* ``gt = At (1 / z) = g * beta`` — the paper's ``g ⊙ beta`` ([CS] Eq. 3–4),
  the one O(n_te n_c) product of an iteration;
* the duality gap ``<g, d_FW> = max_l gt_l - mu^T gt`` (``mu^T gt = n_te`` in
  exact arithmetic).

The problem travels as a :class:`KliepProblem`.  With ``stored = False`` the
matrix ``At`` is never formed: rows are recomputed from ``Xte``/``C`` when
needed (memory O(n_te + n_c), one ``exp`` per entry and iteration).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from fastsm._kernels.linesearch import backtrack
from fastsm._kernels.rbf import exp_neg_scaled, sqdist_row
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

    At: np.ndarray  # n_c × n_te scaled kernel A^T / b, or 0 × 0 when not stored
    Xte: np.ndarray  # n_te × d test inputs
    Xte_t: np.ndarray  # d × n_te: Xte transposed, C-ordered (kernel rows vectorise along it)
    C: np.ndarray  # n_c × d centres
    gamma: float  # 1 / (2 sigma^2)
    inv_b: np.ndarray  # beta_l = 1 / b_l
    stored: bool



@kernel()
def _record(trace, it, gap, f, n_active):
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


@kernel()
def dot_lanes(a, x):
    """``sum_j a[j] x[j]`` in eight interleaved partial sums, combined pairwise.

    The order of the additions is fixed by the code (no fast-math
    reassociation needed), so LLVM's SLP vectoriser packs the eight lanes
    into vector registers and the result does not depend on how it was
    compiled (cold or cached) or on the thread count.
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


@kernel()
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


@kernel()
def kernel_row(c, Xt, gamma, out, scale, low):
    """``out[j] = exp(-gamma ||c - x_j||^2)`` from transposed points ``Xt`` (d×n), vectorised
    (:func:`~fastsm._kernels.rbf.sqdist_row`, :func:`~fastsm._kernels.rbf.exp_neg_scaled`)."""
    sqdist_row(c, Xt, 0, out)
    exp_neg_scaled(out, gamma, scale, low)


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
def scaled_kernel(C, Xt, gamma, inv_b, At):
    """``At[l, j] = exp(-gamma ||C_l - x_j||^2) / b_l`` (built in parallel over blocks of centres);
    ``Xt``: the points transposed (d×n)."""
    n_c = C.shape[0]
    n = Xt.shape[1]
    for blk in prange((n_c + ROW_BLOCK - 1) // ROW_BLOCK):
        scale = np.empty(n)
        low = np.empty(n)
        for l in range(blk * ROW_BLOCK, min(n_c, (blk + 1) * ROW_BLOCK)):
            row = At[l]
            kernel_row(C[l], Xt, gamma, row, scale, low)
            for j in range(n):
                row[j] *= inv_b[l]



@kernel()
def _row(p, l, buf):
    """Row ``l`` of ``At`` (a view when stored, else computed into ``buf``)."""
    if p.stored:
        return p.At[l]
    n = buf.shape[0]
    kernel_row(p.C[l], p.Xte_t, p.gamma, buf, np.empty(n), np.empty(n))
    for j in range(n):
        buf[j] *= p.inv_b[l]
    return buf



@kernel(parallel=True)
def gradient(p, r, gt):
    """``gt = At r`` in parallel over blocks of centres; each entry one :func:`dot_lanes` (its order fixed,
    independent of the thread count)."""
    n_c = p.inv_b.shape[0]
    n = p.Xte_t.shape[1]
    for blk in prange((n_c + ROW_BLOCK - 1) // ROW_BLOCK):
        hi = min(n_c, (blk + 1) * ROW_BLOCK)
        if p.stored:
            for l in range(blk * ROW_BLOCK, hi):
                gt[l] = dot_lanes(p.At[l], r)
        else:
            row = np.empty(n)
            scale = np.empty(n)
            low = np.empty(n)
            for l in range(blk * ROW_BLOCK, hi):
                kernel_row(p.C[l], p.Xte_t, p.gamma, row, scale, low)
                gt[l] = dot_lanes(row, r) * p.inv_b[l]



@kernel()
def combine(p, mu, z, buf):
    """``z = At^T mu`` over the nonzero entries of ``mu`` (O(n_te · nnz))."""
    z[:] = 0.0
    for l in range(mu.shape[0]):
        if mu[l] != 0.0:
            row = _row(p, l, buf)
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



@kernel()
def _trial(z, dz, rho):
    s = 0.0
    for j in range(z.shape[0]):
        v = z[j] + rho * dz[j]
        if not v > 0.0:
            return -np.inf
        s += np.log(v)
    return s



@kernel()
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



@kernel()
def _gap(gt, mu):
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
