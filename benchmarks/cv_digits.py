"""``TwinGPRegressorCV().fit`` against ``GaussianProcessRegressor`` (ML-II) on digits halves, all 1797 images.

The right half of each 8×8 digit from its left half (pixels / 16), a shuffled 3-fold outer split
(seed 0, 1198 training rows per fit); fit times summed over the folds (JIT excluded: a warm-up
fit runs first) and the R² of the pooled out-of-fold predictions (docs/performance.md, "Model
selection").  GPR as in ``benchmarks/realdata_panel.py``.

    python benchmarks/cv_digits.py tgp     # TwinGPRegressorCV(), with each fold's choice
    python benchmarks/cv_digits.py gpr     # GaussianProcessRegressor
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import r2_score
from sklearn.model_selection import KFold

from fastsm.sklearn import TwinGPRegressorCV
from fastsm.tgp.params import median_sq_distance


def gpr(Xtr):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    m = median_sq_distance(Xtr)
    return GaussianProcessRegressor(ConstantKernel(1.0) * RBF(np.sqrt(m / 2.0), length_scale_bounds=(1e-2, 1e3))
                                    + WhiteKernel(1e-2, noise_level_bounds=(1e-6, 1e1)), normalize_y=True,
                                    random_state=0)


def main(which: str) -> None:
    im = load_digits().images / 16.0
    X, Y = im[:, :, :4].reshape(len(im), -1), im[:, :, 4:].reshape(len(im), -1)
    TwinGPRegressorCV().fit(X[:60], Y[:60])  # compiles or loads the kernels
    P = np.empty_like(Y)
    total = 0.0
    for k, (tr, te) in enumerate(KFold(3, shuffle=True, random_state=0).split(X)):
        est = TwinGPRegressorCV() if which == "tgp" else gpr(X[tr])
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X[tr], Y[tr])
        dt = time.perf_counter() - t0
        total += dt
        P[te] = est.predict(X[te])
        if which == "tgp":
            print(f"fold {k}: {dt:.2f} s, {est.method_} gamma_x={est.gamma_x_:.6g} gamma_y={est.gamma_y_:.6g} "
                  f"lambda_x={est.lambda_x_:g} lambda_y={est.lambda_y_:g}", flush=True)
    print(f"{which}: fit {total:.2f} s, R2 {r2_score(Y, P):.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tgp")
