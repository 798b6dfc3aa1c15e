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
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.spatial import cKDTree

from fastsm import config
from fastsm._progress import Progress
from fastsm._threads import resolve_threads
from fastsm._validation import as_2d, check_choice, check_int
from fastsm.tgp.fitting import check_training, factorize
from fastsm.tgp.model import Prediction, TGPModel, TGPParams
from fastsm.tgp.prediction import _check_inputs, predict_global, quiet

SHARES = ("exact", "none", "cluster")


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
    share : {"exact", "none", "cluster"}
    group_size : int
        Test points per cluster for ``share="cluster"``.
    tree : scipy.spatial.cKDTree
        Over ``X``.
    """

    X: np.ndarray
    Y: np.ndarray
    params: TGPParams
    n_neighbors: int
    sample_weight: np.ndarray | None
    share: str
    group_size: int
    tree: cKDTree = field(init=False)

    def __post_init__(self) -> None:
        for name in ("X", "Y", "sample_weight"):
            a = getattr(self, name)
            if a is not None:
                a = np.array(a, dtype=np.float64, order="C", copy=True)
                a.setflags(write=False)
                object.__setattr__(self, name, a)
        object.__setattr__(self, "tree", cKDTree(self.X))

    @property
    def n_train(self) -> int:
        return self.X.shape[0]

    def __repr__(self) -> str:
        return (f"LocalTGPModel(n_train={self.n_train}, n_neighbors={self.n_neighbors}, share={self.share!r}, "
                f"params={self.params!r})")


def fit_local(X, Y, params: TGPParams | None = None, *, n_neighbors: int = 800, share: str = "exact",
              group_size: int = 32, sample_weight=None) -> LocalTGPModel:
    """A KNN-local twin GP: each test point gets the model of its ``n_neighbors`` nearest training inputs.

    Parameters
    ----------
    X, Y : array_like (N, dx), (N, dy)
    params : TGPParams, optional
    n_neighbors : int
        ``K`` ([SM] §5.1.4 uses 800); ``dy + 1 <= K <= N``.  ``K = N`` is the
        global model.
    share : {"exact", "none", "cluster"}
        Factorisations shared between test points (module docstring).
    group_size : int
        Test points per cluster for ``share="cluster"``.
    sample_weight : array_like (N,), optional
        IW-TGP weights (MATH §6), sliced per neighbourhood.

    Returns
    -------
    LocalTGPModel
        Nothing is factorised here: each local model is built (for the
        method asked) when :func:`fastsm.tgp.predict` needs it, with the
        same options as for a global model.
    """
    params = TGPParams() if params is None else params
    X, Y, _, w = check_training(X, Y, params, None, sample_weight)
    n, dy = Y.shape
    k = check_int("n_neighbors", n_neighbors, low=1)
    if k > n:
        raise ValueError(f"n_neighbors must be at most the number of training points ({n}), got {k}")
    if k < dy + 1:
        raise ValueError(f"n_neighbors must be at least dy + 1 = {dy + 1} (a local model needs more points than "
                         f"output dimensions), got {k}")
    check_choice("share", share, SHARES)
    group_size = check_int("group_size", group_size, low=1)
    return LocalTGPModel(X=X, Y=Y, params=params, n_neighbors=k, sample_weight=w, share=share,
                         group_size=group_size)


def chunk_rows(model: LocalTGPModel) -> int:
    """Test points whose groups are formed together (module docstring)."""
    rows = max(1, config.LOCAL_CHUNK_ENTRIES // model.n_neighbors)
    return max(rows, model.group_size) if model.share == "cluster" else rows


def _neighbours(model: LocalTGPModel, X: np.ndarray) -> np.ndarray:
    """Sorted indices of the ``K`` nearest training inputs of each row of ``X``, ``(n, K)``.

    Where squared distances overflow (inputs of magnitude ~1e154 and beyond)
    the KD-tree finds no neighbours; such a point is outside every kernel's
    support whatever its model, so it gets the neighbours of its projection
    onto the training inputs' bounding box and is predicted as extrapolated.
    """
    k = model.n_neighbors
    _, idx = model.tree.query(X, k=k)
    idx = idx.reshape(X.shape[0], k)
    lost = np.flatnonzero((idx >= model.n_train).any(axis=1))
    if lost.size:
        box = np.clip(X[lost], model.X.min(axis=0), model.X.max(axis=0))
        _, again = model.tree.query(box, k=k)
        again = again.reshape(lost.size, k)
        if (again >= model.n_train).any():
            raise ValueError("X: squared distances to the training inputs overflow float64 even inside their "
                             "bounding box; rescale the inputs")
        idx[lost] = again
    return np.sort(idx, axis=1)


def neighbour_groups(model: LocalTGPModel, X: np.ndarray, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(test rows, sorted training indices), ...]``: the local models a prediction of ``X`` needs.

    ``X`` is one chunk (:func:`chunk_rows`): the ``(n, K)`` neighbour
    indices are held at once.
    """
    k = model.n_neighbors
    if k == model.n_train:
        return [(np.arange(X.shape[0]), np.arange(k))]
    idx = _neighbours(model, X)
    if model.share == "none":
        return [(np.array([i]), idx[i]) for i in range(X.shape[0])]
    if model.share == "exact":
        uniq, inverse = np.unique(idx, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse, kind="stable")
        bounds = np.flatnonzero(np.diff(inverse[order])) + 1
        return [(rows, uniq[inverse[rows[0]]]) for rows in np.split(order, bounds)]
    n_groups = max(1, math.ceil(X.shape[0] / model.group_size))
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


