"""Speed measurements shared by ``python -m fastsm bench``, asv and pytest-benchmark.

All timings exclude JIT compilation (every kernel is called once before
timing) and take the best of several repeats.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from fastsm import datasets, reference, tgp
from fastsm._threads import resolve_threads
from fastsm.tgp import prediction as api
from fastsm.tgp.views import inverse_form


def make_problem(n: int, dy: int = 16, seed: int = 0, n_test: int | None = None):
    """A random dy-output problem with ``n`` training and ``n_test`` (default n) test points."""
    n_test = n if n_test is None else n_test
    Xtr, Xte, Ytr, _ = datasets.random_structured(seed, n_train=n, n_test=n_test, dx=8, dy=dy)
    params = tgp.TGPParams(gamma_x=1.0 / 8, gamma_y=1.0 / dy, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)
    model = tgp.fit(Xtr, Ytr, params, methods=("kl", "sm"))
    rng = np.random.default_rng(seed + 1)
    Y = Ytr[rng.integers(0, n, n_test)] + 0.1 * model.y_spread * rng.standard_normal((n_test, dy)) / np.sqrt(dy)
    return model, Xte, Y


def best_of(fn, repeat: int = 3, budget: float = 0.3) -> float:
    """Best wall time of at least ``repeat`` calls after one warm-up call.

    Short calls are repeated until ``budget`` seconds have been measured
    (millisecond timings on a shared machine need many samples).
    """
    fn()
    times: list[float] = []
    while len(times) < repeat or (sum(times) < budget and len(times) < 1000):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


class BatchedObjective:
    """One batched SMTGP evaluation (value + gradient) of B points: 4 N^2 flops per point (four triangular
    products of N^2 flops each), its rows split over the threads as a prediction's points are."""

    def __init__(self, model, X, Y, method: str = "sm"):
        self.model, self.Y, self.method = model, Y, method
        self.F, self.eta_x, _, _ = api.prepare_points(model, X, method)
        self.val = np.empty(len(Y))
        self.grad = np.empty(Y.shape)

    @property
    def flops(self) -> float:
        n = self.model.n_train
        per_point = 2 * n * n * (1 if self.method == "kl" else 2)
        return per_point * len(self.Y)

    def __call__(self, threads: int | None = None):
        from fastsm._threads import thread_limits

        with thread_limits(threads) as n:
            api.evaluate(self.model, self.method, self.F, self.eta_x, self.Y, self.val, self.grad, threads=n)


def dgemm_gflops(n: int, b: int, threads: int | None, repeat: int = 3) -> float:
    """The machine's DGEMM rate for a (b×n)·(n×n) product with ``threads`` threads.

    The best of NumPy's BLAS (multi-threaded DGEMM of the whole product) and
    SciPy's BLAS driven by Numba threads over 256-row tiles
    (:func:`fastsm._kernels.dgemm_rate.tiled_dgemm`): the two bundled OpenBLAS
    builds differ by up to 2x here at N = 4000.
    """
    from fastsm._kernels.dgemm_rate import tiled_dgemm
    from fastsm._threads import thread_limits

    rng = np.random.default_rng(0)
    A, M = rng.random((b, n)), rng.random((n, n))
    out = np.empty((b, n))
    with threadpool_limits(resolve_threads(threads), user_api="blas"):
        t_numpy = best_of(lambda: A @ M, repeat)
    with thread_limits(threads):
        t_blocked = best_of(lambda: tiled_dgemm(A, M, out), repeat)
    return 2.0 * b * n * n / min(t_numpy, t_blocked) / 1e9


