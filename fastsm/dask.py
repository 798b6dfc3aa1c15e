"""Distributed batch prediction and GMM pairwise matrices with Dask (``pip install "fastsm[dask]"``).

The model is sent to every worker once (``Client.scatter(..., broadcast=True)``,
so it survives the loss of a worker); each task predicts one block of test
points with the same Numba prediction as :func:`fastsm.tgp.predict`, on the
worker's threads.  Results are bitwise identical to an in-process prediction
of the whole ``X``, for any block size: rows do not depend on their
batch-mates or on the thread count.  The one model whose rows do depend on
other test points, a local model with ``share="cluster"`` (its clusters are
formed per chunk of :func:`fastsm.tgp.neighbours.chunk_rows` test points), gets
blocks cut at those chunks' boundaries.  A local model with
``share="region"`` gets its test points grouped by region model (sorted by
model, blocks cut between models), so each region model is factorised on one
worker, once.  A Dask-array ``X`` is computed once (persisted on the
cluster; its chunk sizes, regions and blocks are read from there).  A worker
that dies mid-run loses nothing: Dask re-runs its tasks elsewhere.

Give each worker one task slot and let fastsm use its cores
(``LocalCluster(n_workers=k, threads_per_worker=1)``, ``dask worker --nthreads 1``):
a task already runs on all of the worker's Numba threads.
"""

from __future__ import annotations

import math

import numpy as np

try:
    import dask.array as da
    from distributed import Client, as_completed, get_client
except ImportError as exc:  # pragma: no cover - optional dependency
    raise ImportError('fastsm.dask needs Dask: pip install "fastsm[dask]"') from exc

from fastsm import gmm, tgp
from fastsm._progress import Progress
from fastsm._validation import as_2d, check_int
from fastsm.tgp.local_model import LocalTGPModel
from fastsm.tgp.model import Prediction, TGPModel
from fastsm.tgp.neighbours import chunk_rows
from fastsm.tgp.prediction import quiet, warn_extrapolated

__all__ = ["predict", "gmm_pairwise"]

_FIELDS = ("y", "log_certainty", "n_iter", "n_eval", "converged", "objective", "criterion", "n_eta_floor",
           "extrapolated")


def _client(client) -> Client:
    if client is None:
        try:
            return get_client()
        except ValueError:
            raise ValueError("no Dask client: pass client=distributed.Client(...) (a LocalCluster or a scheduler "
                             "address), or create one first") from None
    if not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
    return client


def _predict_block(model, X, kwargs):
    with quiet():  # the extrapolation warning is given once, by predict, in the caller's process
        p = tgp.predict(model, X, **kwargs)
    return {name: getattr(p, name) for name in _FIELDS}


def _blocks(n: int, block_size: int) -> list[tuple[int, int]]:
    return [(s, min(n, s + block_size)) for s in range(0, n, block_size)]


def _labels_block(model, X):
    """The region model of each row of ``X`` (regions with the same members share one)."""
    return model.model_of[model.regions_of(X)]


def _region_spans(sorted_labels: np.ndarray, block_size: int) -> list[tuple[int, int]]:
    """Blocks of about ``block_size`` rows of region-sorted test points, cut between regions only."""
    cuts = np.flatnonzero(np.diff(sorted_labels)) + 1
    spans, start = [], 0
    for c in cuts:
        if c - start >= block_size:
            spans.append((start, int(c)))
            start = int(c)
    spans.append((start, sorted_labels.size))
    return spans


def _region_order(model, X, client, model_f):
    """Region of every test point (computed where ``X`` lives) and the stable order that groups them."""
    if isinstance(X, da.Array):
        blocks = [blk for blk, rows in zip(X.to_delayed().ravel(), X.chunks[0], strict=True) if rows > 0]
        parts = [client.submit(_labels_block, model_f, blk, pure=False) for blk in client.compute(blocks)]
        labels = np.concatenate(client.gather(parts)) if parts else np.empty(0, dtype=np.int64)
    else:
        labels = _labels_block(model, X)
    order = np.argsort(labels, kind="stable")
    return labels[order], order


