"""KNN-local predictions (``share="none"``) on the GPU engine: each test point's twin GP of its ``K`` nearest
training points, fitted and predicted on the device, many points at a time.

As :func:`fastsm._kernels.knn.knn_rows` does on the CPU, per point: the members (the model's KD-tree, on the
host), the ridge start and output spread (:func:`fastsm._kernels.ridge.ridge_starts`, the CPU path's kernel,
on the host), ``K_X``, ``K_Y`` and ``K_XY = (1-a) K_X + a K_Y`` with the noise on the diagonal and their
Cholesky factors (batched on the device, :func:`~fastsm.cuda.linalg.batched_cholesky`), then
:func:`fastsm.cuda.engine.predict_chunk` with a :class:`~fastsm.cuda.evaluation.PointModels` view: every
product a batched substitution with the point's own factor.  A point the CPU path would refuse or treat
specially (a factorisation that fails or has a pivot below ``MIN_PIVOT``, outputs without spread, a ridge
start that overflows) is predicted by the CPU path.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastsm._kernels.ridge import ridge_starts
from fastsm._threads import resolve_threads, run_chunks, thread_limits
from fastsm.cuda.backend import Backend
from fastsm.cuda.engine import empty_outputs, predict_chunk, prediction, refuse, start_mode
from fastsm.cuda.evaluation import PointModels, kernels_of, rbf, sq_distances
from fastsm.cuda.linalg import batched_cholesky
from fastsm.tgp import regions
from fastsm.tgp.fitting import MIN_PIVOT
from fastsm.tgp.local import predict_local as cpu_predict_local
from fastsm.tgp.local_model import LocalTGPModel
from fastsm.tgp.model import Prediction
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.prediction import quiet, warn_extrapolated
from fastsm.tgp.views import read_only

#: Doubles a test point's chunk holds per ``K^2`` at the peak: its three factors, the kernel matrices they come
#: from with their temporaries, and a round's copies of the factors of the points in flight.
WORDS_PER_K2 = 16


def chunk_bytes(k: int, dx: int, dy: int) -> int:
    """Device bytes one test point of a local chunk needs."""
    return 8 * k * (k * WORDS_PER_K2 + 16 + 8 * dy + dx)


def _gram(xp, Z, gamma: float, noise):
    """``K = exp(-gamma ||z_i - z_j||^2) + diag(noise)`` of each point's members ``Z`` (``m × K × d``)."""
    K = rbf(xp, sq_distances(xp, Z, Z), gamma)
    k = Z.shape[1]
    diag = xp.arange(k)
    K[:, diag, diag] = 1.0 + noise
    return K


def host_starts(model: LocalTGPModel, X: np.ndarray, members: np.ndarray, Y0, threads: int | None = None):
    """Per point on the host: the ridge start (or the given one ``Y0``), the spread, and whether the CPU path must
    take it (:func:`fastsm._kernels.ridge.ridge_starts`, on ``threads`` threads)."""
    weighted = model.sample_weight is not None
    w = model.sample_weight if model.sample_weight is not None else np.ones(1)
    given = Y0 is not None
    start = Y0 if Y0 is not None else np.empty((0, model.Y.shape[1]))
    # read-only C views of all six: one compiled version whatever the flags of the caller's arrays (a frozen
    # model, an unpickled one and read-only inputs compiled three, ~15 s each on 2 cores)
    Xt, Yt, wt, mt, Xq, Yq = (read_only(np.ascontiguousarray(a)) for a in (model.X, model.Y, w, members, X, start))
    n = mt.shape[0]
    starts, spread, refused = np.empty((n, model.Y.shape[1])), np.empty(n), np.empty(n, dtype=bool)

    def chunk(s: int, e: int) -> None:
        starts[s:e], spread[s:e], refused[s:e] = ridge_starts(Xt, Yt, wt, weighted, mt[s:e], Xq[s:e],
                                                              Yq[s:e] if given else Yq, given)

    with thread_limits(threads) as workers:
        run_chunks(n, workers, chunk)
    return starts, spread, refused


