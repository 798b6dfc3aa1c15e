"""Two input-kernel regimes and the exact leave-one-out choice between them (``TwinGPRegressor()``'s ``"auto"``).

Data with signal want a wide input kernel that nearly interpolates (``"sharp"``); small or
weak-signal sets want a smoother one with a ridge (``"smooth"``).  No fixed setting serves both
(docs/selection.md, "TwinGPRegressor()'s defaults"), so ``gamma_x="auto"`` / ``lambda_x="auto"``
take the regime whose KLTGP (IKLTGP for ``method="ikl"``) has the smaller exact leave-one-out
mean squared error -- two leave-one-out passes (:func:`fastsm.tgp.loo_predict`, about two
predictions of the training set), not a search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fastsm.tgp.api import fit
from fastsm.tgp.fitting import check_sample_weight, informative
from fastsm.tgp.loo import LooMethod, loo_predict
from fastsm.tgp.model import TGPModel, TGPParams
from fastsm.tgp.params import scale_factor
from fastsm.tgp.prediction import quiet
from fastsm.tgp.scoring import SCORINGS, fold_errors, score_summary

#: The value of ``gamma_x`` / ``lambda_x`` that asks for the choice.
AUTO = "auto"
#: name -> the input kernel's width and ridge of that regime (measured on the real-data panel,
#: docs/selection.md): "sharp" is the setting closest to the CV estimator on the digits, iris and
#: diabetes tasks, "smooth" the one closest on Linnerud (16 training points, little signal).
REGIMES: dict[str, dict[str, Any]] = {
    "sharp": {"gamma_x": "0.5*scale", "lambda_x": 1e-3},
    "smooth": {"gamma_x": "0.0625*scale", "lambda_x": 0.1},
}


@dataclass(frozen=True)
class RegimeChoice:
    """The outcome of :func:`choose_regime`.

    Attributes
    ----------
    regime : str
        ``"sharp"`` or ``"smooth"`` (the first when both score the same or no score exists).
    params : TGPParams
        The chosen regime's hyperparameters (widths as given, e.g. ``"0.5*scale"``).
    scores : dict of str to float
        Each regime's weighted leave-one-out mean squared error (NaN where fewer than two
        training points carry weight).
    model : TGPModel or None
        The chosen regime's model as scored (fitted with ``methods=(scored,)``), for reuse.
    """

    regime: str
    params: TGPParams
    scores: dict[str, float]
    model: TGPModel | None


def _auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


def is_auto(params: dict[str, Any]) -> bool:
    """Whether ``gamma_x`` or ``lambda_x`` of ``params`` (TGPParams keywords) is ``"auto"``."""
    return any(_auto(params.get(k)) for k in ("gamma_x", "lambda_x"))


def regime_params(params: dict[str, Any]) -> dict[str, TGPParams]:
    """Each regime's :class:`TGPParams`: the ``"auto"`` entries of ``params`` taken from :data:`REGIMES`.

    Raises
    ------
    ValueError
        For a string ``gamma_x`` or ``lambda_x`` that is neither ``"auto"`` nor (``gamma_x``) a
        ``"scale"`` width; :class:`TGPParams`' errors for the other values.
    """
    for k in ("gamma_x", "lambda_x"):
        v = params.get(k)
        if isinstance(v, str) and not _auto(v):
            if k == "lambda_x":
                raise ValueError(f"lambda_x must be a number >= 0 or 'auto', got {v!r}")
            try:
                scale_factor(k, v)
            except ValueError:
                raise ValueError(f"gamma_x must be a positive number, 'auto', 'scale' or '<factor>*scale' "
                                 f"(e.g. '0.5*scale'), got {v!r}") from None
    out = {}
    for name, regime in REGIMES.items():
        kw = {k: (regime[k] if _auto(v) else v) for k, v in params.items()}
        out[name] = TGPParams(**kw)
    return out


def choose_regime(
    X: np.ndarray,
    Y: np.ndarray,
    params: dict[str, Any],
    *,
    scored: LooMethod = "kl",
    sample_weight: ArrayLike | None = None,
    threads: int | None = None,
    max_iter: int | None,
    tol: float,
) -> RegimeChoice:
    """The regime whose ``scored`` predictor has the smaller exact leave-one-out squared error.

    Each regime's model is fitted on all the data (its ``"scale"`` widths resolved there) and
    scored by :func:`fastsm.tgp.loo_predict`: row ``i`` is what that model's hyperparameters,
    refitted without ``(x_i, y_i)`` and all its copies (:func:`distinct_rows`), predict at ``x_i``.

    Parameters
    ----------
    X, Y : ndarray (N, dx), (N, dy)
        Training data (validated).
    params : dict
        :class:`TGPParams` keywords; ``gamma_x`` and/or ``lambda_x`` may be ``"auto"``.
    scored : {"kl", "ikl"}
        The predictor scored (as :func:`fastsm.tgp.select` scores kernels: KLTGP for KLTGP
        and SMTGP, IKLTGP for IKLTGP).
    sample_weight : array_like (N,), optional
        Weights of the fit and of the squared errors (importance-weighted leave-one-out).
    threads, max_iter, tol
        As in :func:`fastsm.tgp.loo_predict`.

    Returns
    -------
    RegimeChoice
    """
    candidates = regime_params(params)
    w = check_sample_weight(sample_weight, X.shape[0])
    X, Y, w, collapsed = distinct_rows(X, Y, w)
    scores: dict[str, float] = {}
    models: dict[str, TGPModel] = {}
    for name, p in candidates.items():
        kept = np.ones(X.shape[0], dtype=bool) if w is None else informative(w, p)
        if np.count_nonzero(kept) < 2:
            scores[name] = np.nan
            continue
        models[name] = model = fit(X, Y, p, methods=(scored,), threads=threads, sample_weight=w)
        with quiet():
            pred = loo_predict(model, method=scored, max_iter=max_iter, tol=tol, threads=threads)
        err = fold_errors(SCORINGS["mse"], Y[kept], None if w is None else w[kept], pred)
        scores[name] = score_summary([err], loo=True)[0]
    finite = {k: v for k, v in scores.items() if np.isfinite(v)}
    regime = min(finite, key=lambda k: finite[k]) if finite else next(iter(candidates))
    return RegimeChoice(regime=regime, params=candidates[regime], scores=scores,
                        model=None if collapsed else models.get(regime))


def fit_auto(X: np.ndarray, Y: np.ndarray, params: dict[str, Any], *, methods: tuple[str, ...],
             sample_weight: ArrayLike | None = None, threads: int | None = None, max_iter: int | None,
             tol: float) -> tuple[TGPModel, RegimeChoice | None]:
    """:func:`fastsm.tgp.fit` with ``params``' ``"auto"`` entries chosen by :func:`choose_regime` first.

    The regime is scored by IKLTGP if ``methods`` holds ``"ikl"``, else by KLTGP; its scored model is
    the result where it was fitted with ``methods`` on the data as given.  Without ``"auto"``: the
    fit and ``None``.
    """
    if not is_auto(params):
        return fit(X, Y, TGPParams(**params), methods=methods, threads=threads, sample_weight=sample_weight), None
    choice = choose_regime(X, Y, params, scored="ikl" if "ikl" in methods else "kl", sample_weight=sample_weight,
                           threads=threads, max_iter=max_iter, tol=tol)
    if choice.model is not None and choice.model.methods == tuple(methods):
        return choice.model, choice
    return fit(X, Y, choice.params, methods=methods, threads=threads, sample_weight=sample_weight), choice


def distinct_rows(X: np.ndarray, Y: np.ndarray, w: np.ndarray | None) -> tuple[
        np.ndarray, np.ndarray, np.ndarray | None, bool]:
    """Copies of a training pair ``(x, y)`` as one row weighted by their number (or summed weights).

    Leave-one-out then leaves all copies of a pair out together: leaving one out would let its
    twin answer for it, and repeated rows score as the integer ``sample_weight`` that stands for
    them (as they fit: docs/math.md §6).  Without copies the data are returned as they are.
    """
    XY = np.hstack([X, Y])
    rows, first, inv = np.unique(XY, axis=0, return_index=True, return_inverse=True)
    if rows.shape[0] == XY.shape[0]:
        return X, Y, w, False
    keep = np.sort(first)  # each pair at its first occurrence, in the order given
    slot = np.empty(rows.shape[0], dtype=np.int64)
    slot[inv.reshape(-1)[keep]] = np.arange(keep.size)
    weight = np.bincount(slot[inv.reshape(-1)], weights=None if w is None else w, minlength=keep.size)
    return X[keep], Y[keep], weight.astype(np.float64), True