def speedup_vs_reference(model, X, n_ref: int, threads: int | None = None, max_iter: int = 2000):
    """Per-point SMTGP prediction time of fastsm (all points) and of the reference (first ``n_ref``).

    Both start from the same KLTGP prediction (not timed) and run to convergence
    (``tol = 1e-10``), so they return the same predictions: with [SM]'s 50
    iterations neither has converged on this 16-output problem and the two
    paths differ mid-way.  Returns ``(fast_s_per_point, ref_s_per_point,
    max |y_fast - y_ref|, mean iterations fast, mean iterations reference)``.
    """
    Y0 = tgp.predict(model, X, method="kl", threads=threads).y
    kw: dict[str, Any] = {"method": "sm", "max_iter": max_iter, "tol": 1e-10}
    tgp.predict(model, X[:8], init=Y0[:8], threads=threads, **kw)
    t0 = time.perf_counter()
    fast = tgp.predict(model, X, init=Y0, threads=threads, **kw)
    t_fast = (time.perf_counter() - t0) / len(X)
    with threadpool_limits(resolve_threads(threads), user_api="blas"):
        t0 = time.perf_counter()
        ref = reference.tgp.predict(model, X[:n_ref], init=Y0[:n_ref], **kw)
        t_ref = (time.perf_counter() - t0) / n_ref
    diff = float(np.abs(fast.y[:n_ref] - ref.y).max())
    return t_fast, t_ref, diff, float(fast.n_iter.mean()), float(ref.n_iter.mean())


LEGEND = """\
  N          training points (B = N test points)
  eval s     one batched SMTGP evaluation (value + gradient) of all B points, best of repeats
  GFLOP/s    4 N^2 B flops / eval s
  DGEMM      same-run DGEMM rate (N x N times N x B) on the same threads
  ratio      GFLOP/s / DGEMM
  1 thr s    eval s on one thread;  thr x = 1 thr s / eval s
  fast ms/pt whole SMTGP prediction per point (fastsm.tgp.predict)
  ref ms/pt  the same by the NumPy/SciPy twin (fastsm.reference), first n_ref points
  speed-up   ref ms/pt / fast ms/pt;  max|dy| largest difference of the two predictions
  it f/r     mean optimiser iterations, fastsm / reference"""


def _sm_criterion(model, k_x_fixed, y):
    """SMTGP criterion ``-s / (2(1-a))`` and its gradient at ``y``, plain NumPy (one point)."""
    p = model.params
    a = p.alpha
    g_x, eta_x = k_x_fixed
    diff = y[None, :] - model.Y
    k = np.exp(-p.gamma_y * np.einsum("ij,ij->i", diff, diff))
    z_y = model.Wy @ k
    z_xy = (1 - a) * g_x + a * (model.Wxy @ k)
    kyy, kxx = 1.0 + p.lambda_y, 1.0 + p.lambda_x
    eta_y = kyy - z_y @ z_y
    eta_xy = (1 - a) * kxx + a * kyy - z_xy @ z_xy
    s = a * np.log(eta_y) - np.log(eta_xy)
    coef = -1.0 / (2.0 * (1.0 - a))
    # ds/dk = -2a K_Y^-1 k / eta_y + 2a K_XY^-1 k_xy / eta_xy;  dk/dy = -2 gamma (y - z_i) k_i
    dsdk = -2.0 * a * (model.Wy.T @ z_y) / eta_y + 2.0 * a * (model.Wxy.T @ z_xy) / eta_xy
    grad = coef * (-2.0 * p.gamma_y) * ((dsdk * k) @ diff)
    return coef * s, grad


def per_point_baseline(model, X, Y0, gtol: float = 1e-5, max_iter: int = 2000):
    """SMTGP prediction the way a user writes it: NumPy objective + ``scipy.optimize.minimize`` (BFGS) per point.

    Returns ``(Y, f, n_eval, seconds)``; the x-only data (``g_x``, ``eta_x``)
    is computed per point too, as such a loop would.
    """
    from scipy.optimize import minimize

    model = inverse_form(model)  # such a user's model: the inverse factors W = L^-1 (formed before the clock)
    p = model.params
    t0 = time.perf_counter()
    n, dy = Y0.shape
    Y, f, nev = np.empty((n, dy)), np.empty(n), np.empty(n, dtype=np.int64)
    for i in range(n):
        dx = X[i][None, :] - model.X
        kx = np.exp(-p.gamma_x * np.einsum("ij,ij->i", dx, dx))
        h_x = model.Wx @ kx
        fixed = (model.Wxy @ kx, 1.0 + p.lambda_x - h_x @ h_x)
        r = minimize(lambda y, fixed=fixed: _sm_criterion(model, fixed, y), Y0[i], jac=True, method="BFGS",
                     options={"gtol": gtol, "maxiter": max_iter})
        Y[i], f[i], nev[i] = r.x, r.fun, r.nfev
    return Y, f, nev, time.perf_counter() - t0


