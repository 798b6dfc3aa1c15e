"""The ridge start and the output spread of a small model in one GIL-free call.

:func:`ridge_start` computes what :func:`fastsm.tgp.fitting.ridge` and
:func:`fastsm.tgp.fitting.output_spread` compute with NumPy (the same least-squares problem, solved
by LAPACK's ``dgelsd`` with NumPy's default cut-off ``eps * max(M, N)``), for the local models
(:func:`fastsm.tgp.fitting.factorize_cholesky`), where those two functions' twenty-odd NumPy
calls per model held the GIL for longer than the solve took.  Call on one BLAS thread.
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel


@kernel()
def ridge_start(X, Y, w, weighted):
    """``(coef, spread)``: ridge coefficients ``(dx+1, dy)`` (bias last) and ``sqrt(sum_c var(Y[:, c]))``.

    The problem of :func:`fastsm.tgp.fitting.ridge`: on centred columns scaled to unit root mean
    square (1 for a constant column), penalty ``r = 1e-6 * max(mean_c sum_i Xc[i, c]^2, 1e-300)``
    on the inputs, none on the bias; with weights ``w`` (if ``weighted``) rows scaled by
    ``sqrt(w / max w)`` and ``r`` by ``mean(w / max w)``.  Minimal-norm least squares.
    """
    n, dx = X.shape
    dy = Y.shape[1]
    mu = np.zeros(dx)
    for i in range(n):
        mu += X[i]
    mu /= n
    var = np.zeros(dx)
    for i in range(n):
        d = X[i] - mu
        var += d * d
    scale = np.empty(dx)
    total = 0.0
    for c in range(dx):
        total += var[c]
        s = np.sqrt(var[c] / n)
        scale[c] = s if s > 0.0 else 1.0
    r = 1e-6 * max(total / dx, 1e-300)
    top = 1.0
    if weighted:
        top = w.max()
        r *= (w / top).mean()
    A = np.zeros((n + dx, dx + 1))
    b = np.zeros((n + dx, dy))
    for i in range(n):
        si = np.sqrt(w[i] / top) if weighted else 1.0
        for c in range(dx):
            A[i, c] = si * ((X[i, c] - mu[c]) / scale[c])
        A[i, dx] = si
        for c in range(dy):
            b[i, c] = si * Y[i, c]
    root = np.sqrt(r)
    for c in range(dx):
        A[n + c, c] = root / scale[c]
    z = np.linalg.lstsq(A, b, rcond=np.finfo(np.float64).eps * max(n + dx, dx + 1))[0]
    coef = np.empty((dx + 1, dy))
    for c in range(dx):
        coef[c] = z[c] / scale[c]
    for k in range(dy):
        t = 0.0
        for c in range(dx):
            t += mu[c] * coef[c, k]
        coef[dx, k] = z[dx, k] - t
    ym = np.zeros(dy)
    for i in range(n):
        ym += Y[i]
    ym /= n
    ss = 0.0
    for k in range(dy):
        v = 0.0
        for i in range(n):
            t = Y[i, k] - ym[k]
            v += t * t
        ss += v / n
    return coef, np.sqrt(ss)
