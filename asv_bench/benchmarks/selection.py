"""asv benchmarks of model selection and online updates (docs/selection.md).

``track_*`` report the leave-one-out error and the update's agreement with a
refit, so that a change of accuracy shows in the history beside the times.
"""

import numpy as np

from fastsm import datasets, tgp
from fastsm.tgp.search import DEFAULT_ALPHAS, GAMMA_X_GRID, GAMMA_Y_GRID, LAMBDA_GRID

PARAMS = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4, alpha=0.85, beta=1.5)


class LeaveOneOut:
    params = ([250, 500], ["kl", "sm"])
    param_names = ["n", "method"]
    timeout = 300

    def setup(self, n, method):
        X, _, Y, _ = datasets.toy1(0, n_train=n, n_test=2)
        self.Y = Y
        self.model = tgp.fit(X, Y, PARAMS, methods=("kl", "sm"))
        self.loo = tgp.loo_predict(self.model, method=method)  # compiles or loads the kernels

    def time_loo_predict(self, n, method):
        tgp.loo_predict(self.model, method=method)

    def track_loo_mae(self, n, method):
        return float(np.abs(self.loo.y - self.Y).mean())

    track_loo_mae.unit = "mean absolute error"


class Select:
    timeout = 300

    def setup(self):
        self.X, _, self.Y, _ = datasets.toy1(0, n_train=300, n_test=2)
        self.sel = self.run()

    def run(self):
        return tgp.select(self.X, self.Y, alphas=(0.2, 0.5, 0.8), betas=(1.5,), gammas_x=0.2, gammas_y=20.0,
                          lambdas_x=1e-4, lambdas_y=1e-4, cv="loo")

    def time_select_loo_3_alphas(self):
        self.run()

    def track_best_loo_mae(self):
        return self.sel.best_score

    track_best_loo_mae.unit = "mean absolute error"


class RegressorCV:
    """``TwinGPRegressorCV()``'s selection (its grids, ``method="auto"``, MSE) on 600 points, dy = 16: the
    default ``"descent"`` search against the full ``"coordinate"`` sweeps."""

    params = ["descent", "coordinate"]
    param_names = ["search"]
    timeout = 600
    number = 1
    repeat = 3

    def setup(self, search):
        self.X, _, self.Y, _ = datasets.random_structured(0, n_train=600, n_test=1, dx=8, dy=16)
        self.sel = self.run(search)

    def run(self, search):
        return tgp.select(self.X, self.Y, method="auto", alphas=DEFAULT_ALPHAS, betas=(1.5,), gammas_x=GAMMA_X_GRID,
                          gammas_y=GAMMA_Y_GRID, lambdas_x=LAMBDA_GRID, lambdas_y=LAMBDA_GRID, scoring="mse",
                          search=search)

    def time_select(self, search):
        self.run(search)

    def track_settings_scored(self, search):
        return int((~self.sel.table["screen"]).sum())

    track_settings_scored.unit = "table rows"

    def track_best_mse(self, search):
        return self.sel.best_score

    track_best_mse.unit = "mean squared error"


class Append:
    params = [1000, 2000]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        X, _, Y, _ = datasets.random_structured(0, n_train=n + 1, n_test=1, dx=8, dy=16)
        p = tgp.TGPParams(gamma_x=0.05, gamma_y=0.05, lambda_x=1e-2, lambda_y=1e-2, alpha=0.5)
        self.base, self.new = tgp.fit(X[:n], Y[:n], p), (X[n:], Y[n:])
        self.up = tgp.partial_fit(self.base, *self.new)
        self.ref = tgp.fit(X, Y, p)

    def time_partial_fit_one_point(self, n):
        tgp.partial_fit(self.base, *self.new)

    def track_relative_difference_from_refit(self, n):
        return float(np.abs(self.up.Kxy_inv - self.ref.Kxy_inv).max() / np.abs(self.ref.Kxy_inv).max())

    track_relative_difference_from_refit.unit = "relative"