def _baseline_chunk(model, X, Y0, gtol):
    with threadpool_limits(1, user_api="blas"):
        return per_point_baseline(model, X, Y0, gtol)


def joblib_baseline(model, X, Y0, n_jobs: int, gtol: float = 1e-5):
    """:func:`per_point_baseline` over ``n_jobs`` worker processes (joblib, one BLAS thread each)."""
    from joblib import Parallel, delayed

    chunks = np.array_split(np.arange(len(X)), n_jobs)
    t0 = time.perf_counter()
    parts = Parallel(n_jobs=n_jobs)(delayed(_baseline_chunk)(model, X[c], Y0[c], gtol) for c in chunks)
    seconds = time.perf_counter() - t0
    return (np.concatenate([q[0] for q in parts]), np.concatenate([q[1] for q in parts]),
            np.concatenate([q[2] for q in parts]), seconds)


def whole_prediction(n: int, b: int, threads: int | None = None, repeat: int = 3, **predict_kwargs):
    """Time whole SMTGP predictions of ``b`` points (``N = n``, dy = 16) from their KLTGP start.

    Returns ``(seconds, Prediction, model, X, Y0)``; best of ``repeat``, JIT excluded.
    """
    model, X, _ = make_problem(n, n_test=b)
    Y0 = tgp.predict(model, X, method="kl", threads=threads).y
    kw = dict(method="sm", init=Y0, threads=threads, **predict_kwargs)
    tgp.predict(model, X[:4], **{**kw, "init": Y0[:4]})
    best, pred = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        pred = tgp.predict(model, X, **kw)
        best = min(best, time.perf_counter() - t0)
    return best, pred, model, X, Y0


WHOLE_LEGEND = """  N, B       training points, test points predicted in one call (SMTGP, dy = 16, from the KLTGP start)
  s/pred     wall time of the whole prediction (best of repeats; start and JIT not timed)
  ev/pt      objective evaluations per point (first evaluation + line-search trials)
  GFLOP/s    4 N^2 flops x evaluations / s/pred  (the two products of every evaluation)
  DGEMM      same-run DGEMM rate of (B x N)(N x N), best of NumPy's threaded BLAS and fixed row blocks
  ratio      GFLOP/s / DGEMM"""


def whole_table(sizes=(1000, 2000, 4000), batches=(200, 1000), threads: int | None = None, repeat: int = 3,
                out=print) -> list[dict]:
    """Print (and return) the whole-prediction roofline table."""
    threads = resolve_threads(threads)
    out(f"threads={threads}; whole SMTGP predictions")
    out(WHOLE_LEGEND)
    out(f"{'N':>5} {'B':>5} {'s/pred':>8} {'ms/pt':>7} {'ev/pt':>6} {'GFLOP/s':>8} {'DGEMM':>7} {'ratio':>6}")
    rows = []
    for n in sizes:
        for b in batches:
            b = n if b == "N" else int(b)
            t, pred, *_ = whole_prediction(n, b, threads, repeat)
            gf = 4.0 * n * n * pred.n_eval.sum() / t / 1e9
            dg = dgemm_gflops(n, b, threads)
            rows.append({"n": n, "b": b, "seconds": t, "evals": float(pred.n_eval.mean()), "gflops": gf,
                         "dgemm": dg})
            out(f"{n:5d} {b:5d} {t:8.3f} {t / b * 1e3:7.3f} {pred.n_eval.mean():6.1f} {gf:8.1f} {dg:7.1f} "
                f"{gf / dg:6.1%}")
    return rows


