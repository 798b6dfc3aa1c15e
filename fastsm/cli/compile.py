"""``python -m fastsm compile``: compile (or load from Numba's cache) every kernel family once.

For container images, CI jobs and the workers of a new cluster: run it once where the package is
installed, and later processes load the kernels from the cache (Numba's ``__pycache__`` next to
the modules, or ``NUMBA_CACHE_DIR``) instead of compiling them on their first call.  Each step is
a small call of one public entry point on built-in data; the table lists what each took.

Compiling is single-threaded, so groups of steps (:data:`GROUPS`) run in ``jobs`` processes side by side
(default: one per core), sharing the cache (docs/architecture.md, "A sound kernel cache"); each step is
self-contained.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np

from fastsm._prefetch import ENV
from fastsm._threads import cores


def _steps(threads: int | None) -> list[tuple[str, Callable[[], object]]]:
    from fastsm import datasets, divergences, gmm, shift, tgp

    X, Xt, Y, _ = datasets.toy1(0, n_train=40, n_test=6)
    Xs, Xst, Ys, _ = datasets.random_structured(0, n_train=60, n_test=6, dx=2, dy=3)
    kw = {"threads": threads}
    state: dict = {}

    def fit():
        state["model"] = tgp.fit(X, Y, **kw)
        state["multi"] = tgp.fit(Xs, Ys, **kw)

    def fitted():
        if "model" not in state:
            fit()

    def predict(method):
        def run():
            fitted()
            tgp.predict(state["model"], Xt, method=method, **kw)
            tgp.predict(state["multi"], Xst, method=method, **kw)
        return run

    def loo():
        fitted()
        for method in ("kl", "ikl", "sm"):
            tgp.loo_predict(state["model"], method=method, max_iter=3, **kw)

    def local(share):
        def run():
            model = tgp.fit_local(Xs, Ys, n_neighbors=20, share=share)
            for method in ("kl", "sm"):
                tgp.predict(model, Xst, method=method, **kw)
        return run

    def gpu_host():  # the GPU engine's one kernel on the host (fastsm.cuda.local): run here by its NumPy backend
        import fastsm.cuda

        model = tgp.fit_local(Xs, Ys, n_neighbors=20)
        fastsm.cuda.predict(model, Xst, method="kl", max_iter=3, backend="numpy")

    def updates():
        fitted()
        m = tgp.partial_fit(state["model"], Xt[:2], Y[:2], **kw)
        tgp.remove(m, [0, 1], **kw)
        tgp.objective(state["model"], Xt, Y[:6], method="sm", **kw)
        tgp.certainty(state["model"], Xt, Y[:6], **kw)

    def weights():
        rng = np.random.default_rng(0)
        A, B = rng.standard_normal((40, 2)), rng.standard_normal((30, 2)) + 0.3
        for solver in shift.SOLVERS:
            iw = shift.estimate_weights(A, B, sigma=0.8, solver=solver, **kw)
        shift.weights_at(iw, A, **kw)

    def gaussians():
        rng = np.random.default_rng(1)
        mu, S = rng.standard_normal((3, 2)), np.tile(np.eye(2), (3, 1, 1))
        divergences.sm(mu, S, mu[::-1], 2 * S, 0.5, 1.5, **kw)
        divergences.kl(mu, S, mu[::-1], 2 * S, **kw)
        divergences.renyi(mu, S, mu[::-1], 2 * S, 0.5, **kw)

    def mixtures():
        mix = datasets.gmm_manifold(d=2, K=2, n_gaussians=8, n_mixtures=6, seed=0)[0]
        for method in ("we", "mb", "mbs", "var", "ut"):
            gmm.pairwise(mix[:3], mix[3:], method, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # tiny problems: a representative may not converge
            gmm.fit_npe(mix, 2, **kw)

    return [
        ("fit (factorisations, ridge start)", fit),
        ("KLTGP predictions", predict("kl")),
        ("IKLTGP predictions", predict("ikl")),
        ("SMTGP predictions (KLTGP start, exact Hessian)", predict("sm")),
        ("leave-one-out (KLTGP, IKLTGP, SMTGP)", loo),
        ("local models, one per test point", local("none")),
        ("local models, shared by regions", local("region")),
        ("local models, shared by clusters", local("cluster")),
        ("updates, objective and certainty", updates),
        ("importance weights (pg, fw, afw, pfw + polish)", weights),
        ("divergences between Gaussians", gaussians),
        ("Gaussian-mixture measures and GMM-NPE", mixtures),
        ("the GPU engine's local ridge starts (on the host)", gpu_host),
    ]


#: Step indices of :func:`_steps` that compile the same kernels: one process runs each group in turn, the
#: groups go to ``jobs`` processes, longest first.  Steps of one group in two processes compiled their kernels
#: twice: KLTGP's and IKLTGP's predictions took 46.5 and 44.5 s side by side, 41.4 and 0.2 s in turn.
GROUPS: tuple[tuple[int, ...], ...] = ((5, 6, 7), (0, 1, 2, 3, 4, 8), (11,), (9,), (10,), (12,))


def _no_helpers() -> None:
    """A worker's start: its jobs compile beside the other workers' already, so no first-run helper
    (:mod:`fastsm._prefetch`) beside them."""
    os.environ[ENV] = "0"


def _run_steps(group: tuple[int, ...], threads: int | None) -> list[float]:
    """Seconds of each step of ``group`` (a worker's task)."""
    steps = _steps(threads)
    seconds = []
    for k in group:
        t0 = time.perf_counter()
        steps[k][1]()
        seconds.append(time.perf_counter() - t0)
    return seconds


def main(threads: int | None = None, jobs: int | None = None) -> int:
    """Run every step, one progress line each (``[k/n] name ... seconds``, in the order they finish), then
    the total; ``jobs`` processes side by side (``None``: :func:`cores`; ``1``: in this process)."""
    steps = _steps(threads)
    jobs = max(1, min(len(GROUPS), cores() if jobs is None else int(jobs)))
    t_all = time.perf_counter()
    where = "in this process" if jobs == 1 else f"in {jobs} processes"
    print(f"fastsm compile: {len(steps)} kernel families {where} (compiled on first use, loaded from Numba's "
          "cache after)", flush=True)
    if jobs == 1:
        for k, (name, step) in enumerate(steps, 1):
            print(f"[{k:2d}/{len(steps)}] {name} ...", end="", flush=True)
            t0 = time.perf_counter()
            step()
            print(f" {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=spawn, initializer=_no_helpers) as pool:
            futures = {pool.submit(_run_steps, group, threads): group for group in GROUPS}
            for fut in as_completed(futures):
                for k, sec in zip(futures[fut], fut.result(), strict=True):
                    print(f"[{k + 1:2d}/{len(steps)}] {steps[k][0]} ... {sec:.1f} s", flush=True)
    print(f"kernels ready in {time.perf_counter() - t_all:.1f} s")
    return 0
