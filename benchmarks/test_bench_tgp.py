"""pytest-benchmark suite (skipped by default; run: ``pytest benchmarks -o addopts=""``).

pytest-benchmark does not warm up by itself: each benchmark calls its
function once before ``benchmark()``.
"""

import pytest

from fastsm import divergences, reference, tgp
from fastsm.cli import bench


@pytest.mark.parametrize("n", [250, 1000, 2000])
def test_batched_sm_objective(benchmark, n):
    model, X, Y = bench.make_problem(n)
    ev = bench.BatchedObjective(model, X, Y)
    ev()
    benchmark(ev)
    benchmark.extra_info["gflops"] = ev.flops / benchmark.stats["min"] / 1e9


@pytest.mark.parametrize("n", [250, 1000])
def test_predict_fast_vs_reference(benchmark, n):
    model, X, _ = bench.make_problem(n, n_test=16)
    Y0 = tgp.predict(model, X, method="kl").y
    tgp.predict(model, X, method="sm", init=Y0)
    benchmark(tgp.predict, model, X, method="sm", init=Y0, max_iter=2000, tol=1e-10)
    benchmark.extra_info["reference_s"] = bench.best_of(
        lambda: reference.tgp.predict(model, X, method="sm", init=Y0, max_iter=2000, tol=1e-10), 1)


@pytest.mark.parametrize("form", ["cholesky", "nielsen"])
@pytest.mark.parametrize("d", [200, 1000])
def test_sm_divergence_forms(benchmark, form, d):
    import numpy as np

    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(2, d, d))
    args = (np.zeros(d), A @ A.T / d + np.eye(d), np.zeros(d), B @ B.T / d + np.eye(d))
    divergences.sm(*args, 0.5, 0.5, form=form)
    benchmark(divergences.sm, *args, 0.5, 0.5, form=form)
