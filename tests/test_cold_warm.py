"""Kernels compiled in the process and kernels loaded from Numba's cache compute bitwise alike.

The difference this guards against comes from Numba's code generation (what LLVM may do with the
fast-math flags around inlined code), not from the BLAS: the BLAS is the same in both processes of
a run.  So it runs once, in the main test run, not under every OpenBLAS kernel family with the
``determinism`` marker: each run compiles everything twice from an empty cache (about 90 s a
process on the 2-core CI machine).
"""

from __future__ import annotations

import os


def test_a_cold_and_a_warm_process_agree(tmp_path):
    """Kernels compiled in the process and kernels loaded from Numba's cache compute bitwise alike.

    With fast-math ``arcp`` and ``reassoc`` together they did not: leave-one-out SMTGP differed by up to
    3.6e-4 between the first process (compiling) and the next (cache), see ``fastsm.config``.  The KLIEP
    polish with its step-and-renormalise as a kernel of its own (not inlined) differed by 1e-13.
    """
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import hashlib
        import numpy as np
        from fastsm import datasets, tgp
        from fastsm.shift import estimate_weights
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
        print(h.hexdigest())
    """)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=root)
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    assert runs[0].stdout.split()[-1] == runs[1].stdout.split()[-1]
