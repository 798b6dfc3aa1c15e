"""``python -m fastsm demo``: KLTGP, IKLTGP and SMTGP on Toy 1 and Toy 2 ([SM] Table 2)."""

from __future__ import annotations

import time

import numpy as np

from fastsm import datasets, tgp
from fastsm.tgp.prediction import Method

#: [SM] Table 2 (error) and Table 1 (alpha, beta); kernels gamma_x = 0.2, gamma_y = 20, lambda = 1e-4.
PAPER = {
    "toy1": {"alpha": 0.9, "beta": 1.5, "kl": 0.116, "ikl": 0.115, "sm": 0.1126},
    "toy2": {"alpha": 0.6, "beta": 0.99, "kl": 0.126, "ikl": 0.114, "sm": 0.110},
}
NAMES = {"kl": "KLTGP", "ikl": "IKLTGP", "sm": "SMTGP"}


def run(threads: int | None = None, seed: int = 0, log=None) -> list[dict]:
    """Fit and predict on both toys; returns one row per (data set, method).

    Timings exclude JIT compilation (a warm-up call runs first) and include
    SMTGP's KLTGP start ([SM] §5.2).  ``log`` (e.g. ``print``) is told how long
    the warm-up (compilation on first use, cache loading afterwards) took.
    """
    rows = []
    if log is not None:
        log("loading the kernels (compiled on first use: 10-30 s on 2 cores, then cached; "
            "python -m fastsm compile does it ahead) ...")
        t0 = time.perf_counter()
        Xtr, Xte, Ytr, _ = datasets.toy1(seed, n_train=20, n_test=4)
        warm = tgp.fit(Xtr, Ytr, threads=threads)
        for method in ("kl", "ikl", "sm"):
            tgp.predict(warm, Xte, method=method, threads=threads)
        log(f"kernels ready in {time.perf_counter() - t0:.1f} s")
    for name, make in (("toy1", datasets.toy1), ("toy2", datasets.toy2)):
        Xtr, Xte, Ytr, Yte = make(seed)
        cfg = PAPER[name]
        params = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4,
                               alpha=cfg["alpha"], beta=cfg["beta"])
        model = tgp.fit(Xtr, Ytr, params, threads=threads)
        methods: tuple[Method, ...] = ("kl", "ikl", "sm")
        for method in methods:
            tgp.predict(model, Xte[:4], method=method, threads=threads)  # warm-up: compile or load cache
            t0 = time.perf_counter()
            pred = tgp.predict(model, Xte, method=method, threads=threads)
            dt = time.perf_counter() - t0
            err = np.abs(pred.y - Yte).mean(axis=1)
            rows.append({
                "data": name, "method": NAMES[method], "error": float(err.mean()), "std": float(err.std()),
                "paper": cfg[method], "seconds": dt, "points_per_s": len(Xte) / dt,
                "converged": float(pred.converged.mean()), "iters": float(pred.n_iter.mean()),
                "evals": float(pred.n_eval.mean()),
            })
    return rows


def format_table(rows: list[dict]) -> str:
    head = (f"{'data':5} {'method':7} {'error ± std':>16} {'paper':>7} {'time [s]':>9} {'points/s':>9} "
            f"{'conv.':>6} {'iter':>5} {'evals':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['data']:5} {r['method']:7} {r['error']:7.4f} ± {r['std']:6.4f} {r['paper']:7.4f} "
                     f"{r['seconds']:9.3f} {r['points_per_s']:9.0f} {r['converged']:6.1%} {r['iters']:5.1f} "
                     f"{r['evals']:6.1f}")
    return "\n".join(lines)
