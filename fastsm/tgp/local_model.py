"""The model of a KNN-local twin GP (:class:`LocalTGPModel`) and the twin GPs it builds for groups of
training points (:func:`local_model`); :func:`fastsm.tgp.local.fit_local` makes one and
:func:`fastsm.tgp.local.predict_local` predicts with it (the module docstring there says what is shared).
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from fastsm._threads import resolve_threads, worker_pool
from fastsm._validation import check_choice, check_int
from fastsm.tgp import regions as _regions
from fastsm.tgp.fitting import factorize, factorize_cholesky, own_factorisation
from fastsm.tgp.model import TGPModel, TGPParams, check_inputs
from fastsm.tgp.views import with_row_products

if TYPE_CHECKING:
    from scipy.spatial import cKDTree

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
        from scipy.spatial import cKDTree  # here, not at import: scipy.spatial takes ~0.2 s to import

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
            list(pool.map(lambda m: shared_model(self, int(m), LOCAL_METHODS[method]), keys))
        return self.cache.n_factorized - before

    def __repr__(self) -> str:
        extra = f", n_regions={self.n_regions}" if self.share == "region" else ""
        return (f"LocalTGPModel(n_train={self.n_train}, n_neighbors={self.n_neighbors}, share={self.share!r}"
                f"{extra}, params={self.params!r})")


#: The methods a local model for ``method`` is factorised for (SMTGP starts from KLTGP).
LOCAL_METHODS = {"sm": ("kl", "sm"), "kl": ("kl",), "ikl": ("ikl",)}


def local_model(X: np.ndarray, Y: np.ndarray, params: TGPParams, methods: tuple[str, ...], *,
                sample_weight: np.ndarray | None = None, rows: bool = True) -> TGPModel:
    """The twin GP a local prediction builds for its training points ``X``, ``Y`` (checked, float64
    C-contiguous; ``params`` resolved), single-threaded (groups run side by side).

    The model is in Cholesky form (no inverse formed; substitutions with ``L``, not products with
    ``W = L^-1``).  With ``rows`` (one or a few points per model: ``share`` other than ``"cluster"``) a
    model of at most ``config.ROW_PRODUCTS_MAX_N`` points predicts KLTGP and SMTGP by the fused kernel
    (:func:`fastsm.tgp.views.with_row_products`) and, without IKLTGP, is factorised by one GIL-free kernel
    (:func:`fastsm.tgp.fitting.factorize_cholesky`); the others by LAPACK (:func:`fastsm.tgp.fitting.factorize`).
    """
    if rows and own_factorisation(X.shape[0], methods):
        parts = factorize_cholesky(X, Y, params, sample_weight)
    else:
        parts = factorize(X, Y, params, methods, threads=1, sample_weight=sample_weight)
    model = TGPModel._from_parts(X, Y, params, methods, parts, sample_weight, copy=False)
    return with_row_products(model) if rows else model


def fit_members(model: LocalTGPModel, members: np.ndarray, methods: tuple[str, ...]) -> TGPModel:
    """The twin GP of the training points ``members`` (:func:`local_model`)."""
    w = None if model.sample_weight is None else model.sample_weight[members]
    return local_model(model.X[members], model.Y[members], model.params, methods, sample_weight=w,
                       rows=model.share != "cluster")


def shared_model(model: LocalTGPModel, key: int, methods: tuple[str, ...]) -> TGPModel:
    """Region model ``key`` (an index into ``model.first_region``), from the cache or built now."""
    members, first = model.members, model.first_region
    assert members is not None and first is not None  # share='region'
    return model.cache.get(key, methods, lambda wanted: fit_members(model, members[first[key]], wanted))


