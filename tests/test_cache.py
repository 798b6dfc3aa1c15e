"""A cache that heals (#74): the key covers every source a kernel's code comes from and the settings that
change it; an entry that cannot be used is a miss, compiled again and replaced; a save that fails leaves
the kernel running from memory.

Each scenario runs small kernels (:data:`cache_copies.EXAMPLE`, three files of a copy of the package) in
fresh processes on a fresh cache, and compares every answer with the one a fresh cache gives: marker
``history`` (deselected by default, CI's history step runs them, ~40 s), beside the same scenarios on the
package's own kernels in ``tests/test_cache_history.py``.
"""

from __future__ import annotations

import importlib
import sys

import pytest
from cache_copies import (
    copy_package,
    damage,
    data_files,
    edit,
    example_result,
    index_file,
    run_example,
    start_example,
    swap,
    write_module,
)

import fastsm

#: The example's results on ``arange(1, 5)``: ``outer = 2 total``, ``total = 2 * 10 + offset``
RESULTS = {"outer": 44.0, "total": 22.0, "offset": 2.0, "read": 2.0}


@pytest.fixture
def copy(tmp_path):
    return copy_package(tmp_path / "pkg", example=True)


def _against_a_fresh_cache(copy, cache, fresh, *args, **options) -> dict:
    """The example on ``cache`` and, side by side, on the empty ``fresh``: the same results, no cache warning."""
    procs = [start_example(copy, cache, *args, **options), start_example(copy, fresh, *args, **options)]
    out, reference = (example_result(p, copy) for p in procs)
    assert out["result"] == reference["result"] and out["warnings"] == [], (out, reference)
    return out


def _all_hits(out: dict) -> bool:
    return all(misses == 0 for _, misses in out["stats"].values()) and out["warnings"] == []


@pytest.mark.history
def test_an_edit_of_a_linked_kernel_in_another_file_is_a_miss(copy, tmp_path):
    """``offset`` is linked into ``total`` and ``outer``, whose files do not change; on d4a9171 (Numba's key: the
    kernel's own file) the later process gave the pre-edit 44.0 and 22.0."""
    cache = tmp_path / "cache"
    assert run_example(copy, cache)["result"] == RESULTS
    edit(copy, "_kernels/cache_example_callee.py", "x[0] + 1.0", "x[0] + 3.0")
    after = _against_a_fresh_cache(copy, cache, tmp_path / "fresh")
    assert after["result"] == dict(RESULTS, outer=48.0, total=24.0, offset=4.0)
    assert after["stats"]["outer"] == [0, 1]
    assert _all_hits(run_example(copy, cache))


@pytest.mark.history
def test_a_callee_whose_signature_changed_is_a_miss(copy, tmp_path):
    """``weights`` (called by symbol) gains an argument, and its caller ``total`` is updated; ``outer``'s file does
    not change.  On d4a9171 every later process failed: ``TypeError: Signature mismatch`` from the cached
    ``outer``'s Load of ``weights``."""
    cache = tmp_path / "cache"
    assert run_example(copy, cache)["result"] == RESULTS
    edit(copy, "_kernels/cache_example_callee.py", "def weights(x):", "def weights(x, s):")
    edit(copy, "_kernels/cache_example_callee.py", "2.0 * x[i]", "s * x[i]")
    edit(copy, "_kernels/cache_example_caller.py", "call(weights, x)", "call(weights, x, 3.0)")
    after = _against_a_fresh_cache(copy, cache, tmp_path / "fresh")
    assert after["result"] == dict(RESULTS, outer=64.0, total=32.0)
    assert _all_hits(run_example(copy, cache))


@pytest.mark.history
def test_damaged_files_are_misses_with_one_warning_each(copy, tmp_path):
    """Each damage a crash, a full disk or a power loss mid-write leaves, to a data file of its own kernel, and an
    index cut short.  On d4a9171 each failed every later process (UnpicklingError, invalid load key, EOFError, or
    LLVM's bitcode parser), naming no file."""
    cache = tmp_path / "cache"
    run_example(copy, cache)
    damaged = {}
    for kernel, how in (("outer", "truncated"), ("weights", "zero-filled"), ("read", "empty"), ("offset", "flipped")):
        module = "cache_example_callee" if kernel in ("weights", "offset") else (
            "cache_example_outer" if kernel == "outer" else "cache_example_caller")
        (path,) = data_files(cache, f"{module}.{kernel}")
        damage(path, how)
        damaged[kernel] = str(path)
    damaged["total"] = str(index_file(cache, "cache_example_caller.total"))
    damage(index_file(cache, "cache_example_caller.total"), "truncated")
    out = run_example(copy, cache)
    assert out["result"] == RESULTS
    assert all(out["stats"][k][1] == 1 for k in damaged), out["stats"]
    assert len(out["warnings"]) == len(damaged), out["warnings"]
    for kernel, path in damaged.items():
        (warning,) = [w for w in out["warnings"] if path in w]
        assert "compiled again" in warning and f"of {kernel} " in warning
    assert _all_hits(run_example(copy, cache))


