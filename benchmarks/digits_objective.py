"""Why SMTGP is never the best on the digits (docs/realdata.md): its objective, not its optimiser.

[SM] §5.1.3 reports SMTGP ahead of KLTGP on USPS; on scikit-learn's digits (``python -m fastsm
digits``) it is not.  On the 4×4 task (899 training, 898 test images, the widths ``python -m
fastsm digits`` selects: gamma_x = 1/8 and gamma_y = 2 over the median squared distances, with
lambda_x = lambda_y = 1e-3; the search now picks lambda_y = 1) this script measures, for alpha = 0.5 and 0.9:

1. **Converged?**  SciPy's L-BFGS-B started at each fastsm prediction, on the same objective:
   how much lower does it get?
2. **Objective at the truth**: on how many test images is the SM objective lower at the true
   centre pixels than at the prediction?  (If rarely, the model prefers its own answer: a
   better optimiser cannot help.)
3. **Best of 5 starts** (the KLTGP prediction, the ridge start, and the outputs of the 3 nearest
   training inputs): the lowest objective per image, and its error.
4. **Exact leave-one-out error against alpha** (``tgp.select``), and
5. **[SM]'s own USPS widths** (2 rho² = 2, i.e. gamma_x = gamma_y = 0.5).

The error is [SM]'s mean ``||y_hat - y||`` over the test images.

    python benchmarks/digits_objective.py
"""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import minimize
from scipy.spatial import cKDTree

from fastsm import datasets, tgp
from fastsm.tgp.params import median_sq_distance

ALPHAS = (0.5, 0.9)


def error(Y, P) -> float:
    return float(np.sqrt(((P - Y) ** 2).sum(axis=1)).mean())


def lbfgs_gain(model, X, P, method="sm") -> np.ndarray:
    """Relative decrease L-BFGS-B finds from each prediction (>= 0; 0: already a local minimum)."""
    out = np.empty(len(X))
    for i in range(len(X)):
        x = X[i:i + 1]

        def f(y, x=x):
            v, g = tgp.objective(model, x, y[None, :], method=method, return_gradient=True)
            return float(v[0]), g[0]

        f0 = f(P[i])[0]
        res = minimize(f, P[i], jac=True, method="L-BFGS-B", options={"maxiter": 500, "ftol": 1e-15, "gtol": 1e-12})
        out[i] = max(0.0, (f0 - res.fun) / abs(f0))
    return out


def multistart(model, X, starts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per image, the prediction with the lowest SM objective over the starts; and which start won."""
    preds = [tgp.predict(model, X, method="sm", init=S).y for S in starts]
    vals = np.stack([tgp.objective(model, X, P, method="sm") for P in preds])
    win = np.argmin(vals, axis=0)
    return np.stack(preds)[win, np.arange(len(X))], win


def main() -> int:
    t0 = time.perf_counter()
    Xtr, Xte, Ytr, Yte = datasets.digits_reconstruction(4, 0)
    gx, gy = 0.125 / median_sq_distance(Xtr), 2.0 / median_sq_distance(Ytr)
    print(f"digits 4x4: {len(Xtr)} training, {len(Xte)} test images; gamma_x = {gx:.4g}, gamma_y = {gy:.4g}, "
          "lambda = 1e-3")
    base = tgp.TGPParams(gamma_x=gx, gamma_y=gy, lambda_x=1e-3, lambda_y=1e-3, alpha=ALPHAS[0], beta=0.99)
    model0 = tgp.fit(Xtr, Ytr, base)
    kl = tgp.predict(model0, Xte, method="kl").y
    print(f"KLTGP error {error(Yte, kl):.4f}")
    _, nn = cKDTree(Xtr).query(Xte, k=3)
    starts = [kl, tgp.predict(model0, Xte, method="kl", max_iter=0, init="linear").y,
              *[Ytr[nn[:, j]] for j in range(3)]]
    head = (f"{'alpha':>5} {'SMTGP err':>9} {'L-BFGS-B gain: max':>19} {'median':>9} {'f(truth)<f(pred)':>17} "
            f"{'best-of-5 err':>13} {'starts won (KL, ridge, nn1-3)':>30}")
    print(head)
    print("-" * len(head))
    for a in ALPHAS:
        m = tgp.with_alpha(model0, a)
        pred = tgp.predict(m, Xte, method="sm")
        gain = lbfgs_gain(m, Xte, pred.y)
        lower = int(np.sum(tgp.objective(m, Xte, Yte, method="sm") < tgp.objective(m, Xte, pred.y, method="sm")))
        best, win = multistart(m, Xte, starts)
        counts = "/".join(str(int(np.sum(win == k))) for k in range(len(starts)))
        print(f"{a:5.2f} {error(Yte, pred.y):9.4f} {gain.max():19.1e} {np.median(gain):9.1e} "
              f"{lower:>10d} / {len(Xte)} {error(Yte, best):13.4f} {counts:>30}")
    print()
    loo_alphas = (0.001, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9)
    sel = tgp.select(Xtr, Ytr, alphas=loo_alphas, betas=(0.99,), gammas_x=gx, gammas_y=gy, lambdas_x=1e-3,
                     lambdas_y=1e-3, method="sm", scoring="euclidean", cv="loo")
    kl_loo = tgp.select(Xtr, Ytr, alphas=(0.5,), betas=(0.99,), gammas_x=gx, gammas_y=gy, lambdas_x=1e-3,
                        lambdas_y=1e-3, method="kl", scoring="euclidean", cv="loo").best_score
    print("exact leave-one-out error (training images): KLTGP " f"{kl_loo:.4f}; SMTGP by alpha: "
          + ", ".join(f"{a:g}: {e:.4f}" for a, e in zip(loo_alphas, sel.table["mean"], strict=True)))
    usps = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=0.5, gamma_y=0.5, lambda_x=1e-3, lambda_y=1e-3, alpha=0.5))
    parts = [f"KLTGP {error(Yte, tgp.predict(usps, Xte, method='kl').y):.4f}"]
    for a in ALPHAS:
        parts.append(f"SMTGP a={a:g} {error(Yte, tgp.predict(tgp.with_alpha(usps, a), Xte, method='sm').y):.4f}")
    print("[SM]'s USPS widths (gamma_x = gamma_y = 0.5): " + ", ".join(parts))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