def predict(model, X, *, client=None, block_size: int | None = None, progress=False, **predict_kwargs) -> Prediction:
    """:func:`fastsm.tgp.predict` over a Dask cluster, one task per block of test points.

    Parameters
    ----------
    model : TGPModel or LocalTGPModel
        Sent to the workers once (broadcast).
    X : dask.array.Array or array_like (n, dx)
        Test inputs: a Dask array is predicted block by block (its row
        chunks; columns are joined), a NumPy array is split into
        ``block_size`` rows.
    client : distributed.Client, optional
        Default: the current client (``distributed.get_client()``).
    block_size : int, optional
        Rows per task for a NumPy ``X``; default ``ceil(n / (4 × workers))``,
        at least 64.  For a ``share="cluster"`` local model, rounded up (a
        Dask array's row chunks: to the nearest) to a multiple of
        :func:`~fastsm.tgp.neighbours.chunk_rows`.
    progress : bool or callable
        Report finished rows (``True``: tqdm or a line on stderr; a callable
        gets ``(done, total)``).  Off by default.
    **predict_kwargs
        ``method``, ``init`` (an array is split with ``X``), ``max_iter``,
        ``tol``, ``threads`` (per worker), ``optimizer``, ``trust_radius``,
        ``batch_size``.  A ``share="region"`` local model's test points are
        grouped by region (blocks of whole regions, about ``block_size`` rows).

    Returns
    -------
    Prediction
        In the order of ``X``, gathered to this process.
    """
    if not isinstance(model, (TGPModel, LocalTGPModel)):
        raise TypeError(f"model must be a TGPModel or LocalTGPModel, got {type(model).__name__}")
    if "progress" in predict_kwargs:
        raise TypeError("progress is reported by fastsm.dask.predict itself")
    client = _client(client)
    init = predict_kwargs.pop("init", None)
    dx = model.X.shape[1]
    # share="cluster": a block must hold whole chunks, as in-process (module docstring)
    unit = chunk_rows(model) if isinstance(model, LocalTGPModel) and model.share == "cluster" else 1
    by_region = isinstance(model, LocalTGPModel) and model.share == "region"
    if isinstance(X, da.Array):
        if X.ndim != 2 or X.shape[1] != dx:
            raise ValueError(f"X must be a 2-D Dask array with {dx} columns, got shape {X.shape}")
        # computed once, on the cluster: the chunk sizes, the regions and the blocks below all read these
        X = client.persist(X)
        if any(math.isnan(c) for c in X.chunks[0]):  # e.g. after boolean masking
            X = X.compute_chunk_sizes()
        X = X.rechunk({1: -1})
        if unit > 1 and X.shape[0] > 0:
            X = X.rechunk({0: unit * max(1, round(max(X.chunks[0]) / unit))})
        bounds = np.cumsum((0,) + X.chunks[0])
        delayed = X.to_delayed().ravel()
        blocks = [(int(a), int(b), blk) for a, b, blk in zip(bounds[:-1], bounds[1:], delayed, strict=True)
                  if b > a]
        spans = [(a, b) for a, b, _ in blocks]
        parts = None if by_region else client.compute([blk for _, _, blk in blocks])
    else:
        X = as_2d("X", X)
        if X.shape[1] != dx:
            raise ValueError(f"X must have {dx} columns (the training inputs' dx), got {X.shape[1]}")
        n_workers = max(1, len(client.scheduler_info().get("workers", {})))
        if block_size is None:
            block_size = max(64, math.ceil(X.shape[0] / (4 * n_workers)))
        block_size = check_int("block_size", block_size, low=1)
        spans = _blocks(X.shape[0], unit * math.ceil(block_size / unit))
        parts = None if by_region else [X[a:b] for a, b in spans]
    n = spans[-1][1] if spans else 0
    if n == 0:
        raise ValueError("X must have at least one row")
    if init is not None and not isinstance(init, str):
        init = as_2d("init", init)
        if init.shape != (n, model.Y.shape[1]):
            raise ValueError(f"init must have shape {(n, model.Y.shape[1])} (n test points × dy), got {init.shape}")
    [model_f] = client.scatter([model], broadcast=True, hash=False)
    order = None
    if by_region:  # whole regions per block: each region's model is built on one worker, once
        sorted_labels, order = _region_order(model, X, client, model_f)
        if block_size is None:
            block_size = max(64, math.ceil(n / (4 * max(1, len(client.scheduler_info().get("workers", {}))))))
        spans = _region_spans(sorted_labels, check_int("block_size", block_size, low=1))
        if isinstance(X, da.Array):
            Xs = X[order].rechunk({0: tuple(b - a for a, b in spans)})
            parts = client.compute(list(Xs.to_delayed().ravel()))
        else:
            parts = [X[order[a:b]] for a, b in spans]
    assert parts is not None  # by_region computed them above
    futures = {}
    for (a, b), part in zip(spans, parts, strict=True):
        rows = slice(a, b) if order is None else order[a:b]
        kw = dict(predict_kwargs, init=init if init is None or isinstance(init, str) else init[rows])
        futures[client.submit(_predict_block, model_f, part, kw, pure=False)] = (a, b)
    results = {}
    with Progress(progress, n, "dask predict") as bar:
        for fut in as_completed(list(futures)):
            a, b = futures[fut]
            results[a] = fut.result()
            bar.step(b - a)
    out = {name: np.concatenate([results[a][name] for a, _ in spans]) for name in _FIELDS}
    if order is not None:  # back from region order to the order of X
        out = {name: _unsort(v, order) for name, v in out.items()}
    warn_extrapolated(out["extrapolated"], n, local=isinstance(model, LocalTGPModel))
    return Prediction(**out, method=predict_kwargs.get("method", "sm"))