def equal_quality(n: int = 1000, b: int = 200, threads: int | None = None, rel: float = 1e-8, out=print) -> dict:
    """fastsm vs the per-point NumPy + SciPy BFGS baseline (serial and joblib) at equal quality.

    Quality: the share of points whose SMTGP criterion is within ``rel |f*|``
    of ``f*``, the lower of both codes' tight runs (fastsm ``tol = 1e-13,
    ftol = 0``; SciPy ``gtol = 1e-9``).  Each code runs until it stops by its
    own rule: fastsm with its defaults (``max_iter = 50 + 2 dy``) and with
    ``max_iter = 500``; SciPy with ``gtol = 1e-5`` (its ``maxiter`` 2000).
    The speed-ups are taken against the fastest fastsm run whose share is at
    least the baseline's.
    """
    threads = resolve_threads(threads)
    t_def, p_def, model, X, Y0 = whole_prediction(n, b, threads, 3)
    t_long, p_long, *_ = whole_prediction(n, b, threads, 3, max_iter=500)
    tight = tgp.predict(model, X, method="sm", init=Y0, threads=threads, max_iter=2000, tol=1e-13, ftol=0.0)
    _, fs, evs, t_serial = per_point_baseline(model, X, Y0)
    _, f_tight_s, _, _ = per_point_baseline(model, X, Y0, gtol=1e-9)
    _, fj, _, t_joblib = joblib_baseline(model, X, Y0, threads)
    _, fj, _, t_joblib2 = joblib_baseline(model, X, Y0, threads)  # second run: workers warm
    t_joblib = min(t_joblib, t_joblib2)
    f_star = np.minimum(tight.criterion, f_tight_s)

    def good(f):
        return float(np.mean(f <= f_star + rel * np.abs(f_star)))

    ok_def, ok_long, ok_s = good(p_def.criterion), good(p_long.criterion), good(fs)
    t_fast = min(t for t, ok in ((t_def, ok_def), (t_long, ok_long)) if ok >= ok_s) \
        if max(ok_def, ok_long) >= ok_s else t_long
    res = {"n": n, "b": b, "threads": threads, "fastsm_s": t_def, "fastsm_ok": ok_def,
           "fastsm_500_s": t_long, "fastsm_500_ok": ok_long, "fastsm_evals": float(p_def.n_eval.mean()),
           "scipy_s": t_serial, "scipy_ok": ok_s, "scipy_evals": float(evs.mean()), "joblib_s": t_joblib,
           "joblib_ok": good(fj), "speedup_serial": t_serial / t_fast, "speedup_joblib": t_joblib / t_fast}
    out(f"N = {n}, B = {b}, threads = {threads}; 'within': share of points with f <= f* + {rel:g}|f*| "
        "(f*: tight runs of both codes)")
    out(f"  {'code':44} {'seconds':>8} {'within':>7} {'ev/pt':>6}")
    out(f"  {'fastsm.tgp.predict, defaults (max_iter 50+2dy)':44} {t_def:8.3f} {ok_def:7.1%} "
        f"{p_def.n_eval.mean():6.1f}")
    out(f"  {'fastsm.tgp.predict, max_iter 500':44} {t_long:8.3f} {ok_long:7.1%} {p_long.n_eval.mean():6.1f}")
    out(f"  {'NumPy + scipy BFGS per point, gtol 1e-5':44} {t_serial:8.3f} {ok_s:7.1%} {evs.mean():6.1f}")
    out(f"  {f'the same over {threads} joblib processes':44} {t_joblib:8.3f} {res['joblib_ok']:7.1%}")
    out(f"  fastsm at no lower quality: {res['speedup_serial']:.1f}x the per-point baseline, "
        f"{res['speedup_joblib']:.1f}x the joblib baseline")
    return res


