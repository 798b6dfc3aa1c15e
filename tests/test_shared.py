"""Kernels called by symbol (:mod:`fastsm._kernels.shared`): compiled once, not linked into their callers,
and found again by a caller loaded from Numba's cache (#54)."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba.core import types

from fastsm._cache import StaleEntry, pack_entry, symbol, unpack_entry
from fastsm._kernels.shared import Load

MODULE = textwrap.dedent("""
    import numpy as np

    from fastsm._kernels.shared import call
    from fastsm.config import kernel


    @kernel(internal=True)
    def scaled_rows(X, s):
        if s.shape[0] != X.shape[0]:
            raise ValueError("s: one scale per row")
        out = np.empty_like(X)
        for i in range(X.shape[0]):
            for j in range(X.shape[1]):
                out[i, j] = X[i, j] * s[i]
        return out


    @kernel()
    def scaled_total(X, s):
        return call(scaled_rows, X, s).sum()


    @kernel()
    def outer(X, s):
        return 2.0 * scaled_total(X, s)  # links scaled_total, and so declares scaled_rows' symbol
""")

RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import shared_example as ex
    X = np.arange(12.0).reshape(4, 3)
    entry = getattr(ex, sys.argv[1] if len(sys.argv) > 1 else "scaled_total")
    total = entry(X, np.array([1.0, 0.5, 0.25, 2.0]))
    stats = lambda k: (sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()))
    print(repr(total), *stats(entry), *stats(ex.scaled_rows))
""")

EXPECTED = float((np.arange(12.0).reshape(4, 3) * np.array([1.0, 0.5, 0.25, 2.0])[:, None]).sum())


@pytest.fixture
def example(tmp_path, monkeypatch):
    """The module above, in a folder of its own (its Numba cache with it, unless NUMBA_CACHE_DIR says otherwise)."""
    (tmp_path / "shared_example.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shared_example", raising=False)
    import shared_example

    return tmp_path, shared_example


def _process(folder, env, entry="scaled_total") -> tuple[float, int, int, int, int]:
    """``(total, caller's cache hits, caller's compiles, callee's cache hits, callee's compiles)`` of a fresh
    process calling ``entry``."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-c", RUN, entry], capture_output=True, text=True, timeout=600,
                         cwd=folder, env=dict(env, PYTHONPATH=os.pathsep.join([str(folder), root])))
    assert run.returncode == 0, run.stderr[-2000:]
    total, *counts = run.stdout.split()
    return (float(total), *map(int, counts))  # type: ignore[return-value]


def test_a_caller_holds_a_declaration_not_a_copy(example):
    _, ex = example
    X = np.arange(12.0).reshape(4, 3)
    assert ex.scaled_total(X, np.array([1.0, 0.5, 0.25, 2.0])) == EXPECTED
    (ir,) = ex.scaled_total.inspect_llvm().values()
    argtypes = next(iter(ex.scaled_rows.overloads))
    name = symbol("shared_example", "scaled_rows", argtypes)
    assert re.search(rf'declare i32 @"?{re.escape(name)}"?\(', ir)
    assert "scaled_rows" not in ir.replace(name, "")  # no definition, no other reference


def test_a_callee_error_reaches_python(example):
    _, ex = example
    with pytest.raises(ValueError, match="one scale per row"):
        ex.scaled_total(np.ones((4, 3)), np.ones(3))


def test_a_cached_caller_finds_its_callee(example, tmp_path):
    """A process loading the caller from the cache compiles or loads the callee first; one that compiled both
    and one that rebuilt a removed callee agree with the one that loaded both."""
    folder, _ = example
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    cold = _process(folder, env)
    assert cold == (EXPECTED, 0, 1, 0, 1)
    assert _process(folder, env) == (EXPECTED, 1, 0, 1, 0)
    removed = [p for p in (tmp_path / "numba").rglob("*scaled_rows*")]
    assert removed
    for p in removed:
        p.unlink()
    assert _process(folder, env) == (EXPECTED, 1, 0, 0, 1)


def test_a_callee_returning_another_type_is_refused(example):
    _, ex = example
    X = np.arange(12.0).reshape(4, 3)
    ex.scaled_total(X, np.ones(4))
    argtypes = next(iter(ex.scaled_rows.overloads))
    Load("shared_example", "scaled_rows", argtypes, ex.scaled_rows.overloads[argtypes].signature.return_type)()
    with pytest.raises(StaleEntry, match="compiled again"):
        Load("shared_example", "scaled_rows", argtypes, types.float64)()


def test_a_kernel_linking_a_cached_caller_inherits_its_loads(example, tmp_path):
    """#67: ``outer`` compiled in a process that loaded ``scaled_total`` from the cache links code that declares
    ``scaled_rows``' symbol; cached without ``scaled_rows``' Load, a third process loading ``outer`` died
    (SIGSEGV, or LLVM's "Symbol not found" abort) on 8cc7b4a."""
    folder, _ = example
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert _process(folder, env) == (EXPECTED, 0, 1, 0, 1)
    assert _process(folder, env, "outer") == (2 * EXPECTED, 0, 1, 1, 0)
    assert _process(folder, env, "outer") == (2 * EXPECTED, 1, 0, 1, 0)


def _rewrite_entries(cache: Path, pattern: str, edit) -> int:
    """Apply ``edit`` to the payload of every data file matching ``pattern``, keeping each a well-formed entry of
    its key (:func:`fastsm._cache.pack_entry`); returns how many."""
    files = sorted(cache.rglob(pattern))
    for path in files:
        tag, body = unpack_entry(path.read_bytes(), str(path))
        path.write_bytes(pack_entry(tag, pickle.dumps(edit(pickle.loads(body)), protocol=-1)))
    return len(files)


def test_an_entry_without_its_loads_is_compiled_again(example, tmp_path):
    """A cache entry whose code declares a symbol none of its Loads registers (as 8cc7b4a wrote them) is a cache
    miss: compiled again and replaced, never handed to LLVM's linker."""
    folder, _ = example
    cache = tmp_path / "numba"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    _process(folder, env, "outer")
    assert _rewrite_entries(cache, "*outer*.nbc", lambda p: (*p[:7], [], *p[8:])) == 1
    assert _process(folder, env, "outer") == (2 * EXPECTED, 0, 1, 1, 0)
    assert _process(folder, env, "outer") == (2 * EXPECTED, 1, 0, 1, 0)


def test_a_data_file_of_another_signature_is_a_miss(example, tmp_path):
    """Two processes compiling two signatures of one kernel at once can leave Numba's index naming the other
    one's data file: such an entry is compiled again (its tag is another key's), not called with the wrong
    types, and silently: nothing is damaged."""
    folder, _ = example
    cache = tmp_path / "numba"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    _process(folder, env)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-c", "import numpy as np, shared_example as ex; "
                          "ex.scaled_total(np.ones((2, 2), dtype=np.float32), np.ones(2, dtype=np.float32))"],
                         cwd=folder, env=dict(env, PYTHONPATH=os.pathsep.join([str(folder), root])), timeout=600)
    assert run.returncode == 0
    first, second = sorted(cache.rglob("*scaled_total*.nbc"))
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    assert _process(folder, env) == (EXPECTED, 0, 1, 1, 0)
