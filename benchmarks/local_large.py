"""Local TGP at 10^5 training points: shared region models against per-point KNN models (issue #21, #32).

Run: ``python benchmarks/local_large.py`` (N = 100 000 training, 10 000 test points; a few minutes)
     ``python benchmarks/local_large.py --n-train 20000 --n-test 2000 --subsample 200`` (small)
     ``python benchmarks/local_large.py --n-train 1000000 --n-test 100000 --dx 12 --dy 10 --latent 4
     --share none`` (#32's job with per-point models on every test point: the accuracy reference
     itself, fit + predict timed, no region models); add ``--dask 2`` to predict the same points
     again on a ``LocalCluster`` of 2 single-threaded worker processes (``fastsm.dask.predict``:
     time, and the largest difference from the in-process prediction)

Data: ``datasets.smooth_manifold`` (by default dx = 10 features and dy = 8 outputs on a
3-dimensional manifold; ``--dx 12 --dy 10 --latent 4`` is #32's set), SMTGP.  ``share="region"``
is timed on the whole test set, fit (the regions) and predict (factorisations included); per-point
KNN models (``share="none"``, the paper's method) at the same K on the first ``--subsample`` test
points, their time extrapolated to the whole set (said so in the output).  A second predict of
the same test points is timed and its factorisations counted (with the default ``cache_bytes``
it should build nothing).  Peak memory is the process's ``VmHWM`` (Linux), data included.  The
compilation is done on a small problem first and not timed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastsm import datasets, tgp

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=4.0, lambda_x=1e-3, lambda_y=1e-3)


def _vm(field: str) -> float:
    """A ``/proc/self/status`` size in MiB (Linux; NaN elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _errors(y: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    return float(np.abs(y - truth).mean()), float(np.sqrt(np.mean((y - truth) ** 2)))


def run(n_train: int, n_test: int, k: int, region_size: int | None, subsample: int, threads: int | None,
        seed: int = 0, dx: int = 10, dy: int = 8, latent: int = 3) -> dict:
    """Fit and predict with region models and with per-point models; returns the figures."""
    X, Xt, Y, Yt = datasets.smooth_manifold(seed, n_train=n_train, n_test=n_test, dx=dx, dy=dy, latent=latent)
    warm = tgp.fit_local(X[:300], Y[:300], PARAMS, n_neighbors=50, share="region")
    tgp.predict(warm, Xt[:20], method="sm")
    tgp.predict(tgp.fit_local(X[:300], Y[:300], PARAMS, n_neighbors=50, share="none"), Xt[:4], method="sm")
    t0 = time.perf_counter()
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=k, share="region", region_size=region_size)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = tgp.predict(model, Xt, method="sm", threads=threads)
    t_predict = time.perf_counter() - t0
    peak = _vm("VmHWM")
    built = model.n_factorized
    t0 = time.perf_counter()
    again = tgp.predict(model, Xt, method="sm", threads=threads)
    t_again = time.perf_counter() - t0
    assert np.array_equal(again.y, pred.y)
    out = {"n_train": n_train, "n_test": n_test, "k": k, "region_size": model.region_size, "dx": dx, "dy": dy,
           "n_regions": model.n_regions, "n_models": model.n_models, "n_factorized": built, "fit": t_fit,
           "predict": t_predict, "peak_mib": peak, "errors": _errors(pred.y, Yt),
           "extrapolated": int(pred.extrapolated.sum()), "again": t_again,
           "again_factorized": model.n_factorized - built,
           "cache_mib": model.cache.nbytes / 2**20, "cache_bytes": model.cache_bytes}
    s = slice(0, min(subsample, n_test))
    out["errors_region_sub"] = _errors(pred.y[s], Yt[s])
    knn = tgp.fit_local(X, Y, PARAMS, n_neighbors=k, share="none")
    t0 = time.perf_counter()
    ref = tgp.predict(knn, Xt[s], method="sm", threads=threads)
    t_knn = time.perf_counter() - t0
    out.update(knn_n=s.stop, knn_time=t_knn, knn_errors=_errors(ref.y, Yt[s]))
    return out


def run_per_point(n_train: int, n_test: int, k: int, threads: int | None, seed: int = 0, dx: int = 10,
                  dy: int = 8, latent: int = 3, dask_workers: int = 0, share: str = "none") -> dict:
    """Fit and predict every test point with KNN models (``share``; ``"default"``: ``fit_local``'s, not passed);
    returns the figures."""
    X, Xt, Y, Yt = datasets.smooth_manifold(seed, n_train=n_train, n_test=n_test, dx=dx, dy=dy, latent=latent)
    options = {} if share == "default" else {"share": share}
    tgp.predict(tgp.fit_local(X[:300], Y[:300], PARAMS, n_neighbors=50, **options), Xt[:4], method="sm")
    t0 = time.perf_counter()
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=k, **options)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    pred = tgp.predict(model, Xt, method="sm", threads=threads)
    t_predict = time.perf_counter() - t0
    out = {"n_train": n_train, "n_test": n_test, "k": k, "dx": dx, "dy": dy, "fit": t_fit, "predict": t_predict,
           "share": share if share != "default" else f"default: {model.share}",
           "peak_mib": _vm("VmHWM"), "errors": _errors(pred.y, Yt), "n_eval": float(pred.n_eval.mean()),
           "converged": float(pred.converged.mean()), "extrapolated": int(pred.extrapolated.sum()), "dask": None}
    if dask_workers:
        from distributed import Client, LocalCluster

        import fastsm.dask

        with LocalCluster(n_workers=dask_workers, threads_per_worker=1, processes=True) as cluster, \
                Client(cluster) as client:
            t0 = time.perf_counter()  # the model's broadcast and each worker's first (cached) compile included
            dist = fastsm.dask.predict(model, Xt, client=client, method="sm")
            t_dask = time.perf_counter() - t0
        out["dask"] = {"workers": dask_workers, "time": t_dask, "max_diff": float(np.abs(dist.y - pred.y).max()),
                       "bitwise": bool(np.array_equal(dist.y, pred.y))}
    return out


