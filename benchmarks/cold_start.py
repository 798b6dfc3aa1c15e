"""Cold start: the first call's compile time, per kernel (hardening issue, item 16).

Runs a fresh interpreter with an empty ``NUMBA_CACHE_DIR`` (nothing cached),
times import, the first ``fit`` and the demo's first prediction (Toy 1,
KLTGP), then IKLTGP and SMTGP, and lists the kernels by inclusive compile
time (Numba's compile events; nested kernels are counted in their callers
too)::

    python benchmarks/cold_start.py

With ``--local``, the first KNN-local predictions instead (``fit_local``'s defaults, K = 40 of 400
points, dy = 3: SMTGP, then KLTGP, then SMTGP of a weighted model)::

    python benchmarks/cold_start.py --local
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

START = r"""
import time
t0 = time.perf_counter()
from numba.core import event
import fastsm
from fastsm import datasets, tgp
t1 = time.perf_counter()

class Listener(event.Listener):
    def __init__(self):
        self.total, self.start = {}, {}
    def on_start(self, ev):
        self.start[id(ev.data["dispatcher"])] = time.perf_counter()
    def on_end(self, ev):
        d = ev.data["dispatcher"]
        name = d.py_func.__module__.rsplit(".", 1)[-1] + "." + d.py_func.__qualname__
        self.total[name] = self.total.get(name, 0.0) + time.perf_counter() - self.start[id(d)]

listener = Listener()
event.register("numba:compile", listener)
"""

GLOBAL = r"""
Xtr, Xte, Ytr, _ = datasets.toy1(0)
model = tgp.fit(Xtr, Ytr)
t2 = time.perf_counter()
tgp.predict(model, Xte[:4], method="kl")
t3 = time.perf_counter()
tgp.predict(model, Xte[:4], method="ikl")
tgp.predict(model, Xte[:4], method="sm")
t4 = time.perf_counter()
print(f"import {t1 - t0:.1f} s, first fit {t2 - t1:.1f} s, first prediction {t3 - t2:.1f} s, "
      f"IKLTGP + SMTGP {t4 - t3:.1f} s, total {t4 - t0:.1f} s")
"""

LOCAL = r"""
X, Xt, Y, _ = datasets.random_structured(0, n_train=400, n_test=50, dx=4, dy=3)
p = tgp.TGPParams(gamma_x="scale", gamma_y="scale", lambda_x=1e-3, lambda_y=1e-3, alpha=0.9, beta=1.5)
model = tgp.fit_local(X, Y, p, n_neighbors=40)
t2 = time.perf_counter()
tgp.predict(model, Xt, method="sm")
t3 = time.perf_counter()
tgp.predict(model, Xt, method="kl")
t4 = time.perf_counter()
tgp.predict(tgp.fit_local(X, Y, p, n_neighbors=40, sample_weight=1.0 + (X[:, 0] > 0)), Xt, method="sm")
t5 = time.perf_counter()
print(f"import {t1 - t0:.1f} s, first local SMTGP {t3 - t2:.1f} s, KLTGP {t4 - t3:.1f} s, "
      f"weighted SMTGP {t5 - t4:.1f} s, total {t5 - t0:.1f} s")
"""

REPORT = r"""
ours = {k: v for k, v in listener.total.items() if not k.startswith(("ol_", "_"))}
for name, sec in sorted(ours.items(), key=lambda kv: -kv[1])[:12]:
    print(f"  {sec:6.2f} s  {name}")
"""


def run_cold(child: str) -> int:
    """Run ``child`` in a fresh interpreter with an empty ``NUMBA_CACHE_DIR``; its exit status."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        return subprocess.run([sys.executable, "-c", child], env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", action="store_true", help="the first KNN-local predictions")
    args = parser.parse_args(argv)
    return run_cold(START + (LOCAL if args.local else GLOBAL) + REPORT)


if __name__ == "__main__":
    sys.exit(main())
