"""Component-pair divergences and mixture log-densities (docs/math.md §7).

Everything works from per-component Cholesky factors and log-determinants,
computed once per component, never from explicit inverses.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import prange

from fastsm._kernels.gaussian import kl_from_factors, log_rho_pair
from fastsm._kernels.linalg import forward_solve
from fastsm.config import kernel

LOG_2PI = np.log(2.0 * np.pi)


class Components(NamedTuple):
    """The components of a list of mixtures, packed: mixture ``m`` owns rows ``off[m]:off[m + 1]``."""

    w: np.ndarray  # (K,) weights
    off: np.ndarray  # (n_mixtures + 1,) int64 offsets
    M: np.ndarray  # (K, d) means
    S: np.ndarray  # (K, d, d) covariances
    L: np.ndarray  # (K, d, d) lower Cholesky factors of S
    ld: np.ndarray  # (K,) log-determinants of S


@kernel(parallel=True)
def kl_pairs(F, G, I, J, out):
    """``out[p] = KL(f_I[p] || g_J[p])`` from per-component Cholesky factors (``F``, ``G``: :class:`Components`)."""
    MF, LF, ldF, MG, LG, ldG = F.M, F.L, F.ld, G.M, G.L, G.ld
    for p in prange(I.shape[0]):
        i = I[p]
        j = J[p]
        out[p] = kl_from_factors(MF[i], LF[i], ldF[i], MG[j], LG[j], ldG[j])


@kernel(parallel=True)
def log_rho_pairs(F, G, a, I, J, out, status):
    """``out[p] = log ∫ f_I[p]^a g_J[p]^(1-a)`` (``F``, ``G``: :class:`Components`)."""
    MF, SF, MG, SG = F.M, F.S, G.M, G.S
    for p in prange(I.shape[0]):
        s, v = log_rho_pair(MF[I[p]], SF[I[p]], MG[J[p]], SG[J[p]], a, 0)
        out[p] = v
        status[p] = s


WE = 0
MB = 1
MBS = 2
VAR = 3


@kernel(parallel=True)
def aggregate(method, C, A, B, Cself, offself, out):
    """Mixture measures from component divergences, one mixture pair per iteration.

    ``C[i, j] = D(f_i || g_j)`` over all components of all mixtures (rows:
    :class:`Components` ``A``, columns: ``B``); ``Cself`` packs the
    within-mixture blocks ``D(f_i || f_i')`` of A (needed by VAR) at offsets
    ``offself``.
    """
    wa, offa, wb, offb = A.w, A.off, B.w, B.off
    na = offa.shape[0] - 1
    nb = offb.shape[0] - 1
    for p in prange(na * nb):
        a = p // nb
        b = p % nb
        total = 0.0
        ka = offa[a + 1] - offa[a]
        for ii in range(ka):
            i = offa[a] + ii
            if wa[i] == 0.0:
                continue  # a zero-weight component is not part of the mixture (0 log 0 = 0)
            if method == WE:
                s = 0.0
                for j in range(offb[b], offb[b + 1]):
                    if wb[j] > 0.0:
                        s += wb[j] * C[i, j]
                total += wa[i] * s
            elif method == MB or method == MBS:
                best = np.inf
                arg = offb[b]
                for j in range(offb[b], offb[b + 1]):
                    if wb[j] == 0.0:
                        continue
                    v = C[i, j] - np.log(wb[j]) if method == MB else C[i, j]
                    if v < best:
                        best = v
                        arg = j
                if method == MB:
                    total += wa[i] * (C[i, arg] + np.log(wa[i] / wb[arg]))
                else:
                    total += wa[i] * best
            else:
                # Hershey & Olsen: log sum_i' w_i' e^-D(f_i||f_i') - log sum_j w_j e^-D(f_i||g_j)
                m1 = np.inf
                for jj in range(ka):
                    m1 = min(m1, Cself[offself[a] + ii * ka + jj])
                s1 = 0.0
                for jj in range(ka):
                    s1 += wa[offa[a] + jj] * np.exp(-(Cself[offself[a] + ii * ka + jj] - m1))
                m2 = np.inf
                for j in range(offb[b], offb[b + 1]):
                    m2 = min(m2, C[i, j])
                s2 = 0.0
                for j in range(offb[b], offb[b + 1]):
                    s2 += wb[j] * np.exp(-(C[i, j] - m2))
                total += wa[i] * ((np.log(s1) - m1) - (np.log(s2) - m2))
        out[a, b] = total


@kernel(parallel=True)
def mixtures_logpdf(X, G, out):
    """``out[n, b] = log g_b(x_n)`` for every point and every mixture ``b`` of :class:`Components` ``G``."""
    W, M, L, ld, off = G.w, G.M, G.L, G.ld, G.off
    N, d = X.shape
    nb = off.shape[0] - 1
    for p in prange(N * nb):
        n = p // nb
        g = p % nb
        k0 = off[g]
        K = off[g + 1] - k0
        b = np.empty(d)
        z = np.empty(d)
        lp = np.empty(K)
        best = -np.inf
        for kk in range(K):
            k = k0 + kk
            for r in range(d):
                b[r] = X[n, r] - M[k, r]
            forward_solve(L[k], b, z)
            q = 0.0
            for r in range(d):
                q += z[r] * z[r]
            v = np.log(W[k]) - 0.5 * (d * LOG_2PI + ld[k] + q) if W[k] > 0 else -np.inf
            lp[kk] = v
            if v > best:
                best = v
        s = 0.0
        for kk in range(K):
            s += np.exp(lp[kk] - best)
        out[n, g] = best + np.log(s)
