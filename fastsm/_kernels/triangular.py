"""The inverse of a lower-triangular factor by products of halves (BLAS-3).

``W = L^-1`` is computed on the halving tree of ``L``'s rows: with
``L = [[A, 0], [B, C]]``,

    ``W = [[A^-1, 0], [-C^-1 B A^-1, C^-1]]``,

the two diagonal halves inverted first (down to blocks of :data:`LEAF` rows,
inverted by column substitution as LAPACK's ``dtrti2``), then the off-diagonal
block by two dense products (``T = B A^-1``, ``-C^-1 T``), single-threaded
DGEMMs through Numba.  These are twice dtrtri's flops, at the DGEMM rate:
for ``n = 200`` it takes 150 µs where OpenBLAS's ``dtrtri`` takes 390 µs
(unblocked below its block size, ~6 GFlop/s), and it is faster up to about
``n = 1000`` (:data:`fastsm.config.TRI_INVERSE_MAX_N`; docs/scale.md).

Accuracy: the same block formula as ``dtrtri``'s (Du Croz & Higham's
method 2), with ``A^-1`` applied as a product where ``dtrtri`` solves with
``A``; the largest entry of ``|W L - I|`` was 0.8–2.0× dtrtri's for
``n`` from 50 to 1000 (lambda = 1e-4 kernel factors), and
``1 + lambda - ||W k||^2`` is as close to its long-double value as with
dtrtri's ``W`` (``tests/test_triangular.py``).

The tree is walked from an explicit schedule, not by recursion: Numba
segfaults loading a recursive function from its cache.
"""

from __future__ import annotations

import numpy as np

from fastsm.config import kernel

#: Rows of the diagonal blocks inverted by substitution.
LEAF = 16


@kernel()
def _schedule(n):
    """The halving tree's nodes ``(lo, hi)``, children before their parent, ``(count, 2)`` int64."""
    cap = 4 * (n // LEAF + 1)
    nodes = np.empty((cap, 2), dtype=np.int64)
    stack = np.empty((cap, 2), dtype=np.int64)
    stack[0, 0], stack[0, 1] = 0, n
    top, count = 1, 0
    while top > 0:
        top -= 1
        lo, hi = stack[top, 0], stack[top, 1]
        nodes[count, 0], nodes[count, 1] = lo, hi
        count += 1
        if hi - lo > LEAF:
            mid = lo + (hi - lo) // 2
            stack[top, 0], stack[top, 1] = lo, mid
            stack[top + 1, 0], stack[top + 1, 1] = mid, hi
            top += 2
    return nodes[:count][::-1].copy()


@kernel()
def _leaf(L, W, lo, hi):
    """``W[lo:hi, lo:hi] = L[lo:hi, lo:hi]^-1`` by columns, last first (``dtrti2``'s order)."""
    for j in range(hi - 1, lo - 1, -1):
        d = 1.0 / L[j, j]
        W[j, j] = d
        for i in range(j + 1, hi):
            s = 0.0
            for k in range(j + 1, i + 1):
                s += W[i, k] * L[k, j]
            W[i, j] = -d * s


@kernel()
def tri_inverse(L):
    """``W = L^-1`` of a lower-triangular ``L`` (its upper triangle is not read; C or Fortran order,
    the same bits), C-contiguous, zeros above the diagonal.

    ``L``'s diagonal must be nonzero (a Cholesky factor's is positive).  The DGEMMs run on
    the BLAS threads the caller allows: one, for results independent of the thread count.
    """
    n = L.shape[0]
    W = np.zeros((n, n))
    nodes = _schedule(n)
    for t in range(nodes.shape[0]):
        lo, hi = nodes[t, 0], nodes[t, 1]
        if hi - lo <= LEAF:
            _leaf(L, W, lo, hi)
            continue
        mid = lo + (hi - lo) // 2
        T = np.dot(np.ascontiguousarray(L[mid:hi, lo:mid]), np.ascontiguousarray(W[lo:mid, lo:mid]))
        W[mid:hi, lo:mid] = -np.dot(np.ascontiguousarray(W[mid:hi, mid:hi]), T)
    return W
