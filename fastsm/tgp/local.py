"""KNN-local twin GPs for large training sets ([SM] §5.1.4).

Each test point is predicted by the model of its ``K`` nearest training
inputs (SciPy's KD-tree).  A model costs O(K^3) to factorise and O(K^2) per
objective evaluation instead of O(N^3) / O(N^2), and memory is bounded by
the groups in flight, not by ``N``.

What is shared (``share=``):

* ``"none"`` — one factorisation per test point;
* ``"exact"`` (default) — test points whose neighbour sets coincide share one
  factorisation; the predictions are bitwise those of ``"none"``;
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

import math
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.cluster.vq import kmeans2
from scipy.spatial import cKDTree

from fastsm import config
from fastsm._kernels.knn import Local, knn_rows, outcome
from fastsm._kernels.objectives import KL, SM
from fastsm._kernels.predict import GIVEN, KL_START, LINEAR, Run
from fastsm._memory import FIT_MATRICES, check_memory
from fastsm._products import ROW_SOLVE_PLAN
from fastsm._progress import Progress
from fastsm._threads import resolve_threads, stop_requested, thread_limits, worker_pool
from fastsm._validation import as_2d, check_choice, check_int
from fastsm.tgp import regions as _regions
from fastsm.tgp.fitting import MIN_PIVOT, check_training, cholesky_form, factorize, factorize_cholesky
from fastsm.tgp.model import Prediction, TGPModel, TGPParams, check_inputs
from fastsm.tgp.prediction import (
    certainty_from,
    eta_floor,
    kl_start_iterations,
    predict_global,
    quiet,
    sm_value,
    use_row_products,
    warn_extrapolated,
)

SHARES = ("exact", "none", "cluster", "region")


@dataclass(frozen=True, eq=False, repr=False)
class LocalTGPModel:
    """Training data and a KD-tree for KNN-local prediction (:func:`fit_local`).

    Attributes
    ----------
    X, Y : ndarray
        Training inputs and outputs (read-only copies).
    params : TGPParams
    n_neighbors : int
        ``K``, the training points of each local model.
    sample_weight : ndarray or None
    share : {"exact", "none", "cluster", "region"}
    group_size : int
        Test points per cluster for ``share="cluster"``.
    region_size : int
        Training points per region for ``share="region"`` (0 otherwise).
    cache_bytes : int
        Bound on the bytes of factorised region models kept (``share="region"``).
        Default :func:`fastsm.tgp.regions.default_cache_bytes` (from the machine's memory).
    tree : scipy.spatial.cKDTree
        Over ``X``.
    centers : ndarray (n_regions, dx) or None
        The regions' centroids (``share="region"``).
    members : ndarray (n_regions, K) or None
        Sorted training indices of each region's model.
    model_of : ndarray (n_regions,) or None
        The model of each region: regions with equal ``members`` share one
        (``share="region"``).
    first_region : ndarray (n_models,) or None
        The first region of each model (models are numbered in that order).
    """

    X: np.ndarray
    Y: np.ndarray
    params: TGPParams
    n_neighbors: int
    sample_weight: np.ndarray | None
    share: str
    group_size: int
    region_size: int = 0
    cache_bytes: int | None = None
    tree: cKDTree = field(init=False)
    centers: np.ndarray | None = field(init=False, default=None)
    members: np.ndarray | None = field(init=False, default=None)
    model_of: np.ndarray | None = field(init=False, default=None)
    first_region: np.ndarray | None = field(init=False, default=None)
    center_tree: cKDTree | None = field(init=False, default=None)
    cache: _regions.ModelCache = field(init=False)
    threads: InitVar[int | None] = None  # the regions' neighbour queries (not kept)

    def __post_init__(self, threads: int | None) -> None:
        for name in ("X", "Y", "sample_weight"):
            a = getattr(self, name)
            if a is not None:
                a = np.array(a, dtype=np.float64, order="C", copy=True)
                a.setflags(write=False)
                object.__setattr__(self, name, a)
        if not isinstance(self.params, TGPParams):
            raise TypeError(f"params must be a TGPParams, got {type(self.params).__name__}")
        if not self.params.resolved:  # fit_local resolves them; a model built directly does it here
            object.__setattr__(self, "params", self.params.resolve(self.X, self.Y, self.sample_weight))
        check_choice("share", self.share, SHARES)
        if self.share == "region":
            object.__setattr__(self, "region_size", check_int("region_size", self.region_size, low=1))
        budget = _regions.default_cache_bytes() if self.cache_bytes is None else self.cache_bytes
        object.__setattr__(self, "cache_bytes", budget)
        # sliding-midpoint splits: at N = 10^6, dx = 12 built in 0.60 s instead of 0.71 and K = 200
        # queries ~10 % faster than on the median-split tree (the same neighbour sets; docs/scale.md)
        object.__setattr__(self, "tree", cKDTree(self.X, balanced_tree=False))
        object.__setattr__(self, "cache", _regions.ModelCache(budget))
        if self.share == "region":
            centers = _regions.partition(self.X, self.region_size)
            members = np.sort(_regions.nearest(self.tree, centers, self.X, self.n_neighbors,
                                               resolve_threads(threads)), axis=1)
            model_of, first = _regions.shared_models(members)
            for name, a in (("centers", centers), ("members", members), ("model_of", model_of),
                            ("first_region", first)):
                a.setflags(write=False)
                object.__setattr__(self, name, a)
            object.__setattr__(self, "center_tree", cKDTree(centers))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["cache"]  # factorised models stay in their process (and a lock cannot travel)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        object.__setattr__(self, "cache", _regions.ModelCache(int(self.cache_bytes or 0)))

    @property
    def n_train(self) -> int:
        return self.X.shape[0]

    @property
    def n_regions(self) -> int:
        """Regions (``share="region"``; 0 otherwise)."""
        return 0 if self.centers is None else self.centers.shape[0]

    @property
    def n_models(self) -> int:
        """Distinct region models (regions with equal members share one; ``share="region"``, 0 otherwise)."""
        return 0 if self.first_region is None else self.first_region.size

    @property
    def n_factorized(self) -> int:
        """Region models factorised by this model object so far (``share="region"``)."""
        return self.cache.n_factorized

    def regions_of(self, X: ArrayLike) -> np.ndarray:
        """The region of each row of ``X`` (its nearest centroid), ``(n,)`` int64."""
        if self.share != "region":
            raise ValueError(f"regions_of needs a model fitted with share='region', not {self.share!r}")
        X = check_inputs(self, X)
        assert self.center_tree is not None and self.centers is not None  # set by share='region'
        return _regions.nearest(self.center_tree, X, self.centers, 1)[:, 0].astype(np.int64)

    def factorize_regions(self, method: str = "sm", regions: ArrayLike | None = None, *,
                          threads: int | None = None) -> int:
        """Factorise the models of ``regions`` (default: all) for ``method`` now; returns how many were built.

        The models are cached as by a prediction (within ``cache_bytes``);
        with ``eager=True`` :func:`fit_local` calls this for every region.
        """
        if self.share != "region":
            raise ValueError(f"factorize_regions needs a model fitted with share='region', not {self.share!r}")
        check_choice("method", method, ("kl", "ikl", "sm"))
        if regions is None:
            todo = np.arange(self.n_regions)
        else:
            r = np.asarray(regions)
            if r.dtype.kind not in "iu":
                raise TypeError(f"regions must be integer region indices, got {r.dtype} values")
            if r.size and (r.min() < 0 or r.max() >= self.n_regions):
                raise ValueError(f"regions must lie in [0, {self.n_regions}), got {r.min()}..{r.max()}")
            todo = np.unique(r.astype(np.int64).reshape(-1))
        assert self.model_of is not None  # share='region'
        keys = np.unique(self.model_of[todo])
        before = self.cache.n_factorized
        with worker_pool(resolve_threads(threads), "fastsm-local") as pool:
            list(pool.map(lambda m: _shared_model(self, int(m), _METHODS[method]), keys))
        return self.cache.n_factorized - before

    def __repr__(self) -> str:
        extra = f", n_regions={self.n_regions}" if self.share == "region" else ""
        return (f"LocalTGPModel(n_train={self.n_train}, n_neighbors={self.n_neighbors}, share={self.share!r}"
                f"{extra}, params={self.params!r})")


_METHODS = {"sm": ("kl", "sm"), "kl": ("kl",), "ikl": ("ikl",)}


def local_model(X: np.ndarray, Y: np.ndarray, params: TGPParams, methods: tuple[str, ...], *,
                sample_weight: np.ndarray | None = None, rows: bool = True) -> TGPModel:
    """The twin GP a local prediction builds for its training points ``X``, ``Y`` (checked, float64
    C-contiguous; ``params`` resolved), single-threaded (groups run side by side).

    With ``rows`` (one or a few points per model: ``share`` other than ``"cluster"``) a model of
    at most ``config.ROW_PRODUCTS_MAX_N`` points multiplies by row loops, and for KLTGP and SMTGP
    it is kept in Cholesky form (:func:`fastsm.tgp.fitting.factorize_cholesky`: no inverse
    formed, substitutions instead of products).
    """
    if rows and cholesky_form(X.shape[0], methods):
        parts = factorize_cholesky(X, Y, params, sample_weight)
    else:
        parts = factorize(X, Y, params, methods, threads=1, sample_weight=sample_weight)
    model = TGPModel._from_parts(X, Y, params, methods, parts, sample_weight, copy=False)
    if rows:
        use_row_products(model)
    return model


def _fit_members(model: LocalTGPModel, members: np.ndarray, methods: tuple[str, ...]) -> TGPModel:
    """The twin GP of the training points ``members`` (:func:`local_model`)."""
    w = None if model.sample_weight is None else model.sample_weight[members]
    return local_model(model.X[members], model.Y[members], model.params, methods, sample_weight=w,
                       rows=model.share != "cluster")


def _shared_model(model: LocalTGPModel, key: int, methods: tuple[str, ...]) -> TGPModel:
    """Region model ``key`` (an index into ``model.first_region``), from the cache or built now."""
    members, first = model.members, model.first_region
    assert members is not None and first is not None  # share='region'
    return model.cache.get(key, methods, lambda wanted: _fit_members(model, members[first[key]], wanted))


def fit_local(X: ArrayLike, Y: ArrayLike, params: TGPParams | None = None, *, n_neighbors: int = 800,
              share: str = "exact",
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
    share : {"exact", "none", "cluster", "region"}
        Factorisations shared between test points (module docstring).
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


def chunk_rows(model: LocalTGPModel) -> int:
    """Test points whose groups are formed together (module docstring)."""
    rows = max(1, config.LOCAL_CHUNK_ENTRIES // model.n_neighbors)
    return max(rows, model.group_size) if model.share == "cluster" else rows


def _neighbours(model: LocalTGPModel, X: np.ndarray, workers: int = 1) -> np.ndarray:
    """Sorted indices of the ``K`` nearest training inputs of each row of ``X``, ``(n, K)``.

    Inputs whose squared distances overflow get the neighbours of their
    projection onto the training inputs' bounding box
    (:func:`fastsm.tgp.regions.nearest`) and are predicted as extrapolated.
    """
    return np.sort(_regions.nearest(model.tree, X, model.X, model.n_neighbors, workers), axis=1)


def tree_order(model: LocalTGPModel, X: np.ndarray, workers: int = 1) -> np.ndarray:
    """The rows of ``X`` ordered by where their nearest training input sits in the KD-tree's leaves.

    Consecutive rows are then near each other: their ``K``-neighbour queries walk the same branches
    and their members are the same training rows, found in cache (N = 10^6, dx = 12, K = 200, two
    threads: 0.140 ms a query in random order, 0.069 in this one plus 0.009 for the 1-NN query,
    docs/scale.md).  A row's neighbours and prediction do not depend on the order.
    """
    pos = np.empty(model.n_train, dtype=np.int64)
    pos[model.tree.indices] = np.arange(model.n_train)
    return np.argsort(pos[_regions.nearest(model.tree, X, model.X, 1, workers)[:, 0]], kind="stable")


def neighbour_groups(model: LocalTGPModel, X: np.ndarray, seed: int = 0,
                     workers: int = 1) -> list[tuple[np.ndarray, Any]]:
    """``[(test rows, sorted training indices), ...]``: the local models a prediction of ``X`` needs.

    With ``share='region'`` the second entry is the region model (an int,
    :attr:`LocalTGPModel.model_of`).  ``X`` is one chunk (:func:`chunk_rows`):
    the ``(n, K)`` neighbour indices are held at once.  The KD-tree queries run on ``workers``
    threads (each row's neighbours are its own).
    """
    k = model.n_neighbors
    if model.share == "region":  # [(test rows, region model)], models in increasing order
        assert model.center_tree is not None and model.centers is not None and model.model_of is not None
        labels = model.model_of[_regions.nearest(model.center_tree, X, model.centers, 1, workers)[:, 0]]
        order = np.argsort(labels, kind="stable")
        bounds = np.flatnonzero(np.diff(labels[order])) + 1
        return [(rows, int(labels[rows[0]])) for rows in np.split(order, bounds) if rows.size]
    if k == model.n_train:
        return [(np.arange(X.shape[0]), np.arange(k))]
    idx = _neighbours(model, X, workers)
    if model.share == "none":
        return [(np.array([i]), idx[i]) for i in range(X.shape[0])]
    if model.share == "exact":
        uniq, inverse = np.unique(idx, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")
        bounds = np.flatnonzero(np.diff(inverse[order])) + 1
        return [(rows, uniq[inverse[rows[0]]]) for rows in np.split(order, bounds)]
    n_groups = max(1, math.ceil(X.shape[0] / model.group_size))
    if n_groups > 1:  # never more clusters than distinct rows (k-means++ then divides by 0 and empties clusters)
        n_groups = min(n_groups, np.unique(X, axis=0).shape[0])
    if n_groups == 1:
        labels = np.zeros(X.shape[0], dtype=int)
    else:
        big = np.abs(X).max()
        # squared distances of inputs beyond ~1e150 overflow inside k-means (NaN seeding probabilities, and
        # SciPy then indexes out of bounds): scale by a power of two, exact, and only where needed
        Z = X * 2.0 ** -np.ceil(np.log2(big)) if big > 1e150 else X
        _, labels = kmeans2(Z, n_groups, minit="++", seed=seed)
    groups = []
    for g in np.unique(labels):
        rows = np.flatnonzero(labels == g)
        groups.append((rows, np.unique(idx[rows])))
    return groups


class _KnnBlocks:
    """Per-point KNN models (``share="none"``) predicted many points per GIL-free call
    (:func:`fastsm._kernels.knn.knn_rows`), bitwise the per-point path's predictions; a point that
    path would refuse or treat specially (its errors, outputs without spread) is run by it."""

    def __init__(self, model: LocalTGPModel, X: np.ndarray, Y0, run: Run, out: dict, staged) -> None:
        p = model.params
        weighted = model.sample_weight is not None
        w = model.sample_weight if model.sample_weight is not None else np.ones(1)
        self.local = Local(model.X, model.Y, w, weighted,
                           float(p.gamma_x), float(p.gamma_y), float(p.lambda_x), float(p.lambda_y), float(p.alpha),
                           float(p.beta), eta_floor(p), MIN_PIVOT)
        self.X, self.Y0, self.spec, self.out, self.staged = X, Y0, run, out, staged
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
                     ROW_SOLVE_PLAN, self.stop, res)
        if self.stop[0]:
            return 0
        out = self.out
        ex = res.extrapolated
        lc = certainty_from(self.alpha, res.eta_x, res.eta_y, res.eta_xy)
        lc[ex] = -np.inf
        out["y"][rows], out["it"][rows], out["ev"][rows], out["f"][rows] = res.y, res.n_iter, res.n_eval, res.criterion
        out["cv"][rows], out["h"][rows], out["ex"][rows], out["lc"][rows] = res.converged & ~ex, res.hits, ex, lc
        out["obj"][rows] = sm_value(res.criterion, self.method, self.beta)
        for q in np.flatnonzero(res.status != 0):
            self.staged((rows[q:q + 1], members[q]))
        return m


def _knn_blocks(model: LocalTGPModel, X: np.ndarray, Y0, method: str, init, out: dict, staged, *, max_iter: int,
                tol: float, optimizer: str, trust_radius: float, ftol: float) -> _KnnBlocks | None:
    """:class:`_KnnBlocks` where a prediction's per-point models are in Cholesky form
    (``share="none"``, KLTGP or SMTGP, ``K < n_train``), else ``None``."""
    methods = _METHODS[method]
    if model.share != "none" or method not in ("kl", "sm") or model.n_neighbors >= model.n_train \
            or not cholesky_form(model.n_neighbors, methods):
        return None
    chosen = ("kl" if method == "sm" else "linear") if init is None else init
    if isinstance(chosen, str):
        check_choice("init", chosen, ("linear", "kl"))
    mode = GIVEN if Y0 is not None else LINEAR if chosen == "linear" else KL_START
    dy = model.Y.shape[1]
    spec = Run(SM if method == "sm" else KL, mode, max_iter, kl_start_iterations(max_iter), tol, ftol, trust_radius,
               optimizer == "bfgs", config.DEFAULT_WINDOW, 1, optimizer == "bfgs" and method == "sm"
               and dy <= config.SM_HESSIAN_MAX_DY, config.DEFAULT_BATCH_SIZE)
    return _KnnBlocks(model, X, Y0, spec, out, staged)


def predict_local(model: LocalTGPModel, X, *, method: str, init, max_iter: int, tol: float, threads: int | None,
                  optimizer: str, trust_radius: float, batch_size: int, progress=False,
                  ftol: float = config.DEFAULT_FTOL) -> Prediction:
    """:func:`fastsm.tgp.predict` for a :class:`LocalTGPModel` (validated options)."""
    X = check_inputs(model, X)
    if method == "sm_cubic":
        raise ValueError("method='sm_cubic' (the O(N^3) reference form) is not available for local models")
    n, dy = X.shape[0], model.Y.shape[1]
    Y0 = None
    if init is not None and not isinstance(init, str):
        Y0 = as_2d("init", init)
        if Y0.shape != (n, dy):
            raise ValueError(f"init must have shape {(n, dy)} (n test points × dy), got {Y0.shape}")
    out = {"y": np.empty((n, dy)), "lc": np.empty(n), "it": np.empty(n, dtype=np.int64),
           "ev": np.empty(n, dtype=np.int64), "cv": np.empty(n, dtype=bool), "f": np.empty(n),
           "obj": np.empty(n), "h": np.empty(n, dtype=np.int64), "ex": np.empty(n, dtype=bool)}
    methods = _METHODS[method]

    def run(group):
        with thread_limits(1):  # one thread per group; the calls inside find their limits set
            return _run(group)

    def _run(group):
        rows, members = group
        if stop_requested():  # Ctrl-C: the groups in flight end at their next stage
            return 0
        if model.share == "region":  # members: the region
            sub = _shared_model(model, members, methods)
        else:
            sub = _fit_members(model, members, methods)
        if stop_requested():
            return 0
        if model.share != "cluster":  # a region model from the cache: the flag is not packed
            use_row_products(sub)
        with quiet():  # counted and reported once below
            p = predict_global(sub, X[rows], method=method, init=init if Y0 is None else Y0[rows],
                               max_iter=max_iter, tol=tol, threads=1, optimizer=optimizer, trust_radius=trust_radius,
                               batch_size=batch_size, progress=False, ftol=ftol)
        out["y"][rows], out["lc"][rows], out["it"][rows], out["ev"][rows] = p.y, p.log_certainty, p.n_iter, p.n_eval
        out["cv"][rows], out["f"][rows], out["obj"][rows] = p.converged, p.criterion, p.objective
        out["h"][rows], out["ex"][rows] = p.n_eta_floor, p.extrapolated
        return len(rows)

    rows = n if model.share == "region" else chunk_rows(model)  # regions: O(n) labels, no (n, K) indices
    workers = resolve_threads(threads)
    blocks = _knn_blocks(model, X, Y0, method, init, out, _run, max_iter=max_iter, tol=tol, optimizer=optimizer,
                         trust_radius=trust_radius, ftol=ftol)
    order = tree_order(model, X, workers) if blocks is not None else None
    with Progress(progress, n, "local predict") as bar, \
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
