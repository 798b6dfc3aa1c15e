"""Regions of the input space for shared local models (``share="region"``, beyond [SM] §5.1.4).

The regions depend on the training inputs only: they are the leaves of a
median-split tree (each split halves a node along its widest input
coordinate, until a node holds at most ``region_size`` training points),
represented by their centroids.  A test point belongs to the region of its
nearest centroid; the region's model is fitted on the ``K`` training
points nearest to the centroid.  No random numbers are drawn: the regions,
the models and therefore every prediction are functions of the training
data, ``K`` and ``region_size`` alone.

Regions whose ``K`` nearest training points coincide share one model
(:func:`shared_models`).  Models are factorised on first use and kept in a
:class:`ModelCache` of bounded size (least recently used first out), their
triangular factors packed (:class:`CompactModel`, half the bytes), so that
a second prediction in the same regions factorises nothing.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from fastsm import config
from fastsm._kernels.tri_rows import pack_lower, unpack_lower

if TYPE_CHECKING:
    from scipy.spatial import cKDTree

    from fastsm.tgp.model import TGPModel
    from fastsm.tgp.params import TGPParams


def partition(X: np.ndarray, region_size: int) -> np.ndarray:
    """Centroids of the leaves of a median-split tree over ``X``, ``(n_regions, dx)``.

    A node with more than ``region_size`` points is split at the median of
    its widest coordinate (widest by range; ties: the lowest coordinate);
    the leaves hold between ``region_size / 2`` and ``region_size`` points.
    Leaves are listed depth first, lower half first.
    """
    if region_size < 1:
        raise ValueError(f"region_size must be at least 1, got {region_size}")
    out = []
    stack = [np.arange(X.shape[0])]
    while stack:
        idx = stack.pop()
        if idx.size <= region_size:
            out.append(X[idx].mean(axis=0))
            continue
        pts = X[idx]
        axis = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
        half = idx.size // 2
        order = np.argsort(pts[:, axis], kind="stable")  # a total order: equal coordinates keep their rows' order
        stack.append(idx[order[half:]])
        stack.append(idx[order[:half]])
    return np.ascontiguousarray(np.array(out))


def nearest(tree: cKDTree, X: np.ndarray, points: np.ndarray, k: int, workers: int = 1) -> np.ndarray:
    """Indices of the ``k`` nearest rows of the tree's data to each row of ``X``, ``(n, k)``, the rows'
    queries spread over ``workers`` threads (each row's answer is its own).

    Where squared distances overflow (inputs of magnitude ~1e154 and beyond)
    the KD-tree finds no neighbours; such a row is outside every kernel's
    support, so it gets the neighbours of its projection onto the bounding
    box of ``points`` (the tree's data) and is predicted as extrapolated.
    """
    n_data = points.shape[0]
    _, idx = tree.query(X, k=k, workers=workers)
    idx = np.asarray(idx).reshape(X.shape[0], k)
    lost = np.flatnonzero((idx >= n_data).any(axis=1))
    if lost.size:
        box = np.clip(X[lost], points.min(axis=0), points.max(axis=0))
        _, again = tree.query(box, k=k)
        again = np.asarray(again).reshape(lost.size, k)
        if (again >= n_data).any():
            raise ValueError("X: squared distances to the training inputs overflow float64 even inside their "
                             "bounding box; rescale the inputs")
        idx[lost] = again
    return idx


def shared_models(members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(model_of, first)``: the model of each region and one region of each model.

    Regions whose member rows are equal (``members`` sorted per row) get the
    same model index; models are numbered in order of their first region and
    ``first[m]`` is that region.
    """
    _, first, inverse = np.unique(members, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")  # number the models by their first region
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return rank[inverse].astype(np.int64), first[order].astype(np.int64)


def model_nbytes(model) -> int:
    """Bytes held by a fitted model's arrays."""
    total = 0
    for value in vars(model).values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
    return total


#: The fields of a fitted model that are lower-triangular matrices (zeros above the diagonal).
_TRIANGULAR = ("Wx", "Wy", "Wxy", "G")


@dataclass(frozen=True, eq=False)
class CompactModel:
    """A fitted :class:`~fastsm.tgp.model.TGPModel` with its triangular factors packed.

    The factors' lower triangles are kept row by row (their upper triangles
    are zero, or for a model in Cholesky form the transposed lower ones), so a
    model takes about half the bytes; :meth:`unpack` gives back a model
    bitwise equal to the packed one.
    """

    parts: dict
    X: np.ndarray
    Y: np.ndarray
    params: TGPParams
    methods: tuple[str, ...]
    sample_weight: np.ndarray | None

    @classmethod
    def pack(cls, model: TGPModel) -> CompactModel:
        parts = {}
        for name in (f.name for f in fields(model) if not f.init):  # what the fit computed
            value = getattr(model, name)
            if name in _TRIANGULAR and value is not None:
                value = pack_lower(np.ascontiguousarray(value))
            parts[name] = value
        return cls(parts, model.X, model.Y, model.params, model.methods, model.sample_weight)

    def unpack(self) -> TGPModel:
        from fastsm.tgp.model import TGPModel  # a model imports the fitting code; regions does not need it

        parts = dict(self.parts)
        n = self.X.shape[0]
        symmetric = parts.get("factor_form") == "cholesky"  # symmetric storage: L below, L^T above
        for name in _TRIANGULAR:
            if parts[name] is not None:  # G is lower triangular in either form
                parts[name] = unpack_lower(parts[name], n, symmetric and name != "G")
        return TGPModel._from_parts(self.X, self.Y, self.params, self.methods, parts, self.sample_weight,
                                    copy=False)

    @property
    def nbytes(self) -> int:
        total = sum(a.nbytes for a in (self.X, self.Y, self.sample_weight) if a is not None)
        return total + sum(v.nbytes for v in self.parts.values() if isinstance(v, np.ndarray))


def usable_memory() -> int | None:
    """Bytes of memory this process may use: physical memory, or a container's (cgroup) limit if lower.

    ``None`` where neither can be read (e.g. Windows).
    """
    found = []
    try:
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            found.append(int(text))
    found = [b for b in found if b > 0]
    return min(found) if found else None


def default_cache_bytes() -> int:
    """The default ``cache_bytes`` of :func:`fastsm.tgp.fit_local`: ``config.LOCAL_CACHE_SHARE`` of
    :func:`usable_memory`, within ``[config.LOCAL_CACHE_MIN_BYTES, config.LOCAL_CACHE_MAX_BYTES]`` (the
    minimum where the memory is unknown)."""
    memory = usable_memory()
    if memory is None:
        return config.LOCAL_CACHE_MIN_BYTES
    return int(min(config.LOCAL_CACHE_MAX_BYTES, max(config.LOCAL_CACHE_MIN_BYTES,
                                                    config.LOCAL_CACHE_SHARE * memory)))


#: Every live cache, for the fork hook below.
_CACHES: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_CACHES):
        cache._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ModelCache:
    """Factorised models, packed (:class:`CompactModel`), at most ``max_bytes`` of them, least recently used
    evicted first.

    Thread-safe: two threads asking for the same model build it once (the
    second waits).  Fork-safe: a child process gets fresh locks (those held by
    the parent's other threads at the fork would never be released) and keeps
    the models already built.  ``n_factorized`` counts the models built so far.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.n_factorized = 0
        self.nbytes = 0
        self._models: OrderedDict[int, CompactModel] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[int, threading.Lock] = {}
        _CACHES.add(self)

    def _after_fork_in_child(self) -> None:
        # the threads that held these locks at fork time do not exist in the child;
        # the models and byte count are kept (the GIL keeps them consistent between
        # statements; a model being built was not yet stored)
        self._lock = threading.Lock()
        self._pending = {}
        self.nbytes = sum(m.nbytes for m in self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def _lookup(self, key: int, methods: tuple[str, ...]) -> CompactModel | None:
        model = self._models.get(key)
        if model is not None and set(methods) <= set(model.methods):
            self._models.move_to_end(key)
            return model
        return None

    def get(self, key: int, methods: tuple[str, ...], build: Callable[[tuple[str, ...]], TGPModel]) -> TGPModel:
        """Model ``key`` for ``methods``: cached, or ``build(methods)`` (then cached if it fits).

        A cached model for other methods is rebuilt for both sets of methods
        (a model factorised for ``("kl", "sm")`` serves KL and SM).
        """
        with self._lock:
            found = self._lookup(key, methods)
            if found is None:
                gate = self._pending.setdefault(key, threading.Lock())
        if found is not None:
            return found.unpack()
        with gate:
            with self._lock:
                found = self._lookup(key, methods)
                old = self._models.get(key)
            if found is not None:
                return found.unpack()
            wanted = tuple(sorted(set(methods) | set(old.methods if old is not None else ())))
            model = build(wanted)
            packed = CompactModel.pack(model)
            size = packed.nbytes
            with self._lock:
                self.n_factorized += 1
                if key in self._models:
                    self.nbytes -= self._models.pop(key).nbytes
                if size <= self.max_bytes:
                    self._models[key] = packed
                    self.nbytes += size
                    while self.nbytes > self.max_bytes:
                        _, evicted = self._models.popitem(last=False)
                        self.nbytes -= evicted.nbytes
                self._pending.pop(key, None)
            return model