def predict_local(model: LocalTGPModel, X, *, method: str, init, max_iter: int, tol: float, threads: int | None,
                  optimizer: str, trust_radius: float, batch_size: int, progress=False,
                  ftol: float = config.DEFAULT_FTOL) -> Prediction:
    """:func:`fastsm.tgp.predict` for a :class:`LocalTGPModel` (validated options)."""
    X = _check_inputs(model, X)
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
    methods = {"sm": ("kl", "sm"), "kl": ("kl",), "ikl": ("ikl",)}[method]

    def run(group):
        rows, members = group
        w = None if model.sample_weight is None else model.sample_weight[members]
        Xn, Yn = model.X[members], model.Y[members]
        sub = TGPModel._from_parts(Xn, Yn, model.params, methods,
                                   factorize(Xn, Yn, model.params, methods, threads=1, sample_weight=w), w,
                                   copy=False)
        with quiet():  # counted and reported once below
            p = predict_global(sub, X[rows], method=method, init=init if Y0 is None else Y0[rows],
                               max_iter=max_iter, tol=tol, threads=1, optimizer=optimizer, trust_radius=trust_radius,
                               batch_size=batch_size, progress=False, ftol=ftol)
        out["y"][rows], out["lc"][rows], out["it"][rows], out["ev"][rows] = p.y, p.log_certainty, p.n_iter, p.n_eval
        out["cv"][rows], out["f"][rows], out["obj"][rows] = p.converged, p.criterion, p.objective
        out["h"][rows], out["ex"][rows] = p.n_eta_floor, p.extrapolated
        return len(rows)

    rows = chunk_rows(model)
    workers = resolve_threads(threads)
    with Progress(progress, n, "local predict") as bar, \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fastsm-local") as pool:
        for s in range(0, n, rows):
            e = min(n, s + rows)
            groups = [(r + s, members) for r, members in neighbour_groups(model, X[s:e])]
            if workers == 1 or len(groups) == 1:
                for g in groups:
                    bar.step(run(g))
            else:
                for done in pool.map(run, groups):
                    bar.step(done)
    ex = out["ex"]
    if ex.any():
        warnings.warn(f"{int(ex.sum())} of {n} test inputs lie outside their local training inputs' kernel support: "
                      "their prediction is the start unchanged; see Prediction.extrapolated", RuntimeWarning,
                      stacklevel=3)
    return Prediction(y=out["y"], log_certainty=out["lc"], n_iter=out["it"], n_eval=out["ev"], converged=out["cv"],
                      objective=out["obj"], criterion=out["f"], n_eta_floor=out["h"], extrapolated=ex, method=method)
