"""A small twin GP's kernel matrices and Cholesky factors in one call (models in Cholesky form).

A KNN-local or region model (``K`` up to ``config.ROW_PRODUCTS_MAX_N`` points) is factorised for
one or a few test points.  :func:`twin_factors` forms ``K_X``, ``K_Y`` and
``K_XY = (1-a) K_X + a K_Y`` (docs/math.md §1, §6 with weights), factorises each in place
(:func:`cholesky_symmetric`) and leaves each factor ``L`` in *symmetric storage* (lower triangle
``L``, upper triangle ``L^T``, :mod:`fastsm._kernels.tri_rows`), the form its solves read: one
call without the GIL where the inverse form took eleven NumPy and LAPACK calls per model (Gram
matrices, the blend, Fortran copies, ``dpotrf``, triangular inverses, checks, symmetric storage).

The Gram entries are computed as :func:`fastsm._kernels.rbf.rbf_gram` computes them (rows of
squared distances and a vectorised exponential).  The factorisation is this module's own up to
order :data:`CHOLESKY_MAX_N` (explicit eight-lane vectors, :mod:`fastsm._kernels.simd`): at
``K = 200`` it takes ~0.09 ms where OpenBLAS's ``dpotrf`` took ~0.12 ms (docs/scale.md), as
accurate (tests/test_fitting.py), and its bits depend on the matrix and on whether the compile
target fuses multiply-adds, not on the BLAS.  Above that order LAPACK's ``dpotrf`` is the faster; it
runs on the caller's BLAS threads (call inside ``thread_limits``: one BLAS thread, deterministic) and is
reached by name, like every external routine (:mod:`fastsm._kernels.linalg`), so that the kernel stays cacheable.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fastsm._kernels.linalg import factor_symmetric, potrf_symmetric
from fastsm._kernels.rbf import gram_upper
from fastsm.config import kernel


@kernel()
def gram_into(Z, gamma, lam, w, weighted, K):
    """The upper triangle and diagonal of ``K = K0 + lam I`` (or ``K0 + lam W^-1`` if ``weighted``:
    noise ``lam / w_i``), row by row as :func:`~fastsm._kernels.rbf.rbf_gram` (and
    :func:`fastsm.tgp.fitting.weighted_gram`) compute it; ``K``'s strict lower triangle is not written
    (the factorisation reads the upper one, :func:`cholesky_symmetric`)."""
    n = Z.shape[0]
    gram_upper(Z, gamma, K)
    for i in range(n):
        K[i, i] = 1.0 + lam / w[i] if weighted else 1.0 + lam


@kernel()
def cholesky_symmetric(A):
    """Factorise the symmetric ``A = L L^T`` in place into symmetric storage; returns ``info`` as
    LAPACK's ``dpotrf`` does (0, or the order of the first leading minor that is not positive:
    ``A`` is then meaningless).  Up to ``CHOLESKY_MAX_N`` by fastsm's own factorisation
    (:func:`~fastsm._kernels.linalg.factor_symmetric`: its bits depend on ``A`` only), above by
    :func:`potrf_symmetric` (``dpotrf`` is the faster there; its bits are the BLAS's).
    """
    if A.shape[0] > CHOLESKY_MAX_N:
        return potrf_symmetric(A)
    return factor_symmetric(A)


#: Orders up to which :func:`cholesky_symmetric` factorises by its own loops (above: ``dpotrf``).
CHOLESKY_MAX_N = 400


class TwinKernels(NamedTuple):
    """The kernels of a twin-GP fit as :func:`twin_factors` reads them."""

    gamma_x: float
    gamma_y: float
    lambda_x: float
    lambda_y: float
    alpha: float  # K_XY = (1 - alpha) K_X + alpha K_Y
    weighted: bool  # noise lambda / w_i


@kernel()
def twin_factors(X, Y, kern, w, S, logdet, info):
    """``S[0], S[1], S[2]``: the Cholesky factors of ``K_X``, ``K_Y``, ``K_XY`` in symmetric storage, for the
    kernels :class:`TwinKernels` ``kern``.

    ``logdet[k] = 2 sum_i log L_ii`` and ``info[k]`` (as LAPACK's, 0 on success) per factor;
    ``w`` the weights if ``kern.weighted`` (docs/math.md §6).  ``K_XY``'s entries are ``(1-a) K_X + a K_Y``
    computed as NumPy computes the blend (two products, one sum).  Only the upper triangles are
    formed (:func:`cholesky_symmetric` reads no more and fills the lower ones).
    """
    gram_into(X, kern.gamma_x, kern.lambda_x, w, kern.weighted, S[0])
    gram_into(Y, kern.gamma_y, kern.lambda_y, w, kern.weighted, S[1])
    n = X.shape[0]
    alpha = kern.alpha
    b = 1.0 - alpha
    for i in range(n):
        x, y, xy = S[0, i, i:], S[1, i, i:], S[2, i, i:]
        for j in range(n - i):
            xy[j] = b * x[j] + alpha * y[j]
    for k in range(3):
        info[k] = cholesky_symmetric(S[k])
        t = 0.0
        if info[k] == 0:
            for i in range(n):
                t += np.log(S[k, i, i])
        logdet[k] = 2.0 * t