def _unsort(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    back = np.empty_like(values)
    back[order] = values
    return back


def gmm_pairwise(mixtures_a, mixtures_b=None, method: str = "var", *, client=None, block_rows: int | None = None,
                 progress=False, **kwargs) -> np.ndarray:
    """:func:`fastsm.gmm.pairwise` over a Dask cluster, one task per block of rows of the matrix.

    ``mixtures_b`` (default ``mixtures_a``) is broadcast to the workers once;
    each task computes ``pairwise(mixtures_a[r0:r1], mixtures_b, ...)``.
    ``kwargs`` (``component``, ``threads``; Monte Carlo's ``n_samples``,
    ``seed``) are passed on.  Equal to the in-process matrix (the
    Monte Carlo method draws per row block, so its values depend on
    ``block_rows``).
    """
    client = _client(client)
    A = list(mixtures_a)
    B = A if mixtures_b is None else list(mixtures_b)
    if not A or not B:
        raise ValueError("mixtures_a and mixtures_b must not be empty")
    n_workers = max(1, len(client.scheduler_info().get("workers", {})))
    if block_rows is None:
        block_rows = max(1, math.ceil(len(A) / (4 * n_workers)))
    block_rows = check_int("block_rows", block_rows, low=1)
    [B_f] = client.scatter([B], broadcast=True, hash=False)
    futures = {client.submit(gmm.pairwise, A[a:b], B_f, method, pure=False, **kwargs): (a, b)
               for a, b in _blocks(len(A), block_rows)}
    out = np.empty((len(A), len(B)))
    with Progress(progress, len(A), "dask gmm pairwise") as bar:
        for fut in as_completed(list(futures)):
            a, b = futures[fut]
            out[a:b] = fut.result()
            bar.step(b - a)
    return out
