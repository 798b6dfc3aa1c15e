"""asv benchmarks of KLIEP importance weights ([CS] §III; benchmarks/shift_peers.py is the full comparison).

Fixed sigma = 0.3 on the [CS] §III-D toy with n_tr = n_te = n, every test
point a centre.  ``track_*`` report the duality gap reached and the sparsity,
so that a change of accuracy shows in the history beside the times.
``Peers`` times densratio's KLIEP when it is installed (``.[peers]``).
"""

from fastsm import datasets, shift

SIGMA = 0.3


class KLIEP:
    params = ([300, 2000], ["pfw", "afw", "fw", "pg"])
    param_names = ["n", "solver"]
    timeout = 300

    def setup(self, n, solver):
        d = datasets.covariate_shift_toy(n_train=n, n_test=n, seed=0)
        self.Xtr, self.Xte = d.X_train, d.X_test
        self.iw = self.fit(solver)  # compiles or loads the kernels

    def fit(self, solver):
        return shift.estimate_weights(self.Xtr, self.Xte, solver=solver, sigma=SIGMA, tol=1e-8)

    def time_estimate_weights_polished(self, n, solver):
        self.fit(solver)

    def track_duality_gap(self, n, solver):
        return self.iw.gap

    track_duality_gap.unit = "gap"

    def track_nonzero(self, n, solver):
        return self.iw.n_nonzero

    track_nonzero.unit = "coefficients"


class Unpolished:
    params = ([300, 2000], ["pfw", "afw", "fw"])
    param_names = ["n", "solver"]
    timeout = 300

    def setup(self, n, solver):
        d = datasets.covariate_shift_toy(n_train=n, n_test=n, seed=0)
        self.Xtr, self.Xte = d.X_train, d.X_test
        self.iw = self.fit(solver)

    def fit(self, solver):
        return shift.estimate_weights(self.Xtr, self.Xte, solver=solver, sigma=SIGMA, polish=False, tol=0.0,
                                      max_iter=1000)

    def time_1000_iterations(self, n, solver):
        self.fit(solver)

    def track_gap_after_1000_iterations(self, n, solver):
        return self.iw.gap

    track_gap_after_1000_iterations.unit = "gap"


class Peers:
    params = [300, 2000]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        try:
            from densratio import densratio
        except ImportError:
            raise NotImplementedError("densratio is not installed (pip install fastsm[peers])") from None
        d = datasets.covariate_shift_toy(n_train=n, n_test=n, seed=0)
        self.run = lambda: densratio(d.X_test, d.X_train, method="KLIEP", sigma=SIGMA, kernel_num=n, verbose=False)
        self.Xtr, self.Xte = d.X_train, d.X_test

    def time_densratio_kliep(self, n):
        self.run()

    def time_fastsm_pg(self, n):
        shift.estimate_weights(self.Xtr, self.Xte, solver="pg", sigma=SIGMA, polish=False)
