"""KNN-local twin GPs for large training sets ([SM] §5.1.4).

Each test point is predicted by the model of its ``K`` nearest training
inputs (SciPy's KD-tree).  A model costs O(K^3) to factorise and O(K^2) per
objective evaluation instead of O(N^3) / O(N^2), and memory is bounded by
the groups in flight, not by ``N``.

What is shared (``share=``):

* ``"none"`` (default) — one factorisation per test point; KLTGP and SMTGP run
  many points per GIL-free kernel call (:func:`fastsm._kernels.knn.knn_rows`):
  the fastest mode on continuous inputs, where no two test points share a
  neighbour set (the 10^6-point job: docs/scale.md);
* ``"exact"`` — test points whose neighbour sets coincide share one
  factorisation (inputs on a grid, repeated test inputs), each group through
  the global model's path; the predictions are bitwise those of ``"none"``;
* ``"cluster"`` (beyond the paper) — test points are clustered (k-means on
  the test inputs, about ``group_size`` per cluster) and each cluster's
  model is fitted on the *union* of its members' neighbour sets: fewer, larger
  models, each containing every member's own ``K`` neighbours.
* ``"region"`` (beyond the paper) — regions of the input space chosen from
  the training inputs (:mod:`fastsm.tgp.regions`, about ``region_size``
  training points each); a test point uses the model of its region, fitted
  on the ``K`` training points nearest to the region's centroid, factorised
  once and cached in the model (``cache_bytes``); regions with the same ``K``
  nearest points share one model.  A prediction depends on the model and the
  point only.

Groups are factorised and predicted concurrently, one Python thread per
core: the factorisations call LAPACK without the GIL
(:mod:`fastsm._lapack`) and the Numba kernels release it, each group on one
thread, so results do not depend on the thread count.

Memory is bounded by a chunk of test points, not by their number: a
prediction takes the test points in fixed chunks of :func:`chunk_rows` rows
(``config.LOCAL_CHUNK_ENTRIES // K``; for ``"cluster"`` at least
``group_size``) and forms the groups of one chunk at a time.  For
``"none"`` and ``"exact"`` a point's prediction depends on nothing else
(bitwise).  For ``"cluster"`` it depends on the test points of its chunk,
by construction: the chunks are fixed by ``K`` and ``group_size`` alone, so
:func:`fastsm.dask.predict` cuts its blocks at chunk boundaries and matches
the in-process prediction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fastsm import config
from fastsm._kernels.knn import Local, knn_rows, outcome
from fastsm._kernels.objectives import SM
from fastsm._kernels.predict import GIVEN, Run
from fastsm._kernels.tri_rows import SOLVE_PLAN
from fastsm._memory import FIT_MATRICES, check_memory
from fastsm._progress import Progress
from fastsm._threads import Stopped, resolve_threads, stop_requested, thread_limits, worker_pool
from fastsm._validation import as_2d, check_choice, check_int
from fastsm.tgp import regions as _regions
from fastsm.tgp.fitting import MIN_PIVOT, check_training, own_factorisation
from fastsm.tgp.local_model import LOCAL_METHODS, SHARES, LocalTGPModel, fit_members, shared_model
from fastsm.tgp.model import Prediction, TGPParams, check_inputs
from fastsm.tgp.neighbours import chunk_rows, neighbour_groups, tree_order
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.prediction import (
    certainty_from,
    first_knn_run,
    kernel_run,
    predict_global,
    quiet,
    resolved_init,
    sm_value,
    warn_extrapolated,
)
from fastsm.tgp.views import eta_floor, with_row_products


def fit_local(X: ArrayLike, Y: ArrayLike, params: TGPParams | None = None, *, n_neighbors: int = 800,
              share: str = "none",
              group_size: int = 32, region_size: int | None = None, cache_bytes: int | None = None,
              eager: bool = False, threads: int | None = None, sample_weight: ArrayLike | None = None) -> LocalTGPModel:
    """A KNN-local twin GP: each test point gets the model of its ``n_neighbors`` nearest training inputs.

    Parameters
    ----------
    X, Y : array_like (N, dx), (N, dy)
    params : TGPParams, optional
    n_neighbors : int
        ``K`` ([SM] §5.1.4 uses 800); ``dy + 1 <= K <= N``.  ``K = N`` is the
        global model.
    share : {"none", "exact", "cluster", "region"}
        Factorisations shared between test points (module docstring); ``"none"``, the
        default, is the fastest on continuous inputs, ``"exact"`` gives bitwise its
        predictions and merges test points whose neighbour sets coincide.
    group_size : int
        Test points per cluster for ``share="cluster"``.
    region_size : int, optional
        ``share="region"``: training points per region, ``1 <= region_size
        <= N`` (regions hold between half of it and it); default
        ``max(1, K // 8)`` (``docs/scale.md``: choosing K and the region size).
    cache_bytes : int, optional
        ``share="region"``: bound on the bytes of factorised region models
        the model keeps, packed (least recently used evicted first); 0 keeps
        none.  Default :func:`fastsm.tgp.regions.default_cache_bytes`: an eighth of
        the machine's memory (or of a container's limit), within 256 MiB–2 GiB.
    eager : bool
        ``share="region"``: factorise every region's model now (for SMTGP
        and KLTGP), as far as ``cache_bytes`` holds them.
    threads : int, optional
        Threads for the regions' neighbour queries and ``eager`` (default: all of Numba's).
    sample_weight : array_like (N,), optional
        IW-TGP weights (docs/math.md §6), sliced per neighbourhood.

    Returns
    -------
    LocalTGPModel
        Unless ``eager``, nothing is factorised here: each local model is
        built (for the method asked) when :func:`fastsm.tgp.predict` needs
        it, with the same options as for a global model.
    """
    params = TGPParams() if params is None else params
    X, Y, _, w, params = check_training(X, Y, params, None, sample_weight)
    n, dy = Y.shape
    k = check_int("n_neighbors", n_neighbors, low=1)
    if k > n:
        raise ValueError(f"n_neighbors must be at most the number of training points ({n}), got {k}")
    if k < dy + 1:
        raise ValueError(f"n_neighbors must be at least dy + 1 = {dy + 1} (a local model needs more points than "
                         f"output dimensions), got {k}")
    check_choice("share", share, SHARES)
    group_size = check_int("group_size", group_size, low=1)
    check_memory(8.0 * FIT_MATRICES * k * k * resolve_threads(None), f"local models of n_neighbors = {k} points "
                 f"(one per thread)", "use fewer n_neighbors")
    if cache_bytes is not None:
        cache_bytes = check_int("cache_bytes", cache_bytes, low=0)
    if not isinstance(eager, (bool, np.bool_)):
        raise TypeError(f"eager must be a bool, got {type(eager).__name__}")
    if share == "region":
        region_size = max(1, k // 8) if region_size is None else check_int("region_size", region_size, low=1)
        if region_size > n:
            raise ValueError(f"region_size must be at most the number of training points ({n}), got {region_size}")
    elif region_size is not None or eager:
        raise ValueError(f"region_size and eager apply to share='region' only, not share={share!r}")
    model = LocalTGPModel(X=X, Y=Y, params=params, n_neighbors=k, sample_weight=w, share=share,
                          group_size=group_size, region_size=region_size or 0, cache_bytes=cache_bytes,
                          threads=threads)
    if eager:
        model.factorize_regions("sm", threads=threads)
    return model


class _KnnBlocks:
    """Per-point KNN models (``share="none"``) predicted many points per GIL-free call
    (:func:`fastsm._kernels.knn.knn_rows`), bitwise the per-point path's predictions; a point that
    path would refuse or treat specially (its errors, outputs without spread) is run by it."""

    def __init__(self, model: LocalTGPModel, X: np.ndarray, Y0, run: Run, out: dict, per_point) -> None:
        p = model.params
        weighted = model.sample_weight is not None
        # writable (the model's are read-only), as the weights the kernel gathers: one array type, one compile
        w = np.ones(1) if model.sample_weight is None else model.sample_weight.copy()
        self.local = Local(model.X, model.Y, w, weighted,
                           float(p.gamma_x), float(p.gamma_y), float(p.lambda_x), float(p.lambda_y), float(p.alpha),
                           float(p.beta), eta_floor(p), MIN_PIVOT)
        self.X, self.Y0, self.spec, self.out, self.per_point = X, Y0, run, out, per_point
        self.alpha, self.beta, self.method = float(p.alpha), float(p.beta), "sm" if run.method == SM else "kl"
        self.stop = np.zeros(1, dtype=np.int64)

    def run(self, block: tuple[np.ndarray, np.ndarray]) -> int:
        rows, members = block  # the block's test rows and their neighbours (unsorted)
        members = np.sort(members, axis=1)
        m, dy = members.shape[0], self.local.Y.shape[1]
        res = outcome(m, dy)
        y0 = self.Y0[rows] if self.spec.start == GIVEN else np.empty((m, dy))
        with thread_limits(1):
            knn_rows(self.local, self.X[rows], np.ascontiguousarray(members), np.ascontiguousarray(y0), self.spec,
                     SOLVE_PLAN, self.stop, res)
        if self.stop[0]:
            return 0
        out = self.out
        ex = res.extrapolated
        lc = np.full(m, -np.inf)
        own = (res.status == 0) & ~ex  # the rest: extrapolated, or left to the per-point path (its etas unset)
        lc[own] = certainty_from(self.alpha, res.eta_x[own], res.eta_y[own], res.eta_xy[own])
        out["y"][rows], out["it"][rows], out["ev"][rows], out["f"][rows] = res.y, res.n_iter, res.n_eval, res.criterion
        out["cv"][rows], out["h"][rows], out["ex"][rows], out["lc"][rows] = res.converged & ~ex, res.hits, ex, lc
        out["obj"][rows] = sm_value(res.criterion, self.method, self.beta)
        for q in np.flatnonzero(res.status != 0):
            self.per_point((rows[q:q + 1], members[q]))
        return m


def knn_blocks(model: LocalTGPModel, X: np.ndarray, Y0, opts: PredictOptions, out: dict,
               per_point) -> _KnnBlocks | None:
    """:class:`_KnnBlocks` where a prediction's per-point models are fitted by fastsm's own factorisation
    (``share="none"``, KLTGP or SMTGP, ``K < n_train``, :func:`~fastsm.tgp.fitting.own_factorisation`), else
    ``None``."""
    method = opts.method
    methods = LOCAL_METHODS[method]
    if model.share != "none" or method not in ("kl", "sm") or model.n_neighbors >= model.n_train \
            or not own_factorisation(model.n_neighbors, methods):
        return None
    chosen = resolved_init(opts.init, method)
    if isinstance(chosen, str):
        check_choice("init", chosen, ("linear", "kl"))
    first_knn_run()  # on a cold cache: a helper compiles half of the prediction's kernels meanwhile
    return _KnnBlocks(model, X, Y0, kernel_run(opts, model.Y.shape[1], given=Y0 is not None), out, per_point)


def predict_local(model: LocalTGPModel, X, opts: PredictOptions) -> Prediction:
    """:func:`fastsm.tgp.predict` for a :class:`LocalTGPModel` (validated options)."""
    X = check_inputs(model, X)
    method, init = opts.method, opts.init
    if method == "sm_cubic":
        raise ValueError("method='sm_cubic' (the O(N^3) reference form) is not available for local models")
    n, dy = X.shape[0], model.Y.shape[1]
    Y0 = None
    if init is not None and not isinstance(init, str):
        Y0 = as_2d("init", init)
        if Y0.shape != (n, dy):
            raise ValueError(f"init must have shape {(n, dy)} (n test points × dy), got {Y0.shape}")
    group_opts = dataclasses.replace(opts, threads=1, progress=False)  # one thread per group
    out = {"y": np.empty((n, dy)), "lc": np.empty(n), "it": np.empty(n, dtype=np.int64),
           "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "f": np.empty(n),
           "obj": np.empty(n), "h": np.empty(n, dtype=np.int64), "ex": np.empty(n, dtype=bool)}
    methods = LOCAL_METHODS[method]

    def run(group):
        with thread_limits(1):  # one thread per group; the calls inside find their limits set
            return _run(group)

    def _run(group):
        rows, members = group
        if stop_requested():  # Ctrl-C: the groups in flight end at their next stage
            return 0
        try:
            if model.share == "region":  # members: the region
                sub = shared_model(model, members, methods)
            else:
                sub = fit_members(model, members, methods)
        except Stopped:  # its factorisation, abandoned between stages
            return 0
        if stop_requested():
            return 0
        if model.share != "cluster":  # a region model from the cache: the row-loop choice is not packed
            sub = with_row_products(sub)
        with quiet():  # counted and reported once below
            p = predict_global(sub, X[rows], group_opts if Y0 is None else
                               dataclasses.replace(group_opts, init=Y0[rows]))
        out["y"][rows], out["lc"][rows], out["it"][rows], out["ev"][rows] = p.y, p.log_certainty, p.n_iter, p.n_eval
        out["cv"][rows], out["f"][rows], out["obj"][rows] = p.converged, p.criterion, p.objective
        out["h"][rows], out["ex"][rows] = p.n_eta_floor, p.extrapolated
        return len(rows)

    rows = n if model.share == "region" else chunk_rows(model)  # regions: O(n) labels, no (n, K) indices
    workers = resolve_threads(opts.threads)
    blocks = knn_blocks(model, X, Y0, opts, out, _run)
    order = tree_order(model, X, workers) if blocks is not None else None
    with Progress(opts.progress, n, "local predict") as bar, \
            worker_pool(workers, "fastsm-local") as pool:
        try:
            for s in range(0, n, rows):
                e = min(n, s + rows)
                groups: list[tuple[Any, Any]]
                work: Callable[[tuple[Any, Any]], int]
                if blocks is not None:  # per-point models, many points per kernel call, in tree order
                    assert order is not None
                    sel = order[s:e]
                    # sorted in the blocks, on the workers (a serial pass here took ~1 % of a 10^6 job)
                    idx = _regions.nearest(model.tree, X[sel], model.X, model.n_neighbors, workers)
                    groups = [(sel[b:b + config.KNN_BLOCK], idx[b:b + config.KNN_BLOCK])
                              for b in range(0, e - s, config.KNN_BLOCK)]
                    work = blocks.run
                else:
                    found = neighbour_groups(model, X[s:e], workers=workers)
                    groups = [(r + s, members) for r, members in found]
                    work = run
                if workers == 1 or len(groups) == 1:
                    for g in groups:
                        bar.step(work(g))
                else:
                    for done in pool.map(work, groups):
                        bar.step(done)
        except BaseException:
            if blocks is not None:
                blocks.stop[0] = 1  # the blocks in flight return after their current evaluation round
            raise
    ex = out["ex"]
    warn_extrapolated(ex, n, local=True)
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=out["obj"], criterion=out["f"], n_eta_floor=out["h"], extrapolated=ex, method=method)
