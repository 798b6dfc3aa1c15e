"""Determinism across threads, batches, order and call splits, per OpenBLAS kernel family, and across families.

For each kernel family this machine can run (``OPENBLAS_CORETYPE`` = Nehalem,
SandyBridge, Haswell, and SkylakeX where ``/proc/cpuinfo`` lists ``avx512f``),
a fresh process fits KLTGP/IKLTGP/SMTGP on 700 points and predicts 333 test
points five ways: default, 1 vs 2 threads, ``batch_size=37``, the points
permuted, and split over two calls.  The first table gives max |Δy| of each
variant against the default prediction (over the three methods): ``0`` means
bitwise equal.  The second gives max |Δy| between families (same data, same
code, other BLAS kernels) — the cross-machine tolerance::

    python benchmarks/determinism.py            # all families this CPU runs
    python benchmarks/determinism.py --n 300 --m 100
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

FAMILIES = ["Nehalem", "SandyBridge", "Haswell", "SkylakeX"]
CASES = ["1 vs 2 threads", "batch_size=37", "points permuted", "split over two calls"]


def families() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            avx512 = "avx512f" in f.read()
    except OSError:
        avx512 = False
    return FAMILIES if avx512 else FAMILIES[:3]


def run_family(n: int, m: int, out: str) -> None:
    """In the child process: predictions of every variant; writes max |Δy| per case and the default y."""
    from fastsm import datasets, tgp

    X, Xt, Y, _ = datasets.random_structured(7, n_train=n, n_test=m, dx=6, dy=4)
    params = tgp.TGPParams(gamma_x=1.0 / 6, gamma_y=0.25, lambda_x=1e-3, lambda_y=1e-3, alpha=0.7, beta=1.5)
    model = tgp.fit(X, Y, params)
    perm = np.random.default_rng(0).permutation(m)
    worst = dict.fromkeys(CASES, 0.0)
    ys = {}
    for method in ("kl", "ikl", "sm"):
        ref = tgp.predict(model, Xt, method=method, threads=2).y
        variants = {
            "1 vs 2 threads": tgp.predict(model, Xt, method=method, threads=1).y,
            "batch_size=37": tgp.predict(model, Xt, method=method, batch_size=37).y,
            "points permuted": tgp.predict(model, Xt[perm], method=method).y[np.argsort(perm)],
            "split over two calls": np.concatenate([tgp.predict(model, Xt[:150], method=method).y,
                                                    tgp.predict(model, Xt[150:], method=method).y]),
        }
        for case, y in variants.items():
            worst[case] = max(worst[case], float(np.abs(y - ref).max()))
        ys[method] = ref
    np.savez(out + ".npz", **ys)
    with open(out + ".json", "w") as f:
        json.dump({"worst": worst}, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=700, help="training points")
    ap.add_argument("--m", type=int, default=333, help="test points")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        run_family(args.n, args.m, args.child)
        return
    fams = families()
    results, ys = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for fam in fams:
            out = os.path.join(tmp, fam)
            env = {**os.environ, "OPENBLAS_CORETYPE": fam}
            subprocess.run([sys.executable, __file__, "--n", str(args.n), "--m", str(args.m), "--child", out],
                           env=env, check=True)
            with open(out + ".json") as f:
                results[fam] = json.load(f)
            with np.load(out + ".npz") as z:
                ys[fam] = {k: z[k] for k in z.files}
    print(f"N = {args.n} training points, {args.m} test points; KLTGP, IKLTGP, SMTGP; max |dy| vs the default call")
    print(f"{'kernels':<12}" + "".join(f"{c:>22}" for c in CASES))
    for fam in fams:
        r = results[fam]
        cells = "".join(f"{('bitwise' if r['worst'][c] == 0.0 else format(r['worst'][c], '.1e')):>22}" for c in CASES)
        print(f"{fam:<12}{cells}")
    print("\nacross kernel families: max |dy| (same data and code, other BLAS kernels)")
    print(f"{'':<12}" + "".join(f"{f:>14}" for f in fams))
    for a in fams:
        row = "".join(f"{max(float(np.abs(ys[a][k] - ys[b][k]).max()) for k in ys[a]):>14.1e}" for b in fams)
        print(f"{a:<12}{row}")


if __name__ == "__main__":
    main()
