"""asv benchmarks of the batched TGP objective and prediction.

``setup`` warms the JIT (asv runs ``setup_cache`` in another process, so the
warm-up must happen here); ``track_*`` report quality figures (GFLOP/s,
fraction of the machine's DGEMM rate) rather than times.
"""

from fastsm import tgp

try:
    from fastsm.cli import bench
except ImportError:  # commits before the commands moved to fastsm.cli
    from fastsm import bench


class BatchedObjective:
    params = [250, 1000, 2000]
    param_names = ["N"]
    timeout = 300

    def setup(self, n):
        self.model, self.X, self.Y = bench.make_problem(n)
        self.ev = bench.BatchedObjective(self.model, self.X, self.Y)
        self.ev()

    def time_sm_objective_B_eq_N(self, n):
        self.ev()

    def track_gflops(self, n):
        return self.ev.flops / bench.best_of(self.ev, 3) / 1e9

    track_gflops.unit = "GFLOP/s"

    def track_fraction_of_dgemm(self, n):
        return self.track_gflops(n) / bench.dgemm_gflops(n, n, None)

    track_fraction_of_dgemm.unit = "ratio"


class Predict:
    params = [250, 1000]
    param_names = ["N"]
    timeout = 300

    def setup(self, n):
        self.model, self.X, _ = bench.make_problem(n, n_test=256)
        self.Y0 = tgp.predict(self.model, self.X, method="kl").y

    def time_predict_sm_256_points(self, n):
        tgp.predict(self.model, self.X, method="sm", init=self.Y0)


class WholePrediction:
    """Whole SMTGP predictions (every evaluation of the optimiser, not one batched call)."""

    params = ([1000, 2000], [200, 1000])
    param_names = ["N", "B"]
    timeout = 600

    def setup(self, n, b):
        self.seconds, self.pred, self.model, self.X, self.Y0 = bench.whole_prediction(n, b, None, repeat=1)

    def time_whole_prediction(self, n, b):
        tgp.predict(self.model, self.X, method="sm", init=self.Y0)

    def track_ms_per_point(self, n, b):
        return self.seconds / b * 1e3

    track_ms_per_point.unit = "ms"

    def track_gflops(self, n, b):
        t, pred, *_ = bench.whole_prediction(n, b, None, repeat=2)
        return 4.0 * n * n * pred.n_eval.sum() / t / 1e9

    track_gflops.unit = "GFLOP/s"

    def track_fraction_of_dgemm(self, n, b):
        return self.track_gflops(n, b) / bench.dgemm_gflops(n, b, None)

    track_fraction_of_dgemm.unit = "ratio"

    def track_evaluations_per_point(self, n, b):
        return float(self.pred.n_eval.mean())

    track_evaluations_per_point.unit = "evaluations"


class Divergences:
    params = [200, 1000]
    param_names = ["d"]

    def setup(self, d):
        import numpy as np

        rng = np.random.default_rng(0)
        A, B = rng.normal(size=(2, d, d))
        self.args = (np.zeros(d), A @ A.T / d + np.eye(d), np.full(d, 0.1), B @ B.T / d + np.eye(d))
        from fastsm import divergences

        self.div = divergences
        self.div.sm(*self.args, 0.5, 0.5)
        self.div.sm(*self.args, 0.5, 0.5, form="nielsen")

    def time_sm_lemma_3_1(self, d):
        self.div.sm(*self.args, 0.5, 0.5)

    def time_sm_nielsen(self, d):
        self.div.sm(*self.args, 0.5, 0.5, form="nielsen")


def timeraw_import_and_first_predict():
    """Cold first-call latency (import + cache load or compile)."""
    return """
from fastsm import datasets, tgp
Xtr, Xte, Ytr, _ = datasets.toy1(n_train=100, n_test=10)
tgp.predict(tgp.fit(Xtr, Ytr), Xte)
"""


class EvaluationsPerPoint:
    """A user's ``tgp.predict(model, X, method="sm")``: its start (KLTGP) and SMTGP's own evaluations.

    N = 1000, 200 test points, dy as the parameter (#31: fewer evaluations at equal quality).
    """

    params = [1, 2, 16, 60]
    param_names = ["dy"]
    timeout = 300

    def setup(self, dy):
        from fastsm import config

        self.model, self.X, _ = bench.make_problem(1000, dy, n_test=200)
        # the start as predict computes it (commits before SM_START_ITER ran KLTGP to convergence)
        self.start = tgp.predict(self.model, self.X, method="kl",
                                 max_iter=getattr(config, "SM_START_ITER", config.DEFAULT_MAX_ITER))
        self.pred = tgp.predict(self.model, self.X, method="sm")

    def time_predict_sm_default_start(self, dy):
        tgp.predict(self.model, self.X, method="sm")

    def track_evaluations_per_point(self, dy):
        return float(self.start.n_eval.mean() + self.pred.n_eval.mean())

    track_evaluations_per_point.unit = "evaluations"

    def track_converged_share(self, dy):
        return float(self.pred.converged.mean())

    track_converged_share.unit = "share"
