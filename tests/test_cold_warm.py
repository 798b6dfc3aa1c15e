"""Kernels compiled in the process and kernels loaded from Numba's cache compute bitwise alike.

The difference this guards against comes from Numba's code generation (what LLVM may do with the
fast-math flags around inlined code), not from the BLAS: the BLAS is the same in both processes of
a run.  So it runs once, in the main test run, not under every OpenBLAS kernel family with the
``determinism`` marker.  Where this test process compiled the kernels itself (a clean clone: CI's
main run), one process loading them from the cache is compared with it; otherwise a process
compiling them into an empty cache and one loading them from that cache are compared (about
170 s on the 2-core CI machine, most of it compiling).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

CODE = textwrap.dedent("""
    import hashlib
    import sys

    import numpy as np
    from numba.core.dispatcher import Dispatcher

    from fastsm import datasets, tgp
    from fastsm.shift import estimate_weights


    def digest():
        X, Xt, Y, _ = datasets.toy1(0, n_train=150, n_test=60)
        m = tgp.fit(X, Y)
        X8, Xt8, Y8, _ = datasets.random_structured(0, n_train=300, n_test=60, dx=10, dy=8)
        m8 = tgp.fit(X8, Y8, tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3))
        h = hashlib.sha256()
        for meth in ("kl", "ikl", "sm"):
            h.update(tgp.predict(m, Xt, method=meth).y.tobytes())
            h.update(tgp.loo_predict(m, method=meth).y.tobytes())
            h.update(tgp.predict(m8, Xt8, method=meth).y.tobytes())  # dy = 8: differed under reassoc or contract
        for seed in (1, 2):  # the KLIEP solvers and the polish (a split polish once differed, 1e-13)
            rng = np.random.default_rng(seed)
            Xtr, Xte = rng.normal(size=(300, 2)), rng.normal(0.5, 0.7, size=(200, 2))
            for solver in ("fw", "afw", "pfw", "pg"):
                h.update(estimate_weights(Xtr, Xte, sigma=0.5, solver=solver, max_iter=300).weights.tobytes())
        return h.hexdigest()


    def cache_counts():
        \"\"\"``(loaded, compiled)``: signatures of fastsm's kernels this process loaded from Numba's
        cache and compiled itself.\"\"\"
        seen, loaded, compiled = set(), 0, 0
        for name, mod in list(sys.modules.items()):
            if not name.startswith("fastsm"):
                continue
            for obj in vars(mod).values():
                if isinstance(obj, Dispatcher) and id(obj) not in seen:
                    seen.add(id(obj))
                    loaded += sum(obj.stats.cache_hits.values())
                    compiled += sum(obj.stats.cache_misses.values())
        return loaded, compiled
""")


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _process(env: dict) -> tuple[str, int, int]:
    """The digest and cache counts of a fresh process."""
    run = subprocess.run([sys.executable, "-c", CODE + "\nh = digest()\nprint(h, *cache_counts())"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    h, loaded, compiled = run.stdout.split()[-3:]
    return h, int(loaded), int(compiled)


def test_a_cold_and_a_warm_process_agree(tmp_path):
    """Kernels compiled in the process and kernels loaded from Numba's cache compute bitwise alike.

    With fast-math ``arcp`` and ``reassoc`` together they did not: leave-one-out SMTGP differed by up to
    3.6e-4 between the first process (compiling) and the next (cache), see ``fastsm.config``.  The KLIEP
    polish with its step-and-renormalise as a kernel of its own (not inlined) differed by 1e-13.
    """
    root = ROOT
    here: dict = {}
    exec(compile(CODE, "cold_warm", "exec"), here)
    h_here = here["digest"]()
    loaded_here, compiled_here = here["cache_counts"]()
    if loaded_here == 0 and compiled_here > 0:  # every kernel compiled by this process: one warm process
        h, loaded, compiled = _process(dict(os.environ, PYTHONPATH=root))
        if compiled == 0:
            assert loaded > 0
            assert h == h_here
            return
    # the cold process compiles every kernel itself: no first-run helper compiling half of them for it
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=root, FASTSM_COMPILE_HELPER="0")
    h_cold, loaded_cold, compiled_cold = _process(env)
    h_warm, loaded_warm, compiled_warm = _process(env)
    assert loaded_cold == 0 and compiled_cold > 0
    assert compiled_warm == 0 and loaded_warm > 0
    assert h_cold == h_warm == h_here


UNCACHED = textwrap.dedent("""
    import warnings
    from numba.core import caching
    (getattr(caching, "CacheImpl", None) or caching._CacheImpl)._locator_classes = []  # a read-only install
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import numpy as np
        from fastsm import divergences
        value = divergences.kl(np.zeros(2), np.eye(2), np.ones(2), 2 * np.eye(2))
    ours = [str(w.message) for w in caught if "NUMBA_CACHE_DIR" in str(w.message)]
    print(len(ours), repr(value))
""")


def test_a_read_only_install_works_uncached_and_warns_once():
    """No writable cache folder (#67: ``import fastsm`` raised Numba's "no locator available"): the kernels compile
    in memory, and one warning names the remedy."""
    run = subprocess.run([sys.executable, "-c", UNCACHED], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    assert run.returncode == 0, run.stderr[-2000:]
    count, value = run.stdout.split()
    # KL(N(0, I) || N(1, 2I)) in d = 2: (tr + Mahalanobis - d + log det ratio) / 2 = (1 + 1 - 2 + 2 log 2) / 2
    assert (int(count), float(value)) == (1, pytest.approx(np.log(2.0), rel=1e-12))


def test_disabled_jit_is_a_clear_error():
    run = subprocess.run([sys.executable, "-c", "import fastsm"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=ROOT, NUMBA_DISABLE_JIT="1"))
    assert run.returncode != 0
    assert "ImportError: fastsm's kernels need Numba's compiler, and NUMBA_DISABLE_JIT=1" in run.stderr
