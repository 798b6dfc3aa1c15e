"""Accuracy and honest convergence where conditioning bites (#55), against long double.

The near-duplicate set: Toy 1 with 200 training rows plus 100 of them repeated 1e-7 apart in x and
y, ``lambda_x = lambda_y = lam``.  For each ``lam``, SMTGP predictions of 100 test inputs by the
global model (Cholesky form, DTRSM tiles), by its inverse-form twin (``W = L^-1``,
:func:`fastsm.tgp.views.inverse_form`) and by the same points' local model (Cholesky form, row-loop
substitutions, as KNN-local and region models with ``K = N``); per form: the largest relative
error of the objective at the predictions against ``tests/longdouble.py`` in 80-bit long double,
the points reported converged, and among them those a bounded SciPy search on the long-double
objective lowers by more than 5e-7 (and 1e-8) relative, and the largest such decrease at any point.
Then leave-one-out of 10 training rows (5 duplicates, 5 originals), each searched on the long-double
objective of its ``N-1``-point model::

    python benchmarks/conditioning.py
"""

from __future__ import annotations

import os
import sys

import numpy as np
from scipy.optimize import minimize_scalar

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from longdouble import Reference  # noqa: E402

from fastsm import datasets, tgp  # noqa: E402
from fastsm.tgp.local_model import local_model  # noqa: E402
from fastsm.tgp.views import inverse_form  # noqa: E402

LD = np.longdouble


def near_duplicates(lam: float, seed: int = 0):
    Xtr, Xte, Ytr, _ = datasets.toy1(seed, n_train=200, n_test=500)
    i = np.random.default_rng(seed).choice(200, 100, replace=False)
    X, Y = np.vstack([Xtr, Xtr[i] + 1e-7]), np.vstack([Ytr, Ytr[i] + 1e-7])
    p = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=lam, lambda_y=lam, alpha=0.9, beta=1.5)
    return X, Y, Xte[::5], p


def main() -> None:
    print(f"{'lam':>6} {'form':9} {'obj. error':>10} {'converged':>9} {'>5e-7':>6} {'>1e-8':>6} {'max decrease':>12}")
    for lam in (1e-4, 1e-6, 1e-7, 1e-8):
        X, Y, Xt, p = near_duplicates(lam)
        model = tgp.fit(X, Y, p)
        ref = Reference(X, Y, p, LD)
        forms = (("global", model), ("inverse", inverse_form(model)), ("local", local_model(X, Y, p, ("kl", "sm"))))
        for form, m in forms:
            pred = tgp.predict(m, Xt, method="sm")
            err, dec = _check(m, ref, Xt, pred.y)
            _row(lam, form, err, dec, pred.converged)
        rows = np.array([203, 249, 274, 294, 245, 61, 83, 54, 165, 171])
        loo = tgp.loo_predict(model, method="sm", rows=rows)
        err, dec = np.empty(len(rows)), np.empty(len(rows))
        for k, h in enumerate(rows):
            keep = np.delete(np.arange(len(X)), h)
            sub = Reference(X[keep], Y[keep], p, LD)
            e, d = _check(tgp.fit(X[keep], Y[keep], p), sub, X[h:h + 1], loo.y[k:k + 1])
            err[k], dec[k] = e[0], d[0]
        _row(lam, "loo (10)", err, dec, loo.converged)


def _check(m, ref, X, Y):
    """Per row: the relative error of ``m``'s objective at ``Y`` against ``ref`` (long double), and the
    relative decrease a bounded search on ``ref`` finds from there."""
    f64 = tgp.objective(m, X, Y, method="sm")
    err, dec = np.empty(len(X)), np.empty(len(X))
    for k in range(len(X)):
        def f(y, k=k):
            return float(ref.value(X[k], np.array([y], dtype=LD), "sm"))

        f0 = f(Y[k, 0])
        err[k] = abs(f64[k] - f0) / abs(f0)
        d = 1e-2 * m.y_spread
        r = minimize_scalar(f, bounds=(Y[k, 0] - d, Y[k, 0] + d), method="bounded", options={"xatol": 1e-12})
        dec[k] = (f0 - min(r.fun, f0)) / abs(f0)
    return err, dec


def _row(lam, form, err, dec, cv):
    print(f"{lam:6.0e} {form:9} {err.max():10.1e} {int(cv.sum()):9d} {int((cv & (dec > 5e-7)).sum()):6d} "
          f"{int((cv & (dec > 1e-8)).sum()):6d} {dec.max():12.1e}", flush=True)


if __name__ == "__main__":
    main()
