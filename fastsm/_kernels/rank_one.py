"""Bordered (rank-one) inverse updates and Schur complements ([SM] App. 1).

For ``K_new = [[K, k], [k^T, kzz]]`` with ``B = K^-1``::

    u = B k,  eta = kzz - k^T u
    K_new^-1 = [[B + u u^T / eta, -u / eta], [-u^T / eta, 1 / eta]]   (Eq. 25)

and ``|K_new| = eta |K|`` (Eq. 20).  The downdate removes row/column ``i``:
``B_{-i,-i} - B_{-i,i} B_{i,-i} / B_ii``.  Both cost O(N^2).
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def bordered_inverse(Kinv, k, kzz):
    """Inverse of the bordered matrix and its Schur complement ``eta``.

    Returns ``(Kinv_new, eta)``; ``Kinv_new`` is ``(N+1)×(N+1)``.
    """
    n = Kinv.shape[0]
    u = np.empty(n)
    eta = kzz
    for i in range(n):
        t = 0.0
        for j in range(n):
            t += Kinv[i, j] * k[j]
        u[i] = t
        eta -= k[i] * t
    out = np.empty((n + 1, n + 1))
    inv_eta = 1.0 / eta
    for i in range(n):
        for j in range(n):
            out[i, j] = Kinv[i, j] + u[i] * u[j] * inv_eta
        out[i, n] = -u[i] * inv_eta
        out[n, i] = -u[i] * inv_eta
    out[n, n] = inv_eta
    return out, eta


@kernel()
def sumsq_rows(Zrows, kzz, floor, eta):
    """``eta_p = kzz - ||z_p||^2`` for each row ``p`` (``z_p = W k_p``), floored; returns hits.

    The Schur complement from a factor (docs/accuracy.md): a sum of squares, each row summed in
    one fixed order.  Serial: O(N) a row beside the O(N^2) product that formed it, and a parallel
    loop costs more to compile than it saves.
    """
    m, n = Zrows.shape
    hits = 0
    for p in range(m):
        s = 0.0
        for j in range(n):
            s += Zrows[p, j] * Zrows[p, j]
        e = kzz - s
        if not e > floor:
            e = floor
            hits += 1
        eta[p] = e
    return hits