def toy_kltgp(n: int = 2000, n_test: int = 500, threads: int | None = None, repeat: int = 3, out=print) -> dict:
    """KLTGP fit + prediction on Bo & Sminchisescu's toy (Toy 1), the job their MATLAB code does.

    Best of ``repeat`` for each part, JIT excluded.
    """
    Xtr, Xte, Ytr, Yte = datasets.toy1(0, n_train=n, n_test=n_test)
    tgp.predict(tgp.fit(Xtr[:50], Ytr[:50], tgp.TOY1_PARAMS, methods=("kl",)), Xte[:4], method="kl")
    t_fit = t_pred = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        model = tgp.fit(Xtr, Ytr, tgp.TOY1_PARAMS, methods=("kl",), threads=threads)
        t1 = time.perf_counter()
        pred = tgp.predict(model, Xte, method="kl", threads=threads)
        t2 = time.perf_counter()
        t_fit, t_pred = min(t_fit, t1 - t0), min(t_pred, t2 - t1)
    mae = float(np.abs(pred.y - Yte).mean())
    out(f"KLTGP, Toy 1, N = {n}, {n_test} test points: fit {t_fit:.3f} s + predict {t_pred:.3f} s = "
        f"{t_fit + t_pred:.3f} s, MAE {mae:.4f}, {pred.n_eval.mean():.1f} evaluations/pt, "
        f"{pred.converged.mean():.1%} converged")
    return {"fit_s": t_fit, "predict_s": t_pred, "mae": mae}


def main_whole(sizes=(1000,), batches=(200, 1000, "N"), threads: int | None = None) -> int:
    """``python -m fastsm bench``: whole-prediction roofline, equal-quality baseline, the toy timing."""
    seen: set[tuple] = set()
    for n in sizes:
        bs = [b for b in dict.fromkeys(n if b == "N" else int(b) for b in batches) if (n, b) not in seen]
        seen.update((n, b) for b in bs)
        whole_table((n,), bs, threads, out=lambda line, first=(n == sizes[0]): print(line) if first or
                    line.lstrip()[:1].isdigit() else None)
    print()
    equal_quality(1000, 200, threads)
    print()
    toy_kltgp(threads=threads)
    return 0


def main(sizes=(250, 1000), threads: int | None = None, n_ref: int = 16) -> int:
    """Print the table of acceptance point 6 for the given training-set sizes."""
    threads = resolve_threads(threads)
    dgemm = {n: dgemm_gflops(n, n, threads) for n in sizes}
    print(f"threads={threads}; dy=16; B=N test points; SMTGP objective+gradient = 4 N^2 flops/point")
    print(f"{'N':>5} {'eval s':>8} {'GFLOP/s':>8} {'DGEMM':>8} {'ratio':>6} {'1 thr s':>8} {'thr x':>6} "
          f"{'fast ms/pt':>10} {'ref ms/pt':>10} {'speed-up':>9} {'max|dy|':>9} {'it f/r':>11}")
    print(LEGEND)
    for n in sizes:
        model, X, Y = make_problem(n)
        ev = BatchedObjective(model, X, Y)
        t = best_of(lambda ev=ev: ev(threads))
        t1 = best_of(lambda ev=ev: ev(1)) if threads > 1 else t
        gf = ev.flops / t / 1e9
        dg = dgemm[n]
        tf, tr, diff, itf, itr = speedup_vs_reference(model, X, min(n_ref, len(X)), threads)
        print(f"{n:5d} {t:8.3f} {gf:8.1f} {dg:8.1f} {gf / dg:6.1%} {t1:8.3f} {t1 / t:6.2f} "
              f"{tf * 1e3:10.3f} {tr * 1e3:10.2f} {tr / tf:9.1f} {diff:9.1e} {itf:5.0f}/{itr:<5.0f}", flush=True)
    return 0
