"""A copy of the package to edit between processes, and the files of a Numba cache to damage (#74).

``tests/test_cache.py`` adds three small kernel modules to a copy of the package (:data:`EXAMPLE`):
``weights`` is called by symbol, ``offset`` linked plainly, both from another file, and ``outer`` (a
third file) links ``total``, which calls both.  ``tests/test_cache_history.py`` edits the package's own
kernels in such a copy.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: module name (under fastsm._kernels) -> source
EXAMPLE: dict[str, str] = {
    "cache_example_callee": '''
        import numpy as np

        from fastsm.config import kernel


        @kernel(internal=True)
        def weights(x):
            out = np.empty_like(x)
            for i in range(x.shape[0]):
                out[i] = 2.0 * x[i]
            return out


        @kernel()
        def offset(x):
            return x[0] + 1.0
        ''',
    "cache_example_caller": '''
        from fastsm._kernels.cache_example_callee import offset, weights
        from fastsm._kernels.shared import call
        from fastsm.config import kernel


        @kernel()
        def total(x):
            return call(weights, x).sum() + offset(x)


        @kernel()
        def read(x, i):
            return x[i]
        ''',
    "cache_example_outer": '''
        from fastsm._kernels.cache_example_caller import total
        from fastsm.config import kernel


        @kernel()
        def outer(x):
            return 2.0 * total(x)
        ''',
}

#: Calls every example kernel (``read(x, i)`` with ``i`` from argv, default 1), then prints one JSON line: each
#: kernel's result (or the exception's class name), its cache hits and compiles, and fastsm's cache warnings.
RUN = textwrap.dedent('''
    import json, sys, warnings
    import numpy as np
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import fastsm
        from fastsm._kernels import cache_example_callee as a, cache_example_caller as b, cache_example_outer as c
        x = np.arange(1.0, 5.0)
        calls = {"outer": (c.outer, ()), "total": (b.total, ()), "offset": (a.offset, ()),
                 "read": (b.read, (int(sys.argv[1]) if len(sys.argv) > 1 else 1,))}
        result = {}
        for name, (kernel, args) in calls.items():
            try:
                result[name] = kernel(x, *args)
            except IndexError:
                result[name] = "IndexError"
    kernels = {"weights": a.weights, "offset": a.offset, "total": b.total, "read": b.read, "outer": c.outer}
    stats = {k: [sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values())] for k, d in kernels.items()}
    print(json.dumps({"result": result, "stats": stats, "module": fastsm.__file__,
                      "warnings": [f"{w.category.__name__}: {w.message}" for w in caught
                                   if w.category.__name__ == "CacheWarning"]}))
''')

def copy_package(dest: Path, example: bool = False) -> Path:
    """A copy of the package's sources under ``dest`` (``dest/fastsm``), with :data:`EXAMPLE` if ``example``;
    returns ``dest``, the folder to put on ``PYTHONPATH``."""
    shutil.copytree(ROOT / "fastsm", dest / "fastsm", ignore=shutil.ignore_patterns("__pycache__"))
    if example:
        for name, source in EXAMPLE.items():
            write_module(dest, name, source)
    return dest


def write_module(dest: Path, name: str, source: str) -> None:
    """Write kernel module ``fastsm._kernels.<name>`` of the copy in ``dest``."""
    (dest / "fastsm" / "_kernels" / f"{name}.py").write_text(textwrap.dedent(source).lstrip())


def edit(dest: Path, relpath: str, old: str, new: str) -> None:
    """Replace ``old`` (which must occur) by ``new`` in the copy's ``fastsm/<relpath>``."""
    path = dest / "fastsm" / relpath
    text = path.read_text()
    assert old in text, f"{old!r} not in {relpath}"
    path.write_text(text.replace(old, new))


def environment(copy: Path, cache: Path, **extra: str) -> dict:
    return dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(copy), PYTHONFAULTHANDLER="1", **extra)


def limit_file_size(limit: int):
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return set_limit


def start_example(copy: Path, cache: Path, *args: str, file_size_limit: int | None = None,
                  **extra: str) -> subprocess.Popen:
    """:data:`RUN` in a fresh process on the copy and cache (in ``/``, so only ``PYTHONPATH`` finds the package)."""
    return subprocess.Popen([sys.executable, "-c", RUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment(copy, cache, **extra), cwd="/",
                            preexec_fn=None if file_size_limit is None else limit_file_size(file_size_limit))


def example_result(proc: subprocess.Popen, copy: Path) -> dict:
    """The JSON line of :func:`start_example`'s process; fails unless it exits 0."""
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{err[-3000:]}"
    result = json.loads(out.strip().splitlines()[-1])
    assert Path(result["module"]).is_relative_to(copy), result["module"]
    return result


def run_example(copy: Path, cache: Path, *args: str, **options) -> dict:
    """:func:`start_example` and its :func:`example_result`."""
    return example_result(start_example(copy, cache, *args, **options), copy)


def data_files(cache: Path, kernel: str) -> list[Path]:
    """The data files of ``kernel`` (a module-qualified name such as ``cache_example_caller.total``)."""
    return sorted(cache.rglob(f"{kernel}-*.nbc"))


def index_file(cache: Path, kernel: str) -> Path:
    (path,) = cache.rglob(f"{kernel}-*.nbi")
    return path


#: name -> how a file is damaged (what a crash, a full disk or a power loss mid-write leaves)
DAMAGE = {
    "truncated": lambda b: b[: len(b) // 2],
    "zero-filled": lambda b: bytes(len(b)),
    "empty": lambda b: b"",
    "flipped": lambda b: b[: len(b) // 2] + bytes(x ^ 0xFF for x in b[len(b) // 2: len(b) // 2 + 64])
    + b[len(b) // 2 + 64:],
}


def damage(path: Path, how: str) -> None:
    path.write_bytes(DAMAGE[how](path.read_bytes()))


def swap(a: Path, b: Path) -> None:
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
