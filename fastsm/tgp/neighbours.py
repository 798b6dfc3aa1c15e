"""Which training points each test point's local model holds: the ``K`` nearest training inputs, the
groups of test points that share a model (``share=``), and the chunks they are formed in
(:mod:`fastsm.tgp.local`'s docstring)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fastsm import config
from fastsm.tgp import regions as _regions
from fastsm.tgp.local_model import LocalTGPModel


def chunk_rows(model: LocalTGPModel) -> int:
    """Test points whose groups are formed together (module docstring)."""
    rows = max(1, config.LOCAL_CHUNK_ENTRIES // model.n_neighbors)
    return max(rows, model.group_size) if model.share == "cluster" else rows


def neighbours(model: LocalTGPModel, X: np.ndarray, workers: int = 1) -> np.ndarray:
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
    idx = neighbours(model, X, workers)
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
        from scipy.cluster.vq import kmeans2  # here, not at import (with fastsm.tgp)

        _, labels = kmeans2(Z, n_groups, minit="++", seed=seed)
    groups = []
    for g in np.unique(labels):
        rows = np.flatnonzero(labels == g)
        groups.append((rows, np.unique(idx[rows])))
    return groups
