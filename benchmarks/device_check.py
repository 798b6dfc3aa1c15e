"""The GPU engine's device check (#76): every figure in one run, in at most 8 minutes on the lent H200.

Run on the device machine (docs/performance.md, "The GPU engine"):
``PYTHONUNBUFFERED=1 python benchmarks/device_check.py``.  ``--quick --backend numpy`` runs the same
script at toy sizes on any CPU (tests/test_gpu_engine.py does, so the script works before device time
is spent on it).

Prints, each section on its own (a section that fails prints its error and the rest still run):

1. the machine: versions, the GPU, CPU cores, Numba's threading layer;
2. the device's fp64 rates: DGEMM and TRSM (many right-hand sides) at 8192;
3. global SMTGP at N = 10^4, B = 10^4, dy = 16 (``datasets.smooth_manifold``): the GPU engine on every
   test point, fastsm's Numba engine on every CPU core on the first ``--cpu-points`` of them (a point's
   cost does not depend on the others: the time is scaled to B, and the output says so), the ratio, and
   the agreement on those points (converged predictions within 3e-9 of the output spread, the share of
   equal converged flags);
4. the CPU engine's thread scaling: N = 1000, B = 4096, dy = 16 on one thread and on every core (#76 asks
   for at least 12x on 16 cores at B >= 2000)
   (the GPU on the same job beside it);
5. the 10^6-point KNN-local job (#32's set, ``fit_local``'s defaults): the GPU engine on all 10^5 test points,
   the host's share of it (neighbours and ridge starts, per 10^4 points), fastsm on every CPU core on the first
   5000 points (scaled), and the agreement on those;
6. GPyTorch's exact-GP posterior mean at N = 10^4, B = 10^4 on the same inputs, one independent GP per
   output (a different model; the anchor users know), float64, Cholesky.

Compilation (Numba's, CuPy's) is done on small problems first and not timed.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import traceback

import numpy as np

from fastsm import cuda as fc
from fastsm import datasets, tgp

MARGIN = 3e-9  # of the output spread: tests/test_gpu_engine.py's


def section(title: str):
    def wrap(fn):
        def run(*args, **kwargs):
            print(f"\n== {title}", flush=True)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            except Exception:  # one failed section must not cost the others' figures
                print("FAILED:\n" + traceback.format_exc(), flush=True)
                return None
            finally:
                print(f"   (section took {time.perf_counter() - t0:.1f} s)", flush=True)

        return run

    return wrap


def sync(be) -> None:
    if be.name == "cupy":
        be.xp.cuda.Stream.null.synchronize()


def timed(fn, be):
    sync(be)
    t0 = time.perf_counter()
    out = fn()
    sync(be)
    return out, time.perf_counter() - t0


@section("1. machine")
def machine(be) -> None:
    import numba
    import scipy

    import fastsm

    print(f"python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"numba {numba.__version__}, fastsm {fastsm.__version__}")
    print(f"CPU cores {os.cpu_count()}, {platform.processor() or platform.machine()}, "
          f"threading layer {fastsm.threading_layer()}")
    if be.name == "cupy":
        cp = be.xp
        props = cp.cuda.runtime.getDeviceProperties(0)
        free, total = cp.cuda.runtime.memGetInfo()
        print(f"cupy {cp.__version__}, GPU {props['name'].decode()}, {total / 2**30:.1f} GiB "
              f"({free / 2**30:.1f} free), CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}")
    else:
        print("backend numpy: the GPU engine on the CPU (no GPU figures below)")


@section("2. device fp64 rates")
def rates(be, n: int) -> None:
    rng = np.random.default_rng(0)
    A = be.to_device(rng.standard_normal((n, n)))
    B = be.to_device(rng.standard_normal((n, n)))
    L = be.to_device(np.tril(rng.standard_normal((n, n))) + n * np.eye(n))
    for _ in range(2):
        _, t_mm = timed(lambda: A @ B, be)
        _, t_sv = timed(lambda: be.solve(L, B, False), be)
    print(f"DGEMM {n}^3: {2 * n**3 / t_mm / 1e12:.2f} TFLOP/s; TRSM {n} x {n}, {n} right-hand sides: "
          f"{n**3 / t_sv / 1e12:.2f} TFLOP/s")


def problem(n_train: int, n_test: int, dy: int, seed: int = 0):
    X, Xt, Y, _ = datasets.smooth_manifold(seed, n_train=n_train, n_test=n_test, dx=10, dy=dy, latent=3)
    return X, Y, Xt


def agreement(a, b, spread: float) -> str:
    both = a.converged & b.converged
    err = float(np.abs(a.y - b.y)[both].max() / spread) if both.any() else float("nan")
    same = float(np.mean(a.converged == b.converged))
    verdict = "agree" if err <= MARGIN and same >= 0.99 else "DISAGREE"
    return (f"converged: GPU engine {b.converged.mean():.4f}, CPU {a.converged.mean():.4f}; same flag {same:.4f}; "
            f"max |dy| over both-converged {err:.2e} of the spread (margin {MARGIN:g}): {verdict}")


@section("3. global SMTGP, GPU engine against every CPU core")
def global_sm(be, n_train: int, n_test: int, dy: int, cpu_points: int) -> None:
    X, Y, Xt = problem(n_train, n_test, dy)
    t0 = time.perf_counter()
    model = tgp.fit(X, Y, methods=("kl", "sm"))
    print(f"N = {n_train}, B = {n_test}, dy = {dy}: fit on the CPU {time.perf_counter() - t0:.1f} s")
    fc.predict(model, Xt[:64], backend=be.name)  # CuPy's kernels compiled, untimed
    tgp.predict(model, Xt[:8])  # Numba's, untimed
    gpu, t_gpu = timed(lambda: fc.predict(model, Xt, backend=be.name), be)
    print(f"GPU engine, all {n_test} points: {t_gpu:.2f} s ({n_test / t_gpu:.0f} points/s), converged "
          f"{gpu.converged.mean():.4f}, evaluations a point {gpu.n_eval.mean():.1f}")
    sub = Xt[:cpu_points]
    cpu, t_cpu = timed(lambda: tgp.predict(model, sub), be)
    scaled = t_cpu * n_test / cpu_points
    print(f"CPU engine, {os.cpu_count()} threads, first {cpu_points} points: {t_cpu:.2f} s, scaled to {n_test} "
          f"points (a point's cost does not depend on the others): {scaled:.1f} s")
    print(f"GPU engine / CPU: {scaled / t_gpu:.1f}x")
    sub_gpu = fc.predict(model, sub, backend=be.name)
    print(agreement(cpu, sub_gpu, model.y_spread))


@section("4. CPU thread scaling (dy = 16)")
def scaling(be, n_train: int, n_test: int) -> None:
    X, Y, Xt = problem(n_train, n_test, 16, seed=1)
    model = tgp.fit(X, Y, methods=("kl", "sm"))
    tgp.predict(model, Xt[:8], threads=1)
    tgp.predict(model, Xt[:8])
    one, t1 = timed(lambda: tgp.predict(model, Xt, threads=1), be)
    every, tn = timed(lambda: tgp.predict(model, Xt), be)
    print(f"N = {n_train}, B = {n_test}: 1 thread {t1:.2f} s, {os.cpu_count()} threads {tn:.2f} s: {t1 / tn:.1f}x "
          f"(bitwise equal: {np.array_equal(one.y, every.y)})")
    fc.predict(model, Xt[:64], backend=be.name)
    gpu, t_gpu = timed(lambda: fc.predict(model, Xt, backend=be.name), be)
    print(f"GPU engine on the same job: {t_gpu:.2f} s ({tn / t_gpu:.1f}x the {os.cpu_count()} threads)")
    print(agreement(every, gpu, model.y_spread))


@section("5. the 10^6-point KNN-local job (#32's set: dx 12, dy 10, latent 4, K = 200, SMTGP, defaults)")
def local_job(be, n_train: int, n_test: int, k: int, cpu_points: int) -> None:
    from fastsm.cuda.local import host_starts
    from fastsm.tgp import regions

    X, Xt, Y, _ = datasets.smooth_manifold(0, n_train=n_train, n_test=n_test, dx=12, dy=10, latent=4)
    params = tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3)  # benchmarks/local_large.py's
    small = tgp.fit_local(X[:2000], Y[:2000], params, n_neighbors=50)
    fc.predict(small, Xt[:64], backend=be.name)  # compiled, untimed
    tgp.predict(small, Xt[:8])
    t0 = time.perf_counter()
    model = tgp.fit_local(X, Y, params, n_neighbors=k)
    print(f"N = {n_train}, B = {n_test}: fit_local (share={model.share!r}) {time.perf_counter() - t0:.1f} s")
    gpu, t_gpu = timed(lambda: fc.predict(model, Xt, backend=be.name), be)
    print(f"GPU engine, all {n_test} points: {t_gpu:.2f} s ({n_test / t_gpu:.0f} points/s), converged "
          f"{gpu.converged.mean():.4f}, evaluations a point {gpu.n_eval.mean():.1f}")
    sample = Xt[:min(n_test, 10_000)]
    t0 = time.perf_counter()
    members = np.sort(regions.nearest(model.tree, sample, model.X, k, os.cpu_count() or 1), axis=1)
    t_nn = time.perf_counter() - t0
    host_starts(model, sample, members, None)
    t_starts = time.perf_counter() - t0 - t_nn
    print(f"of which on the host, per {len(sample)} points: neighbours {t_nn:.2f} s, ridge starts {t_starts:.2f} s")
    sub = Xt[:cpu_points]
    cpu, t_cpu = timed(lambda: tgp.predict(model, sub), be)
    scaled = t_cpu * n_test / cpu_points
    print(f"CPU engine, {os.cpu_count()} threads, first {cpu_points} points: {t_cpu:.2f} s, scaled to {n_test}: "
          f"{scaled:.1f} s; GPU engine / CPU: {scaled / t_gpu:.1f}x")
    print(agreement(cpu, fc.predict(model, sub, backend=be.name), float(np.sqrt(Y.var(axis=0).sum()))))


@section("6. GPyTorch exact-GP posterior mean (the anchor)")
def gpytorch_anchor(be, n_train: int, n_test: int, dy: int) -> None:
    try:
        import gpytorch
        import torch
    except ImportError as exc:
        print(f"not measured: {exc}")
        return
    if be.name == "cupy":  # CuPy's pool keeps what the sections above freed, out of PyTorch's reach
        be.xp.get_default_memory_pool().free_all_blocks()
    X, Y, Xt = problem(n_train, n_test, dy)
    model = tgp.fit(X[:200], Y[:200], methods=("kl", "sm"))  # its width rule for the inputs, on a sample
    gamma = float(model.params.widths()[0])
    dev = torch.device("cuda" if be.name == "cupy" and torch.cuda.is_available() else "cpu")
    tx = torch.as_tensor(X, dtype=torch.float64, device=dev)
    tt = torch.as_tensor(Xt, dtype=torch.float64, device=dev)

    class GP(gpytorch.models.ExactGP):
        def __init__(self, x, y, lik):
            super().__init__(x, y, lik)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.RBFKernel()

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    # one GP per output, one after the other: the batched form (batch_shape = dy) fails in cuSOLVER's batched
    # cholesky_solve at dy = 16, N = 10^4 ("CUDA error: invalid argument")
    lik = gpytorch.likelihoods.GaussianLikelihood().to(dev, torch.float64)
    gp = GP(tx, torch.as_tensor(Y[:, 0], dtype=torch.float64, device=dev), lik).to(dev, torch.float64)
    gp.covar_module.lengthscale = (1.0 / np.sqrt(2.0 * gamma)) * torch.ones_like(gp.covar_module.lengthscale)
    lik.noise = 1e-3 * torch.ones_like(lik.noise)
    gp.eval()
    lik.eval()

    def mean(j):
        gp.set_train_data(targets=torch.as_tensor(Y[:, j], dtype=torch.float64, device=dev), strict=False)
        with torch.no_grad(), gpytorch.settings.max_cholesky_size(10**7), gpytorch.settings.fast_computations(
                covar_root_decomposition=False, log_prob=False, solves=False):
            out = gp(tt).mean
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return out

    mean(0)  # warm-up; set_train_data drops the cached training solve, so every output below factors again
    t0 = time.perf_counter()
    mu = [mean(j) for j in range(dy)]
    dt = time.perf_counter() - t0
    print(f"GPyTorch {gpytorch.__version__} on {dev.type}: N = {n_train}, B = {n_test}, {dy} outputs (independent "
          f"GPs, one after the other), float64, Cholesky: {dt:.2f} s (posterior means)")
    from scipy.linalg import cho_factor, cho_solve
    from scipy.spatial.distance import cdist

    K = np.exp(-gamma * cdist(X, X, "sqeuclidean")) + 1e-3 * np.eye(n_train)
    ref = np.exp(-gamma * cdist(Xt[:100], X, "sqeuclidean")) @ cho_solve(cho_factor(K, lower=True), Y[:, 0])
    got = mu[0][:100].cpu().numpy()
    print(f"its first output against SciPy's Cholesky solve at 100 points: max |difference| "
          f"{np.abs(got - ref).max():.1e} (outputs' scale {np.abs(ref).max():.2f})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy", choices=("cupy", "numpy"))
    ap.add_argument("--quick", action="store_true", help="toy sizes (checks the script, not the device)")
    ap.add_argument("--cpu-points", type=int, default=512)
    args = ap.parse_args(argv)
    be = fc.make_backend(args.backend)
    t0 = time.perf_counter()
    if args.quick:
        sizes = {"rate": 256, "n_train": 300, "n_test": 200, "cpu_points": 40, "scaling": (300, 100),
                 "local": (3000, 200, 50, 40)}
    else:
        sizes = {"rate": 8192, "n_train": 10_000, "n_test": 10_000, "cpu_points": args.cpu_points,
                 "scaling": (1000, 4096), "local": (1_000_000, 100_000, 200, 5000)}
    machine(be)
    rates(be, sizes["rate"])
    global_sm(be, sizes["n_train"], sizes["n_test"], 16, sizes["cpu_points"])
    scaling(be, *sizes["scaling"])
    local_job(be, *sizes["local"])
    gpytorch_anchor(be, sizes["n_train"], sizes["n_test"], 16)
    print(f"\ndevice check done in {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