@pytest.mark.history
def test_entries_of_one_signature_swapped_are_misses(copy, tmp_path):
    """``total`` and ``outer`` take the same argument types; their data files swapped (as two processes writing at
    once can leave them) are each compiled again, silently.  On d4a9171 the process gave ``total``'s 22.0 for
    ``outer``; ``tri_rows.rows1`` and ``rows4`` swapped so aborted every later process (``malloc(): invalid
    size``)."""
    cache = tmp_path / "cache"
    run_example(copy, cache)
    (a,) = data_files(cache, "cache_example_caller.total")
    (b,) = data_files(cache, "cache_example_outer.outer")
    swap(a, b)
    out = run_example(copy, cache)
    assert out["result"] == RESULTS and out["warnings"] == []
    assert out["stats"]["outer"] == [0, 1] and out["stats"]["total"] == [0, 1]
    assert _all_hits(run_example(copy, cache))


@pytest.mark.history
def test_a_save_that_fails_runs_from_memory_with_one_warning(copy, tmp_path):
    """No byte can be written (a file-size limit of 0: ``OSError: [Errno 27] File too large``, what a full disk
    gives too).  On d4a9171 the first call raised it from Numba's ``save_overload``, after compiling."""
    cache = tmp_path / "cache"
    out = run_example(copy, cache, file_size_limit=0)
    assert out["result"] == RESULTS
    (warning,) = out["warnings"]
    assert str(cache) in warning and "NUMBA_CACHE_DIR" in warning and "File too large" in warning
    assert list(cache.rglob("*.nbc")) == []
    later = run_example(copy, cache)
    assert later["result"] == RESULTS and later["stats"]["outer"] == [0, 1] and later["warnings"] == []


@pytest.mark.history
def test_bounds_checking_is_in_the_key(copy, tmp_path):
    """A process with ``NUMBA_BOUNDSCHECK=1`` gets checked code, whatever the cache holds; on d4a9171 it loaded the
    unchecked entry and read past the array."""
    cache = tmp_path / "cache"
    run_example(copy, cache, "1")
    checked = run_example(copy, cache, "10", NUMBA_BOUNDSCHECK="1")
    assert checked["result"]["read"] == "IndexError" and checked["stats"]["read"] == [0, 1]
    assert _all_hits(run_example(copy, cache, "2"))


@pytest.mark.history
def test_an_index_keeps_one_generation_of_the_sources(copy, tmp_path):
    """Saving after an edit drops the entries of the earlier sources: the cache does not grow with every pull."""
    cache = tmp_path / "cache"
    for value in ("1.0", "2.0", "3.0"):
        edit(copy, "_kernels/cache_example_callee.py", "x[0] + 1.0", f"x[0] + {value}")
        run_example(copy, cache)
        edit(copy, "_kernels/cache_example_callee.py", f"x[0] + {value}", "x[0] + 1.0")
    assert len(data_files(cache, "cache_example_outer.outer")) == 1


def test_the_key_covers_every_kernel_and_what_kernel_modules_import(tmp_path):
    """Every kernel of the package, and every fastsm module a kernel module imports from, is one of the digest's
    files (:data:`fastsm._cache.KERNEL_SOURCES`); a file added to ``_kernels`` joins it."""
    from fastsm._cache import KERNEL_SOURCES, Kernel, kernel_source_files

    sources = set(kernel_source_files())
    package = fastsm.__path__[0]

    def source(module) -> str:
        return module.__file__[len(package) + 1:]

    modules = [importlib.import_module(f"fastsm._kernels.{f[len('_kernels/'):-3]}") for f in sources
               if f.startswith("_kernels/") and not f.endswith("__init__.py")]
    modules += [sys.modules["fastsm._lapack"]] if "fastsm._lapack" in sys.modules else []
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("fastsm") and getattr(module, "__file__", None):
            for value in vars(module).values():
                if isinstance(value, Kernel):
                    assert source(sys.modules[value.py_func.__module__]) in sources, value
    for module in modules:
        for value in vars(module).values():
            home = value.py_func.__module__ if isinstance(value, Kernel) else (
                value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None))
            if isinstance(home, str) and home.startswith("fastsm") and home in sys.modules:
                assert source(sys.modules[home]) in sources, (module.__name__, home)
    assert {"config.py", "_cache.py", "_lapack.py"} <= sources and "_kernels" in KERNEL_SOURCES
    copy = copy_package(tmp_path / "pkg")
    write_module(copy, "zz_new", "X = 1\n")
    assert "_kernels/zz_new.py" in kernel_source_files(str(copy / "fastsm"))
