"""Histories of processes sharing one Numba cache never break a later process (#67).

Deselected by default (minutes: every history starts from an empty cache); CI runs them as a step of
their own: ``python -m pytest -m history``.  ``FASTSM_HISTORY_SEED`` fixes the random orders (the seed
is printed with every failure), ``FASTSM_HISTORIES`` runs that many random histories (default 1), and
``FASTSM_KILL_AFTER`` lists the seconds after which a compiling process is killed (default ``6``).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from histories import README_COMPILES, WORKLOADS, environment, finish, killed_while_compiling, run, start

pytestmark = pytest.mark.history


def _check(results: dict, name: str, value: float) -> None:
    """Every process of one workload gives the same result (cold, warm, after any other workload)."""
    first = results.setdefault(name, value)
    assert value == pytest.approx(first, rel=1e-9, abs=1e-12), f"{name}: {value!r} after {first!r}"


def test_recipe_global_then_knn_twice(tmp_path):
    """#67 recipe 1: on 8cc7b4a the third process aborted ("LLVM ERROR: Symbol not found: fastsm.rows1...")."""
    results: dict = {}
    for name in ("global_sm", "knn_none_sm", "knn_none_sm"):
        _check(results, name, run(name, tmp_path))


def test_recipe_region_after_kl_ikl_and_knn(tmp_path):
    """#67 recipe 2: on 8cc7b4a the third process died by SIGSEGV in twin_factors, which calls nothing by symbol
    (it links gram_upper, loaded from the cache in the second process without its Load of exp_neg_scaled)."""
    results: dict = {}
    for name in ("global_kl_ikl", "knn_exact_kl", "region_sm"):
        _check(results, name, run(name, tmp_path))


@pytest.mark.parametrize("history", range(int(os.environ.get("FASTSM_HISTORIES", "1"))))
def test_random_orders_of_workloads(tmp_path, history):
    """Every workload in a random order, then all of them again in another order, one process each: every process
    ends well and agrees with the workload's earlier runs."""
    seed = int(os.environ.get("FASTSM_HISTORY_SEED", random.randrange(2**31))) + history
    rng = random.Random(seed)
    names = list(WORKLOADS)
    order = rng.sample(names, len(names)) + rng.sample(names, len(names))
    results: dict = {}
    for step, name in enumerate(order):
        try:
            _check(results, name, run(name, tmp_path))
        except AssertionError as err:
            raise AssertionError(f"history seed {seed}, step {step} of {order}: {err}") from None


def test_first_calls_of_processes_started_together(tmp_path):
    """Four processes started at once into one empty cache (they compile and write the same kernels, and
    other signatures of some), then each again."""
    names = ["global_sm", "knn_exact_kl", "region_sm", "weighted_sm"]
    results: dict = {}
    for _ in range(2):
        procs = [(name, start(name, tmp_path)) for name in names]
        for name, proc in procs:
            _check(results, name, finish(proc, name))


def test_a_process_killed_while_compiling(tmp_path):
    """A process killed during its first compile (``FASTSM_KILL_AFTER`` seconds in, each on an empty cache of its
    own; default 6), then normal processes on the cache it left."""
    results: dict = {}
    for after in map(float, os.environ.get("FASTSM_KILL_AFTER", "6").split(",")):
        cache = tmp_path / f"after{after:g}"
        assert killed_while_compiling("region_sm", cache, after) == -9
        _check(results, "region_sm", run("region_sm", cache))
        _check(results, "global_sm", run("global_sm", cache))


def test_compile_covers_the_readme(tmp_path):
    """After ``python -m fastsm compile`` the README's snippet compiles no kernel (#67: its single-pair
    ``divergences.sm`` came with read-only arrays, another signature, about 10 s in every new cache)."""
    env = environment(tmp_path)
    done = subprocess.run([sys.executable, "-m", "fastsm", "compile"], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    run = subprocess.run([sys.executable, "-c", README_COMPILES], capture_output=True, text=True, env=env,
                         timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("COMPILED")] == []
