"""Several processes calling small predicts at once (hardening issue, item 5).

Each of ``--procs`` processes fits Toy 1 (N = 300) and calls
``tgp.predict`` on 8 test points (KLTGP) as often as it can for ``--seconds``;
the total number of calls is printed for the default thread count and for
``threads=1``.  Run it under different threading layers to compare::

    python benchmarks/oversubscription.py                              # fastsm's choice (tbb)
    NUMBA_THREADING_LAYER=omp python benchmarks/oversubscription.py    # GNU OpenMP, as before
    python benchmarks/oversubscription.py --demo                       # demo time with 2 busy processes beside
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import subprocess
import sys
import time


def _worker(threads, seconds, start, out):
    from fastsm import datasets, tgp

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=300, n_test=64)
    m = tgp.fit(Xtr, Ytr, tgp.TOY1_PARAMS, threads=1)
    tgp.predict(m, Xte[:8], method="kl", threads=threads)
    start.wait()
    t_end = time.perf_counter() + seconds
    n = 0
    i = 0
    while time.perf_counter() < t_end:
        tgp.predict(m, Xte[i:i + 8], method="kl", threads=threads)
        i = (i + 8) % 56
        n += 1
    out.put(n)


def calls(procs: int, seconds: float, threads):
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    ps = [ctx.Process(target=_worker, args=(threads, seconds, start, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    time.sleep(max(5.0, 2.0 * procs))  # let every process import, fit and warm up
    start.set()
    total = sum(out.get() for _ in ps)
    for p in ps:
        p.join()
    return total


def _spin(seconds):
    t_end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < t_end:
        x += 1


def demo_under_load(busy: int = 2):
    ctx = mp.get_context("spawn")
    hogs = [ctx.Process(target=_spin, args=(600,)) for _ in range(busy)]
    for h in hogs:
        h.start()
    try:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fastsm", "demo"], check=True, capture_output=True)
        return time.perf_counter() - t0
    finally:
        for h in hogs:
            h.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--demo", action="store_true", help="time `python -m fastsm demo` beside 2 busy processes")
    args = ap.parse_args()
    import numba

    from fastsm import datasets, tgp

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=20, n_test=2)
    tgp.predict(tgp.fit(Xtr, Ytr), Xte, method="kl")  # starts the threading layer (older fastsm too)
    print(f"threading layer: {numba.threading_layer()}")
    if args.demo:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "fastsm", "demo"], check=True, capture_output=True)
        quiet = time.perf_counter() - t0
        print(f"demo: {quiet:.1f} s quiet, {demo_under_load():.1f} s beside 2 busy processes")
        return 0
    for threads in (None, 1):
        n = calls(args.procs, args.seconds, threads)
        print(f"{args.procs} processes x {args.seconds:.0f} s, threads={threads}: {n} predict calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
