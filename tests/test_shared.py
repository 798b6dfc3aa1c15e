"""Kernels called by symbol (:mod:`fastsm._kernels.shared`): compiled once, not linked into their callers,
and found again by a caller loaded from Numba's cache (#54)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba.core import types

from fastsm._kernels.shared import Load, symbol

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
""")

RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import shared_example as ex
    X = np.arange(12.0).reshape(4, 3)
    total = ex.scaled_total(X, np.array([1.0, 0.5, 0.25, 2.0]))
    stats = lambda k: (sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()))
    print(repr(total), *stats(ex.scaled_total), *stats(ex.scaled_rows))
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


def _process(folder, env) -> tuple[float, int, int, int, int]:
    """``(total, caller's cache hits, caller's compiles, callee's cache hits, callee's compiles)`` of a fresh
    process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=600, cwd=folder,
                         env=dict(env, PYTHONPATH=os.pathsep.join([str(folder), root])))
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
    with pytest.raises(RuntimeError, match="clear the cache"):
        Load("shared_example", "scaled_rows", argtypes, types.float64)()