def report_per_point(r: dict) -> None:
    print(f"N = {r['n_train']}, {r['n_test']} test points, dx = {r['dx']}, dy = {r['dy']}, SMTGP, K = {r['k']}, "
          f"KNN models (share {r['share']!r})")
    print(f"  fit {r['fit']:.2f} s + predict {r['predict']:.2f} s = {r['fit'] + r['predict']:.2f} s; "
          f"peak memory {r['peak_mib']:.0f} MiB; test MAE {r['errors'][0]:.8f}, RMSE {r['errors'][1]:.8f}; "
          f"{r['n_eval']:.2f} evaluations a point, converged {r['converged']:.4f}; extrapolated {r['extrapolated']}")
    if r["dask"] is not None:
        d = r["dask"]
        print(f"  fastsm.dask.predict on a LocalCluster of {d['workers']} single-threaded worker processes: "
              f"{d['time']:.2f} s; max |y - y_in-process| {d['max_diff']:.1e} (bitwise equal: {d['bitwise']})")


def report(r: dict) -> None:
    n, m = r["n_test"], r["knn_n"]
    print(f"N = {r['n_train']}, {n} test points, dx = {r['dx']}, dy = {r['dy']}, SMTGP, K = {r['k']}")
    print(f"share='region': {r['n_regions']} regions of <= {r['region_size']} training points, "
          f"{r['n_models']} distinct models, {r['n_factorized']} factorised")
    print(f"  fit {r['fit']:.2f} s + predict {r['predict']:.2f} s = {r['fit'] + r['predict']:.2f} s; "
          f"peak memory {r['peak_mib']:.0f} MiB; test MAE {r['errors'][0]:.5f}, RMSE {r['errors'][1]:.5f}; "
          f"extrapolated {r['extrapolated']}")
    print(f"  repeated predict: {r['again']:.2f} s, {r['again_factorized']} models factorised "
          f"(cache {r['cache_mib']:.0f} MiB of {r['cache_bytes'] / 2**20:.0f} MiB)")
    print(f"on the first {m} test points: region MAE {r['errors_region_sub'][0]:.5f}, "
          f"RMSE {r['errors_region_sub'][1]:.5f}")
    print(f"  per-point KNN (share='none'): MAE {r['knn_errors'][0]:.5f}, RMSE {r['knn_errors'][1]:.5f}; "
          f"{r['knn_time']:.2f} s for {m} points, extrapolated to {n}: {r['knn_time'] * n / m:.0f} s")
    print(f"  region / per-point MAE: {r['errors_region_sub'][0] / r['knn_errors'][0]:.4f}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=100_000)
    ap.add_argument("--n-test", type=int, default=10_000)
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--region-size", type=int, default=None)
    ap.add_argument("--subsample", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dx", type=int, default=10)
    ap.add_argument("--dy", type=int, default=8)
    ap.add_argument("--latent", type=int, default=3)
    ap.add_argument("--share", choices=("region", "none", "default", "exact", "cluster"), default="region",
                    help="region: region models, per-point ones on --subsample points; none, exact, cluster: that mode "
                         "on every test point; default: fit_local's default mode (share not passed)")
    ap.add_argument("--dask", type=int, default=0, metavar="WORKERS",
                    help="with --share none: predict again on a LocalCluster of WORKERS processes")
    a = ap.parse_args(argv)
    if a.share != "region":
        report_per_point(run_per_point(a.n_train, a.n_test, a.k, a.threads, dx=a.dx, dy=a.dy, latent=a.latent,
                                       dask_workers=a.dask, share=a.share))
        return
    report(run(a.n_train, a.n_test, a.k, a.region_size, a.subsample, a.threads, dx=a.dx, dy=a.dy, latent=a.latent))


if __name__ == "__main__":
    main()
