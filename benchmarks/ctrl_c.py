"""Ctrl-C latency of KNN-local predictions in every share mode (#67, #74).

Each try starts a process that fits a local model, compiles on a few points, prints ``ready`` and then
predicts many points; SIGINT is sent a random 0.5-3 s later.  Two times are measured: until the caller
catches ``KeyboardInterrupt`` (the user has control again; wall clocks of the two processes) and until the
process has exited.  ``--load`` starts that many busy processes beside it (a loaded machine).  The data are
``datasets.random_structured`` with ``--dx`` inputs: with dx = 2 a cluster's neighbours overlap (models of
~10^3 points), with dx = 8 and uniform inputs a cluster of 128 test points draws nearly the whole training
set into its model.

    python benchmarks/ctrl_c.py --n-train 20000 --k 800 --group-size 128 --dx 2 --tries 5 --load 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from fastsm import datasets, tgp
    n, k, g, share, method = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    dx = int(sys.argv[6])
    X, Xt, Y, _ = datasets.random_structured(0, n_train=n, n_test=4000, dx=dx, dy=4)
    p = tgp.TGPParams(gamma_x=1 / dx, gamma_y=1 / 4, lambda_x=1e-2, lambda_y=1e-2)
    options = {"group_size": g} if share == "cluster" else {}
    m = tgp.fit_local(X, Y, p, n_neighbors=k, share=share, **options)
    tgp.predict(m, Xt[:4], method=method)
    print("ready", flush=True)
    try:
        tgp.predict(m, Xt, method=method)
    except KeyboardInterrupt:
        print("caught", repr(time.time()), flush=True)
        sys.exit(0)
    sys.exit(3)
""")


def _busy(stop) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def one_try(args, share: str, rng: random.Random) -> tuple[float, float]:
    """``(seconds until the caller caught KeyboardInterrupt, seconds until the process exited)``."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(args.n_train), str(args.k), str(args.group_size), share,
                             args.method, str(args.dx)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        line = proc.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"{share}: {line!r}\n{proc.stderr.read()[-2000:]}")
        time.sleep(rng.uniform(0.5, 3.0))
        t0, wall = time.perf_counter(), time.time()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=600)
        exited = time.perf_counter() - t0
    finally:
        proc.kill()
    if proc.returncode != 0:
        raise RuntimeError(f"{share}: exit {proc.returncode} (3: the prediction ended before the signal)\n"
                           f"{err[-2000:]}")
    (caught,) = [float(s.split()[1]) for s in out.splitlines() if s.startswith("caught")]
    return caught - wall, exited


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-train", type=int, default=20000)
    ap.add_argument("--k", type=int, default=800)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--method", default="sm")
    ap.add_argument("--dx", type=int, default=2)
    ap.add_argument("--shares", default="none,exact,region,cluster")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--load", type=int, default=0, help="busy processes beside each try")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    stop = multiprocessing.Event()
    busy = [multiprocessing.Process(target=_busy, args=(stop,), daemon=True) for _ in range(args.load)]
    for b in busy:
        b.start()
    try:
        for share in args.shares.split(","):
            tries = [one_try(args, share, rng) for _ in range(args.tries)]
            for i, what in enumerate(("KeyboardInterrupt", "exit")):
                lat = sorted(t[i] for t in tries)
                print(f"{share:8s} SIGINT -> {what:17s}: median {lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s "
                      f"({', '.join(f'{x:.2f}' for x in lat)}; dx {args.dx}, load {args.load})", flush=True)
    finally:
        stop.set()


if __name__ == "__main__":
    main()
