"""How :func:`fastsm.tgp.select` scores a setting: per-point errors, the folds, their summary, and the
scores in scikit-learn's ``cv_results_`` form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastsm._validation import as_rng, check_int
from fastsm.tgp.search import COLUMNS


def _mae(Y, P):
    return np.abs(Y - P).mean(axis=1)


def _mse(Y, P):
    return ((Y - P) ** 2).mean(axis=1)


def _euclidean(Y, P):
    return np.sqrt(((Y - P) ** 2).sum(axis=1))


#: Per-point errors (lower is better); "mae" is [SM] Table 2's error.
SCORINGS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "mae": _mae, "mse": _mse, "euclidean": _euclidean,
}


def cv_splits(n: int, cv, X, Y) -> list[tuple[np.ndarray, np.ndarray]]:
    """Explicit folds: a scikit-learn splitter (``split``) or an iterable of ``(train, test)`` index arrays."""
    splits = list(cv.split(X, Y)) if hasattr(cv, "split") else list(cv)
    if not splits:
        raise ValueError("cv must hold at least one (train, test) split, got none")
    out = []
    for k, split in enumerate(splits):
        try:
            tr, va = split
        except (TypeError, ValueError):
            raise TypeError(f"cv split {k} must be a (train, test) pair of index arrays") from None
        tr, va = np.asarray(tr), np.asarray(va)
        for name, idx in (("train", tr), ("test", va)):
            if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
                raise ValueError(f"cv split {k}: the {name} indices must be a non-empty 1-D integer array")
            if idx.min() < 0 or idx.max() >= n:
                raise ValueError(f"cv split {k}: the {name} indices must lie in [0, {n})")
        out.append((tr.astype(np.int64), va.astype(np.int64)))
    return out


def fold_indices(n: int, cv, random_state) -> list[tuple[np.ndarray, np.ndarray]]:
    k = check_int("cv", cv, low=2)
    if k > n:
        raise ValueError(f"cv must be at most the number of training points ({n}), got {k}")
    perm = as_rng("random_state", random_state).permutation(n)
    return [(np.sort(np.setdiff1d(perm, part)), np.sort(part)) for part in np.array_split(perm, k)]


def fold_errors(score_fn, Yv: np.ndarray, wv, pred) -> tuple:
    """One fold's per-point errors, weights, converged and extrapolated flags."""
    err = np.asarray(score_fn(Yv, pred.y), dtype=float).reshape(-1)
    if err.shape[0] != Yv.shape[0]:
        raise ValueError(f"scoring must return one error per validation point ({Yv.shape[0]}), got shape {err.shape}")
    if wv is not None and wv.max() > 0.0:
        wv = wv / wv.max()  # a common factor changes no average, and sums of huge weights cannot overflow
    return err, wv, pred.converged, pred.extrapolated


def score_summary(folds_a: list, loo: bool) -> tuple[float, float, float, float]:
    """Mean and spread of the errors over the points (leave-one-out) or the folds' means; shares."""
    if loo:
        err, wv, conv, ex = folds_a[0]
        mean = float(np.average(err, weights=wv))
        std = float(np.sqrt(np.average((err - mean) ** 2, weights=wv)))
        return mean, std, float(conv.mean()), float(ex.mean())
    # a validation fold whose weights are all zero says nothing about the target: left out
    means = np.array([np.average(e, weights=ww) for e, ww, _, _ in folds_a if ww is None or (ww > 0.0).any()])
    return (float(means.mean()), float(means.std()), float(np.concatenate([c for _, _, c, _ in folds_a]).mean()),
            float(np.concatenate([x for _, _, _, x in folds_a]).mean()))


def cv_results(table: dict, rows: np.ndarray, alpha: float, beta: float) -> dict:
    """Rows ``rows`` of :class:`fastsm.tgp.Selection`'s table in ``GridSearchCV``'s ``cv_results_`` layout.

    KLTGP rows (no ``alpha``, ``beta``) get ``alpha`` and ``beta`` (the values a KLTGP choice's
    ``best_params_`` has), so every ``params`` entry is a valid parameter set; rank 1 is the
    lowest mean error, non-finite means rank last.
    """
    from scipy.stats import rankdata

    t = {c: np.asarray(v)[rows] for c, v in table.items()}
    fill = {"alpha": alpha, "beta": beta}
    for c, v in fill.items():
        t[c] = np.where(np.isnan(t[c].astype(float)), v, t[c].astype(float))
    n = rows.size
    out: dict[str, Any] = {
        "params": [{"method": str(t["method"][i]), **{c: float(t[c][i]) for c in COLUMNS}} for i in range(n)]}
    out["param_method"] = np.asarray(t["method"])
    for c in COLUMNS:
        out[f"param_{c}"] = np.asarray(t[c], dtype=float)
    mean = np.asarray(t["mean"], dtype=float)
    out["mean_test_score"] = -mean
    out["std_test_score"] = np.asarray(t["std"], dtype=float)
    out["rank_test_score"] = rankdata(np.where(np.isfinite(mean), mean, np.inf), method="min").astype(np.int32)
    out["converged"] = np.asarray(t["converged"], dtype=float)
    out["extrapolated"] = np.asarray(t["extrapolated"], dtype=float)
    return out
