"""Ordinary workloads run as separate processes sharing one Numba cache (tests/test_cache_history.py, #67).

Each workload is a short script that prints one ``RESULT <float>`` line: a sum of its predictions, the
same in every process that runs it (cold, warm, or after any other workload).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_HEAD = """
import sys
import numpy as np
from fastsm import datasets, tgp
X, Xt, Y, _ = datasets.toy1(4, n_train=150, n_test=40)
P = tgp.TGPParams(lambda_x=1e-2, lambda_y=1e-2)
def out(*preds):
    print("RESULT", repr(float(sum(np.asarray(p.y if hasattr(p, "y") else p).sum() for p in preds))))
"""

#: name -> the workload's code (after the common head above)
WORKLOADS: dict[str, str] = {
    "global_sm": "out(tgp.predict(tgp.fit(X, Y, P), Xt, method='sm'))",
    "global_kl_ikl": "m = tgp.fit(X, Y, P); out(tgp.predict(m, Xt, method='kl'), tgp.predict(m, Xt, method='ikl'))",
    "knn_none_sm": "out(tgp.predict(tgp.fit_local(X, Y, P, n_neighbors=25, share='none'), Xt, method='sm'))",
    "knn_exact_kl": "out(tgp.predict(tgp.fit_local(X, Y, P, n_neighbors=30, share='exact'), Xt, method='kl'))",
    "region_sm": "out(tgp.predict(tgp.fit_local(X, Y, P, n_neighbors=40, share='region'), Xt, method='sm'))",
    "cluster_ikl": "out(tgp.predict(tgp.fit_local(X, Y, P, n_neighbors=40, share='cluster', group_size=8), Xt, "
                   "method='ikl'))",
    "weighted_sm": "w = np.linspace(0.5, 1.5, len(X)); out(tgp.predict(tgp.fit(X, Y, P, sample_weight=w), Xt, "
                   "method='sm'))",
    "updates": ("m = tgp.partial_fit(tgp.fit(X[:120], Y[:120], P), X[120:], Y[120:])\n"
                "m = tgp.with_alpha(tgp.remove(m, [0, 5]), 0.8)\nout(tgp.predict(m, Xt, method='sm'))"),
    "loo": "m = tgp.fit(X[:80], Y[:80], P); out(tgp.loo_predict(m, method='sm'), tgp.loo_predict(m, method='kl'))",
    "sklearn": ("from fastsm.sklearn import TwinGPRegressor\n"
                "Xs, Xst, Ys, _ = datasets.random_structured(2, n_train=100, n_test=30, dx=3, dy=3)\n"
                "out(TwinGPRegressor(method='sm').fit(Xs, Ys).predict(Xst))"),
}


def script(name: str) -> str:
    return textwrap.dedent(_HEAD) + WORKLOADS[name] + "\n"


def environment(cache: str) -> dict:
    return dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=ROOT, PYTHONFAULTHANDLER="1")


def start(name: str, cache: str) -> subprocess.Popen:
    """Start workload ``name`` in a fresh process on the Numba cache folder ``cache``."""
    return subprocess.Popen([sys.executable, "-c", script(name)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment(cache))


def finish(proc: subprocess.Popen, name: str, timeout: float = 600) -> float:
    """The workload's result; fails with its exit code and the end of its error output if it did not end well."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}:\n{err[-3000:]}"
    (line,) = [s for s in out.splitlines() if s.startswith("RESULT ")]
    return float(line.split()[1])


def run(name: str, cache: str) -> float:
    return finish(start(name, cache), name)


def killed_while_compiling(name: str, cache: str, after: float) -> int:
    """Start ``name`` and kill it (SIGKILL) ``after`` seconds in, while it compiles; returns its exit code."""
    proc = start(name, cache)
    time.sleep(after)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    return proc.returncode


#: Prints ``COMPILED module name signature`` for every fastsm kernel the README's snippet compiled.
README_COMPILES = f"""
import contextlib, io, re, sys
text = open({os.path.join(ROOT, "README.md")!r}).read()
code = re.search(r"<!-- start-snippet -->\\s*```python\\n(.*?)```", text, re.S).group(1)
with contextlib.redirect_stdout(io.StringIO()):
    exec(compile(code, "README", "exec"), {{}})
from fastsm._cache import Kernel
kernels = {{id(k): k for name, mod in list(sys.modules.items()) if name.startswith("fastsm")
           for k in vars(mod).values() if isinstance(k, Kernel)}}
for k in kernels.values():
    for sig, n in k.stats.cache_misses.items():
        if n:
            print("COMPILED", k.py_func.__module__, k.py_func.__name__, sig)
print("RESULT 0.0")
"""
