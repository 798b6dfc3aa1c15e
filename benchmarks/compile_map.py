"""Where cold-start compile time goes: exclusive compile seconds per kernel, and compiled versions.

Runs a fresh interpreter with an empty ``NUMBA_CACHE_DIR``, makes the demo's first calls (a Toy 1
fit, KLTGP / IKLTGP / SMTGP predictions), and prints each kernel's *exclusive* compile time (its
callees' compiles subtracted) with the number of versions compiled; then, from the cache's index
files, the kernels compiled in more than one version, with the argument types that split them::

    python benchmarks/compile_map.py
"""

from __future__ import annotations

import os
import sys

CHILD = r"""
import difflib, glob, os, pickle, time
from numba.core import event


class Exclusive(event.Listener):
    def __init__(self):
        self.stack, self.seconds, self.count = [], {}, {}

    def on_start(self, ev):
        self.stack.append([ev.data["dispatcher"], time.perf_counter(), 0.0])

    def on_end(self, ev):
        d, t0, inner = self.stack.pop()
        dt = time.perf_counter() - t0
        name = d.py_func.__module__.rsplit(".", 1)[-1] + "." + d.py_func.__qualname__
        self.seconds[name] = self.seconds.get(name, 0.0) + dt - inner
        self.count[name] = self.count.get(name, 0) + 1
        if self.stack:
            self.stack[-1][2] += dt


listener = Exclusive()
event.register("numba:compile", listener)
from fastsm import datasets, tgp

METHODS = os.environ.get("METHODS", "kl,ikl,sm").split(",")
Xtr, Xte, Ytr, _ = datasets.toy1(0)
model = tgp.fit(Xtr, Ytr)
for method in METHODS:
    tgp.predict(model, Xte[:4], method=method)
total = sum(listener.seconds.values())
print(f"exclusive compile time, total {total:.1f} s")
for name, sec in sorted(listener.seconds.items(), key=lambda kv: -kv[1])[:20]:
    print(f"  {sec:6.2f} s  x{listener.count[name]}  {name}")
print("kernels compiled in several versions (what differs between their signatures):")
for path in sorted(glob.glob(os.path.join(os.environ["NUMBA_CACHE_DIR"], "**", "*.nbi"), recursive=True)):
    with open(path, "rb") as f:
        pickle.load(f)
        _, overloads = pickle.loads(f.read())
    sigs = [str(key[0]) for key in overloads]
    if len(sigs) < 2:
        continue
    diffs = set()
    for s in sigs[1:]:
        ops = difflib.SequenceMatcher(None, sigs[0], s).get_opcodes()
        diffs |= {(sigs[0][i1:i2].strip(), s[j1:j2].strip()) for op, i1, i2, j1, j2 in ops if op != "equal"}
    print(f"  x{len(sigs)}  {os.path.basename(path).split('.py')[0]}: {sorted(diffs)[:4]}")
"""


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from cold_start import run_cold

    return run_cold(CHILD)


if __name__ == "__main__":
    raise SystemExit(main())
