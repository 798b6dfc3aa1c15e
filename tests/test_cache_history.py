"""Histories of processes sharing one Numba cache never break a later process (#67).

Deselected by default (minutes: every history starts from an empty cache); CI runs them as a step of
their own: ``python -m pytest -m history``.  ``FASTSM_HISTORY_SEED`` fixes the random orders (the seed
is printed with every failure), ``FASTSM_HISTORIES`` runs that many random histories (default 1), and
``FASTSM_KILL_AFTER`` lists the seconds after which a compiling process is killed (default ``6``).
The last two tests are #74's: the package's kernels edited, damaged, swapped or not saved between processes.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import cache_copies as copies
import pytest
from histories import README_COMPILES, ROOT, WORKLOADS, environment, finish, killed_while_compiling, run, script, start

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


# --- A cache that heals (#74): the package's own kernels edited, damaged, or not saved between processes ---

def _workload(package, cache, name="global_sm", file_size_limit=None):
    """Start workload ``name`` of the package in folder ``package`` on ``cache``; a finished process's result and
    fastsm's cache warnings come from :func:`_result`."""
    code = "import warnings\nwarnings.simplefilter('always')\n" + script(name)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/", env=copies.environment(package, cache),
                            preexec_fn=None if file_size_limit is None else copies.limit_file_size(file_size_limit))


def _result(proc) -> tuple[float, list[str]]:
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{err[-3000:]}"
    (line,) = [s for s in out.splitlines() if s.startswith("RESULT ")]
    return float(line.split()[1]), [s for s in err.splitlines() if "CacheWarning" in s]


def _against_a_fresh_cache(package, cache, fresh) -> float:
    """The workload on ``cache`` and, side by side, on the empty ``fresh``: the same result bitwise, no warning."""
    procs = [_workload(package, cache), _workload(package, fresh)]
    (value, warned), (reference, _) = map(_result, procs)
    assert value == reference and warned == [], (value, reference, warned)
    return value


def test_edits_between_processes(tmp_path):
    """An editable install's source changes under a filled cache (a ``git pull``).  On d4a9171: after an edit of
    ``points.point_data`` (linked into ``predict.predict_rows``, whose file did not change) the process printed the
    pre-edit result; after ``rbf.rbf_cross`` (called by symbol) gained an argument, every process failed with
    ``TypeError: Signature mismatch`` from the cached caller's Load."""
    package = copies.copy_package(tmp_path / "pkg")
    cache = tmp_path / "cache"
    before, _ = _result(_workload(package, cache))
    copies.edit(package, "_kernels/rbf.py", "def rbf_cross(A, Z, gamma, out):",
                "def rbf_cross(A, Z, gamma, out, gamma_scale):")
    copies.edit(package, "_kernels/rbf.py", "call(exp_neg_scaled, row, gamma, scratch[0], scratch[1])",
                "call(exp_neg_scaled, row, gamma * gamma_scale, scratch[0], scratch[1])")
    copies.edit(package, "_kernels/points.py", "call(rbf_cross, Xb, fit.X, fit.gamma_x, Kx)",
                "call(rbf_cross, Xb, fit.X, fit.gamma_x, Kx, 0.5)")
    copies.edit(package, "tgp/update.py", "rbf_cross(A, B, gamma, out)", "rbf_cross(A, B, gamma, out, 1.0)")
    signature = _against_a_fresh_cache(package, cache, tmp_path / "fresh1")
    copies.edit(package, "_kernels/points.py", "sumsq_rows(Hx, fit.kxx, fit.floor, eta_x)",
                "sumsq_rows(Hx, fit.kxx, fit.floor, eta_x)\n    eta_x *= 2.0")
    linked = _against_a_fresh_cache(package, cache, tmp_path / "fresh2")
    assert len({before, signature, linked}) == 3, (before, signature, linked)


def test_damaged_swapped_and_unsaved_entries(tmp_path):
    """Entries damaged as a crash or a power loss mid-write leaves them, and two entries of one signature swapped,
    in a filled cache; beside it, a process that cannot write a byte of its cache (a full disk).  On d4a9171 each
    damaged file failed every later process (UnpicklingError, invalid load key, EOFError, LLVM's bitcode parser),
    the swapped ``tri_rows.rows1``/``rows4`` aborted it (``malloc(): invalid size``), and the failed save raised
    ``OSError: [Errno 27] File too large`` from the first call."""
    cache, unsaved = tmp_path / "cache", tmp_path / "unsaved"
    procs = [_workload(ROOT, cache), _workload(ROOT, unsaved, file_size_limit=0)]
    (reference, _), (value, warned) = map(_result, procs)
    assert value == reference, (value, reference)
    assert len(warned) == 1 and str(unsaved) in warned[0] and "File too large" in warned[0], warned
    damaged = {}
    for kernel, how in (("predict.predict_rows", "truncated"), ("objectives.evaluate_rows", "zero-filled"),
                        ("hessian._assemble", "empty"), ("quasi_newton.next_iteration", "flipped")):
        (path,) = copies.data_files(cache, kernel)
        copies.damage(path, how)
        damaged[str(path)] = how
    copies.damage(copies.index_file(cache, "rbf.kernel_row"), "truncated")
    damaged[str(copies.index_file(cache, "rbf.kernel_row"))] = "index"
    (rows1,), (rows4,) = copies.data_files(cache, "tri_rows.rows1"), copies.data_files(cache, "tri_rows.rows4")
    copies.swap(rows1, rows4)
    value, warned = _result(_workload(ROOT, cache))
    assert value == reference, (value, reference)
    assert sorted(p for p in damaged if any(p in w for w in warned)) == sorted(damaged) and len(warned) == 5, warned
    assert _result(_workload(ROOT, cache)) == (reference, [])