def _factors(be: Backend, model: LocalTGPModel, members: np.ndarray):
    """The three factors of every point's model on the device, and whether each model is usable
    (:func:`fastsm._kernels.cholesky.twin_factors`' checks)."""
    xp = be.xp
    p = model.params
    kern = kernels_of(model)
    Xm = be.to_device(model.X[members])
    Zm = be.to_device(model.Y[members])
    if model.sample_weight is not None:
        w = be.to_device(model.sample_weight[members])
        nx, ny = p.lambda_x / w, p.lambda_y / w
    else:
        nx, ny = p.lambda_x, p.lambda_y
    Kx = _gram(xp, Xm, kern.gamma_x, nx)
    Ky = _gram(xp, Zm, kern.gamma_y, ny)
    a = kern.alpha
    Kxy = (1.0 - a) * Kx + a * Ky
    factors = {}
    usable = xp.ones(members.shape[0], dtype=bool)
    for name, K in (("Wx", Kx), ("Wy", Ky), ("Wxy", Kxy)):
        L, ok = batched_cholesky(xp, K)
        factors[name] = L
        usable = usable & ok & (xp.diagonal(L, axis1=1, axis2=2) >= MIN_PIVOT).all(axis=1)
    return Xm, Zm, factors, usable


def predict_local(be: Backend, model: LocalTGPModel, X: np.ndarray, opts: PredictOptions,
                  chunk_size: int | None) -> Prediction:
    """:func:`fastsm.cuda.predict` of a KNN-local model (``share="none"``) for validated host inputs ``X``."""
    method = opts.method
    n, dx = X.shape
    dy = model.Y.shape[1]
    k = model.n_neighbors
    Y0 = None if opts.init is None or isinstance(opts.init, str) else np.asarray(opts.init, dtype=np.float64)
    if Y0 is not None and Y0.shape != (n, dy):
        raise ValueError(f"init must have shape {(n, dy)} (n test points × dy), got {Y0.shape}")
    mode = start_mode(opts.init, method)
    per_point = chunk_bytes(k, dx, dy)
    free = be.free_bytes()
    refuse(per_point, free, f"one test point's model of {k} neighbours", be.name)
    rows = chunk_size if chunk_size is not None else n if free is None else max(1, free // (2 * per_point))
    rows = max(1, min(n, rows))
    kern = kernels_of(model)
    out = empty_outputs(n, dy)
    workers = resolve_threads(None)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        members = np.sort(regions.nearest(model.tree, X[s:e], model.X, k, workers), axis=1)
        starts, spread, cpu = host_starts(model, X[s:e], members, None if Y0 is None else Y0[s:e], workers)
        Xm, Zm, factors, usable = _factors(be, model, members)
        gpu = np.flatnonzero(~cpu & be.to_host(usable))
        cpu_rows = np.setdiff1d(np.arange(e - s), gpu)
        if gpu.size:
            g = be.xp.asarray(gpu)
            view = PointModels(be, Xm[g], Zm[g], {name: L[g] for name, L in factors.items()},
                               be.to_device(spread[gpu]))
            part = predict_chunk(be.xp, view, kern, method, model.params.beta, be.to_device(X[s:e][gpu]),
                                 be.to_device(starts[gpu]), opts, mode)
            for key, value in part.items():
                out[key][s + gpu] = be.to_host(value)
        if cpu_rows.size:  # the CPU path, which raises its errors or handles the point
            sub = dataclasses.replace(opts, init=Y0[s:e][cpu_rows] if Y0 is not None else opts.init)
            with quiet():
                p = cpu_predict_local(model, X[s:e][cpu_rows], sub)
            for key, value in (("y", p.y), ("f", p.criterion), ("it", p.n_iter), ("ev", p.n_eval),
                               ("cv", p.converged), ("h", p.n_eta_floor), ("lc", p.log_certainty),
                               ("ex", p.extrapolated)):
                out[key][s + cpu_rows] = value
    warn_extrapolated(out["ex"], n, local=True)
    return prediction(out, method, model.params.beta)
