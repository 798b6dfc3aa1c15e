"""Regions of the input space for shared local models (``share="region"``, beyond [SM] §5.1.4).

The regions depend on the training inputs only: they are the leaves of a
median-split tree (each split halves a node along its widest input
coordinate, until a node holds at most ``region_size`` training points),
represented by their centroids.  A test point belongs to the region of its
nearest centroid; the region's model is fitted on the ``K`` training
points nearest to the centroid.  No random numbers are drawn: the regions,
the models and therefore every prediction are functions of the training
data, ``K`` and ``region_size`` alone.

Region models are factorised on first use and kept in a :class:`ModelCache`
of bounded size (least recently used first out), so that a second
prediction in the same regions factorises nothing.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from scipy.spatial import cKDTree

if TYPE_CHECKING:
    from fastsm.tgp.model import TGPModel


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


def nearest(tree: cKDTree, X: np.ndarray, points: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` nearest rows of the tree's data to each row of ``X``, ``(n, k)``.

    Where squared distances overflow (inputs of magnitude ~1e154 and beyond)
    the KD-tree finds no neighbours; such a row is outside every kernel's
    support, so it gets the neighbours of its projection onto the bounding
    box of ``points`` (the tree's data) and is predicted as extrapolated.
    """
    n_data = points.shape[0]
    _, idx = tree.query(X, k=k)
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


def model_nbytes(model) -> int:
    """Bytes held by a fitted model's arrays."""
    total = 0
    for value in vars(model).values():
        if isinstance(value, np.ndarray):
            total += value.nbytes
    return total


#: Every live cache, for the fork hook below.
_CACHES: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_CACHES):
        cache._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ModelCache:
    """Factorised region models, at most ``max_bytes`` of them, least recently used evicted first.

    Thread-safe: two threads asking for the same region build it once (the
    second waits).  Fork-safe: a child process gets fresh locks (those held by
    the parent's other threads at the fork would never be released) and keeps
    the models already built.  ``n_factorized`` counts the models built so far.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.n_factorized = 0
        self.nbytes = 0
        self._models: OrderedDict[int, TGPModel] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: dict[int, threading.Lock] = {}
        _CACHES.add(self)

    def _after_fork_in_child(self) -> None:
        # the threads that held these locks at fork time do not exist in the child;
        # the models and byte count are kept (the GIL keeps them consistent between
        # statements; a model being built was not yet stored)
        self._lock = threading.Lock()
        self._pending = {}
        self.nbytes = sum(model_nbytes(m) for m in self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def _lookup(self, region: int, methods: tuple[str, ...]) -> TGPModel | None:
        model = self._models.get(region)
        if model is not None and set(methods) <= set(model.methods):
            self._models.move_to_end(region)
            return model
        return None

    def get(self, region: int, methods: tuple[str, ...], build: Callable[[tuple[str, ...]], TGPModel]):
        """The model of ``region`` for ``methods``: cached, or ``build(methods)`` (then cached if it fits).

        A cached model of the region for other methods is rebuilt for both
        sets of methods (a model factorised for ``("kl", "sm")`` serves KL and SM).
        """
        with self._lock:
            model = self._lookup(region, methods)
            if model is not None:
                return model
            gate = self._pending.setdefault(region, threading.Lock())
        with gate:
            with self._lock:
                model = self._lookup(region, methods)
                old = self._models.get(region)
            if model is not None:
                return model
            wanted = tuple(sorted(set(methods) | set(old.methods if old is not None else ())))
            model = build(wanted)
            size = model_nbytes(model)
            with self._lock:
                self.n_factorized += 1
                if region in self._models:
                    self.nbytes -= model_nbytes(self._models.pop(region))
                if size <= self.max_bytes:
                    self._models[region] = model
                    self.nbytes += size
                    while self.nbytes > self.max_bytes:
                        _, evicted = self._models.popitem(last=False)
                        self.nbytes -= model_nbytes(evicted)
                self._pending.pop(region, None)
            return model
