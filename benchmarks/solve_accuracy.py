"""Where global models lose accuracy at small lambda (#55): the triangular solves, against long double.

On the near-duplicate set of ``benchmarks/conditioning.py`` (Toy 1, 200 rows plus 100 of them
repeated 1e-7 apart), the model's factor ``L`` of ``K_X`` and the kernel rows ``k`` of 60 test
inputs: ``L^-1 k`` and ``K^-1 k = L^-T L^-1 k`` by SciPy's ``solve_triangular`` (one right-hand
side a call), by one DTRSM call for all rows (how fastsm's global models solved before #55's row
loops: DTRSM tiles) and by fastsm's row-loop substitutions (``fastsm._kernels.tri_rows``), each
against the same solves in 80-bit long double on the same ``L`` and ``k`` (largest error per row
relative to the row's largest entry, the largest over rows); then the objectives of the global model
against long double, beside SciPy's float64 substitution (``tests/longdouble.py``)::

    python benchmarks/solve_accuracy.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import dtrsm

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from longdouble import Reference, _backward, _forward  # noqa: E402
from products import tri  # noqa: E402

from fastsm import tgp  # noqa: E402
from fastsm._kernels.rbf import kernel_row  # noqa: E402
from fastsm._threads import thread_limits  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conditioning import near_duplicates  # noqa: E402

LD = np.longdouble


def _rel(A, R):
    return float(np.max(np.abs(A - R).max(axis=1) / np.abs(R).max(axis=1)))


def solves(lam: float) -> None:
    X, Y, Xt, p = near_duplicates(lam)
    model = tgp.fit(X, Y, p)
    S = model.Wx
    L = np.ascontiguousarray(np.tril(S))
    n = len(X)
    B = np.empty((len(Xt), n))
    scratch = np.empty((2, n))
    for r in range(len(Xt)):
        kernel_row(np.ascontiguousarray(Xt[r]), np.ascontiguousarray(X.T), float(p.gamma_x), B[r], scratch[0],
                   scratch[1])
    LL = L.astype(LD)
    ref_f = np.array([_forward(LL, b.astype(LD)) for b in B])
    ref_b = np.array([_backward(LL, f) for f in ref_f])
    with thread_limits(1):
        f1 = np.array([solve_triangular(L, b, lower=True) for b in B])
        b1 = np.array([solve_triangular(L, f, lower=True, trans=1) for f in f1])
        fb = dtrsm(1.0, L, B.T, lower=1).T
        bb = dtrsm(1.0, L, fb.T, lower=1, trans_a=1).T
        fr = tri(B, S, True, stored=True, solve=True)
        br = tri(fr, S, False, stored=True, solve=True)
    for name, f, b in (("solve_triangular", f1, b1), ("one DTRSM", fb, bb), ("fastsm row loops", fr, br)):
        print(f"{lam:5.0e} {name:17s} L^-1 k {_rel(f, ref_f):.1e}   K^-1 k {_rel(b, ref_b):.1e}")


def objectives(lam: float) -> None:
    X, Y, Xt, p = near_duplicates(lam)
    Xt = Xt[::5]
    model = tgp.fit(X, Y, p)
    ld, f64 = Reference(X, Y, p, LD), Reference(X, Y, p)
    rng = np.random.default_rng(0)
    Yq = Y[rng.integers(0, len(Y), len(Xt))] + 0.05 * model.y_spread * rng.standard_normal((len(Xt), 1))
    for method in ("sm", "kl", "ikl"):
        v = tgp.objective(model, Xt, Yq, method=method)
        e = np.zeros(2)
        for i in range(len(Xt)):
            y = Yq[i].astype(LD)
            r = ld.value(Xt[i], y, method)
            scale = abs(r) if method == "sm" else ld.terms(Xt[i], y, method)
            e = np.maximum(e, [float(abs(u - r) / scale) for u in (v[i], f64.value(Xt[i], Yq[i], method))])
        print(f"{lam:5.0e} {method:4s} fastsm {e[0]:.1e}  SciPy {e[1]:.1e}  fastsm / SciPy {e[0] / e[1]:.1f}")


if __name__ == "__main__":
    for lam in (1e-6, 1e-8):
        solves(lam)
    for lam in (1e-6, 1e-8):
        objectives(lam)
