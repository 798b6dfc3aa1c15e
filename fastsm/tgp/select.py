"""Hyperparameter selection by cross-validation: exact leave-one-out or k-fold ([SM] §5.2).

The grids and the coordinate search are in :mod:`fastsm.tgp.search`, the scoring in
:mod:`fastsm.tgp.scoring`; this module runs them.

The grid is the product of ``gamma_x × gamma_y × lambda_x × lambda_y ×
alpha × beta``.  What is shared:

* ``K_X^-1``, ``K_Y^-1`` (and ``C``) depend on the kernels only: one
  factorisation per kernel setting (and fold); each ``alpha`` adds only the
  factorisation of ``K_XY(alpha)``.
* SMTGP starts from the KLTGP prediction ([SM] §5.2; as :func:`~fastsm.tgp.predict`'s
  ``init="kl"``, KLTGP stopped after :data:`fastsm.config.SM_START_ITER` iterations),
  which does not depend on ``alpha``: computed once per kernel setting (and fold).
* ``beta`` changes nothing: SMTGP's argmin does not depend on it ([SM]
  Lemma 4.2) and fastsm minimises the beta-free form of the objective, so
  the predictions — not only their limit — are bitwise the same for every
  ``beta`` (``tests/test_select.py``).  Each ``beta`` row repeats its
  ``alpha``'s score; ties go to the first ``beta`` of the grid.  What the
  paper's beta grid changed was the path of its gradient descent on the
  beta-dependent objective (docs/selection.md measures it).
"""

from __future__ import annotations

import itertools
import numbers
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from fastsm import config
from fastsm._progress import Progress
from fastsm._validation import as_2d, check_choice
from fastsm._warn import warn
from fastsm.exceptions import ExtrapolationWarning
from fastsm.tgp.api import fit, predict
from fastsm.tgp.fitting import check_sample_weight, informative
from fastsm.tgp.loo import LooMethod, loo_linear_start, loo_predict, loo_ridge
from fastsm.tgp.model import TGPParams
from fastsm.tgp.params import SCALE_X, SCALE_Y
from fastsm.tgp.prediction import kl_start_iterations, quiet
from fastsm.tgp.scoring import SCORINGS, cv_splits, fold_errors, fold_indices, score_summary
from fastsm.tgp.search import (
    COLUMNS,
    MAX_ROUNDS,
    PAPER_ALPHAS,
    PAPER_BETAS,
    SEARCHES,
    absolute,
    coordinate_search,
    descent_search,
    param_grid,
    search_start,
)
from fastsm.tgp.selection import Selection
from fastsm.tgp.update import with_alpha
from fastsm.tgp.views import leave_one_out


def select(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    alphas: Sequence[float] = PAPER_ALPHAS,
    betas: Sequence[float] = PAPER_BETAS,
    gammas_x: Sequence[float | str] | float | str | None = None,
    gammas_y: Sequence[float | str] | float | str | None = None,
    lambdas_x: Sequence[float] | float | None = None,
    lambdas_y: Sequence[float] | float | None = None,
    cv="loo",
    method: str = "sm",
    scoring: str | Callable[[np.ndarray, np.ndarray], np.ndarray] = "mae",
    search: str = "grid",
    sample_weight: ArrayLike | None = None,
    max_iter: int | None = None,
    tol: float = config.DEFAULT_TOL,
    threads: int | None = None,
    random_state: int | None = 0,
    progress: bool | Callable[[int, int], None] = False,
) -> Selection:
    """Choose TGP hyperparameters by cross-validation over a grid ([SM] §5.2).

    Parameters
    ----------
    X, Y : array_like, shape (N, dx) and (N, dy)
        Training data.
    alphas : sequence of float
        SM orders, each in (0, 1); default [SM] §5.2's 0.05, 0.10, …, 0.95.
    betas : sequence of float
        SM degrees (> 0); default [SM]'s {0.5, 0.99, 1.5}.  They do not
        change the predictions (module docstring): each repeats its alpha's
        score.
    gammas_x, gammas_y : float, str or sequence, optional
        Width grids: numbers, or relative to the data, ``"scale"`` /
        ``"f*scale"`` (:class:`TGPParams`; resolved once on all of ``X``,
        ``Y``); ``None``: ``"scale"``.  :data:`GAMMA_X_GRID` and
        :data:`GAMMA_Y_GRID` are :class:`~fastsm.sklearn.TwinGPRegressorCV`'s.
    lambdas_x, lambdas_y : float or sequence, optional
        Regulariser grids; ``None`` uses the :class:`TGPParams` default.
    cv : "loo", int, splitter or iterable of (train, test) index arrays
        ``"loo"``: exact leave-one-out by downdates
        (:func:`~fastsm.tgp.loo_predict`), no refits; an int ``k >= 2``:
        k-fold (shuffled with ``random_state``), one fit per fold and kernel
        setting; a scikit-learn splitter (``cv.split(X, Y)``) or explicit
        splits: those folds.
    method : {"sm", "kl", "ikl", "auto"}
        The predictor scored.  For KL and IKL, ``alpha`` and ``beta`` do not
        enter the prediction; their rows repeat the same score.  ``"auto"``:
        KLTGP and SMTGP compete (KLTGP is SMTGP's ``alpha -> 0`` limit, MATH
        §3, reached only at very small alpha); ``Selection.method`` is the
        winner.
    scoring : {"mae", "mse", "euclidean"} or callable
        Per-point error, lower is better: mean absolute error over the
        outputs ([SM] Table 2), mean squared error, or Euclidean distance;
        a callable ``f(Y_true, Y_pred) -> (n,)`` errors.
    search : {"grid", "coordinate", "descent", "auto"}
        ``"grid"``: every combination of kernel settings and alphas.
        ``"coordinate"``: the kernel settings by cyclic coordinate search
        (one axis at a time from the ``"scale"`` / default values, every value of
        the axis, until a whole round moves nothing, at most :data:`MAX_ROUNDS` rounds),
        scored by KLTGP when ``method`` is ``"sm"`` or ``"auto"``; then, for SMTGP, the alphas
        at the kernels found.  Far fewer fits than the grid when several
        axes have several values.  ``"descent"``: the same, but each axis
        steps from its current value to the better neighbour while the
        error strictly falls (a minimum along each axis's neighbours, not
        over the whole axis): about half the settings of ``"coordinate"``.
        ``"auto"``: ``"descent"`` above :data:`fastsm.config.DESCENT_MIN_POINTS`
        training points, ``"coordinate"`` up to there (small sets are cheap
        to sweep, and their leave-one-out error can have several minima
        along an axis).
        With leave-one-out, more than one alpha and more than
        :data:`fastsm.config.ALPHA_SCREEN_POINTS` points, both searches score
        the alphas on that many points drawn with ``random_state`` (the
        table's ``screen`` rows) and the best of them on every point.  The
        table's ``method`` column says which predictor scored each row
        (``alpha`` is NaN on KLTGP's rows).
    sample_weight : array_like (N,), optional
        Importance weights (IW-TGP, docs/math.md §6): used in every fit and in the
        mean of the validation errors (importance-weighted CV).
    max_iter, tol, threads
        As in :func:`~fastsm.tgp.predict`.
    random_state : int, optional
        Seed of the k-fold split and of the alpha screen's points.
    progress : bool or callable
        Report progress, one step per fit and per alpha (``True``: tqdm
        when installed, else a line on stderr; a callable gets ``(done,
        total)``).

    Returns
    -------
    Selection

    Warns
    -----
    ExtrapolationWarning
        Once, when validation inputs of the selected setting lay outside
        the kernel support of their training inputs (the ``extrapolated``
        column gives the share for every row).
    """
    t_start = time.perf_counter()
    X = as_2d("X", X)
    Y = as_2d("Y", Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    n = X.shape[0]
    if n < 2:
        raise ValueError(f"select needs at least 2 training points, got {n} sample")
    check_choice("method", method, ("sm", "kl", "ikl", "auto"))
    check_choice("search", search, SEARCHES)
    if search == "auto":
        search = "descent" if n > config.DESCENT_MIN_POINTS else "coordinate"
    d = TGPParams()
    alphas = param_grid("alphas", alphas, d.alpha, positive=True, open_unit=True)
    betas = param_grid("betas", betas, d.beta, positive=True)
    axes = [param_grid("gammas_x", gammas_x, d.gamma_x, positive=True, relative=True),
            param_grid("gammas_y", gammas_y, d.gamma_y, positive=True, relative=True),
            param_grid("lambdas_x", lambdas_x, d.lambda_x, positive=False),
            param_grid("lambdas_y", lambdas_y, d.lambda_y, positive=False)]
    if callable(scoring):
        score_name, score_fn = getattr(scoring, "__name__", "callable"), scoring
    else:
        score_name = check_choice("scoring", scoring, tuple(SCORINGS))
        score_fn = SCORINGS[score_name]
    w = check_sample_weight(sample_weight, n)
    values = [tuple(absolute("gammas_x", v, X, SCALE_X, w) for v in axes[0]),
              tuple(absolute("gammas_y", v, Y, SCALE_Y, w) for v in axes[1]), axes[2], axes[3]]
    if isinstance(cv, str):
        check_choice("cv", cv, ("loo",))
        folds = None
    elif isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
        folds = fold_indices(n, cv, random_state)
    elif hasattr(cv, "split") or (not isinstance(cv, (bool, numbers.Number)) and cv is not None
                                  and hasattr(cv, "__iter__")):
        folds = cv_splits(n, cv, X, Y)
    else:
        raise TypeError(f"cv must be 'loo', an int >= 2, a splitter with split(X, Y) or an iterable of "
                        f"(train, test) index pairs, got {cv!r}")
    if folds is not None and w is not None and not any((w[va] > 0.0).any() for _, va in folds):
        raise ValueError("sample_weight is zero on every validation fold: importance-weighted CV has nothing to score")
    opts: dict[str, Any] = {"max_iter": max_iter, "tol": tol, "threads": threads}
    # SMTGP's start as predict computes it (init="kl": KLTGP stopped after SM_START_ITER iterations),
    # computed once per kernel setting and fold for every alpha; the KLTGP rows score the converged KLTGP
    start_opts: dict[str, Any] = {**opts, "init": "linear", "max_iter": kl_start_iterations(max_iter)}
    n_folds = 1 if folds is None else len(folds)
    n_fact = 0
    ridges: dict[bytes, np.ndarray] = {}  # loo_ridge per set of kept training points

    def evaluate(kern: tuple, scored: LooMethod, a_list: tuple, bar: Progress, kl_row: bool = True,
                 screen: np.ndarray | None = None) -> dict:
        """Mean and std of the validation error, converged and extrapolated shares, per alpha of ``a_list``.

        For SMTGP with ``kl_row`` also under ``"kl"``: the converged KLTGP prediction, scored as it stands.
        ``screen`` (leave-one-out only): score only these of the kept training points.
        """
        nonlocal n_fact
        base = TGPParams(gamma_x=kern[0], gamma_y=kern[1], lambda_x=kern[2], lambda_y=kern[3],
                         alpha=a_list[0], beta=betas[0])
        kl_row = kl_row and scored == "sm"
        per_alpha: dict[float | str, list] = {a: [] for a in a_list} | ({"kl": []} if kl_row else {})
        for fold in ([None] if folds is None else folds):
            if fold is None:
                model0 = fit(X, Y, base, methods=_fit_methods(scored), threads=threads, sample_weight=w)
                # fit leaves out zero-weight points; their validation weight is zero too
                kept = slice(None) if w is None else informative(w, base)
                Yv, wv = Y[kept], None if w is None else w[kept]
                key = b"" if w is None else np.asarray(kept).tobytes()
                if key not in ridges:  # "linear"'s ridge part: the same for every kernel setting
                    ridges[key] = loo_ridge(model0)
                if screen is not None:
                    Yv, wv = Yv[screen], None if wv is None else wv[screen]
                loo_opts = {**opts, "rows": screen}
                lv0 = leave_one_out(model0, threads)  # formed once per kernel setting; per alpha only K_XY's
                loo_opts["projections"] = lv0
                y0 = loo_linear_start(model0, "kl" if scored == "sm" else scored, ridges[key], threads=threads,
                                      rows=screen, loo=lv0)
                linear = y0 if np.isfinite(y0).all() else None  # None: init="linear" reports the overflow
                kl = start = None
                if scored == "sm":
                    kl = (loo_predict(model0, method="kl", certainty=False, **{**loo_opts, "init": linear})
                          if kl_row else None)
                    start = loo_predict(model0, method="kl", rows=screen, certainty=False, projections=lv0,
                                        **{**start_opts, "init": "linear" if linear is None else linear}).y
            else:
                tr, va = fold
                if w is not None and not informative(w[tr], base).any():
                    raise ValueError(f"cv fold {len(per_alpha[a_list[0]])}: every training point of the "
                                     "fold has zero (or negligible) sample_weight")
                model0 = fit(X[tr], Y[tr], base, methods=_fit_methods(scored), threads=threads,
                             sample_weight=None if w is None else w[tr])
                kl = predict(model0, X[va], method="kl", **opts) if kl_row else None
                start = predict(model0, X[va], method="kl", **start_opts).y if scored == "sm" else None
                Yv, wv = Y[va], None if w is None else w[va]
            n_fact += 3
            bar.step()
            if kl is not None:
                per_alpha["kl"].append(fold_errors(score_fn, Yv, wv, kl))
            for a in a_list:
                model = with_alpha(model0, a) if a != model0.params.alpha else model0
                n_fact += model is not model0
                if fold is None:
                    lv = lv0 if model is model0 else leave_one_out(model, threads, shared=lv0)
                    pred = loo_predict(model, method=scored, init=linear if start is None else start, certainty=False,
                                       **{**loo_opts, "projections": lv})
                else:
                    pred = predict(model, X[fold[1]], method=scored, init=start, **opts)
                per_alpha[a].append(fold_errors(score_fn, Yv, wv, pred))
                bar.step()
        return {a: score_summary(folds_a, folds is None) for a, folds_a in per_alpha.items()}

    alpha_dep = method in ("sm", "auto")
    a_list = alphas if alpha_dep else alphas[:1]
    rows = []  # (kernel..., alpha, beta, mean, std, converged, extrapolated, method)
    with quiet():
        if search == "grid":
            kernels = list(itertools.product(*values))
            units = len(kernels) * n_folds * (len(a_list) + 1)
            with Progress(progress, units, "select") as bar:
                for kern in kernels:
                    scored: LooMethod = "sm" if method == "auto" else cast(LooMethod, method)
                    res = evaluate(kern, scored, a_list, bar)
                    if method == "auto":
                        rows.append((*kern, np.nan, np.nan, *res["kl"], False, "kl"))
                    for a in alphas:
                        for b in betas:
                            rows.append((*kern, a, b, *res[a if alpha_dep else a_list[0]], False, scored))
        else:
            scored = "kl" if alpha_dep else cast(LooMethod, method)
            defaults = (d.gamma_x, d.gamma_y, d.lambda_x, d.lambda_y)
            first = [search_start(ax, dv) for ax, dv in zip(axes, defaults, strict=True)]
            bound = 1 + MAX_ROUNDS * sum(len(ax) - 1 for ax in axes)
            units = min(bound, int(np.prod([len(ax) for ax in axes]))) * n_folds * 2
            units += n_folds * (len(alphas) + 1) + 2 if alpha_dep else 0
            seen: dict[tuple, float] = {}
            with Progress(progress, units, "select") as bar:
                def score(ix: tuple) -> float:
                    if ix not in seen:
                        kern = tuple(values[k][i] for k, i in enumerate(ix))
                        res = evaluate(kern, scored, a_list[:1], bar)[a_list[0]]
                        a, b = (np.nan, np.nan) if alpha_dep else (alphas[0], betas[0])
                        rows.append((*kern, a, b, *res, False, scored))
                        seen[ix] = res[0]
                    return seen[ix]

                walk = descent_search if search == "descent" else coordinate_search
                best_ix = walk(axes, first, score)
                if alpha_dep:
                    kern = tuple(values[k][i] for k, i in enumerate(best_ix))
                    screen = _screen(n if w is None else int(informative(w, _params(kern)).sum()), len(alphas),
                                     random_state) if folds is None else None
                    # the search scored this kernel's converged KLTGP already (same start and options)
                    res = evaluate(kern, "sm", alphas, bar, kl_row=False, screen=screen)
                    finals = alphas
                    if screen is not None:  # the alphas on a subsample, the best of them on every point
                        for a in alphas:
                            for b in betas:
                                rows.append((*kern, a, b, *res[a], True, "sm"))
                        finals = (min(alphas, key=lambda a: (not np.isfinite(res[a][0]), res[a][0])),)
                        res = evaluate(kern, "sm", finals, bar, kl_row=False)
                    for a in finals:
                        for b in betas:
                            rows.append((*kern, a, b, *res[a], False, "sm"))
                bar.step(max(0, bar.total - bar.done))
    table = {c: np.array([r[j] for r in rows], dtype=float)
             for j, c in enumerate((*COLUMNS, "mean", "std", "converged", "extrapolated"))}
    table["screen"] = np.array([r[-2] for r in rows], dtype=bool)
    table["method"] = np.array([r[-1] for r in rows])
    final_rows = np.flatnonzero(np.isin(table["method"], ("kl", "sm") if method == "auto" else (method,))
                                & ~table["screen"])
    scores = table["mean"][final_rows]
    if not np.isfinite(scores).any():
        raise ValueError("no setting could be scored: every candidate's validation error is NaN or infinite "
                         "(check the targets, sample_weight and scoring)")
    best = int(final_rows[np.nanargmin(np.where(np.isfinite(scores), scores, np.nan))])
    chosen = str(table["method"][best])
    params = TGPParams(**{c: float(table[c][best]) for c in COLUMNS[:4]},
                       alpha=alphas[0] if np.isnan(table["alpha"][best]) else float(table["alpha"][best]),
                       beta=betas[0] if np.isnan(table["beta"][best]) else float(table["beta"][best]))
    if table["extrapolated"][best] > 0.0:
        warn(f"{table['extrapolated'][best]:.1%} of the validation inputs of the selected setting lay "
             "outside their training inputs' kernel support (every k(x, x_i) < "
             f"{config.EXTRAPOLATION_K:g}): their predictions were the start unchanged; see the "
             "'extrapolated' column of Selection.table", ExtrapolationWarning)
    final = fit(X, Y, params, threads=threads, sample_weight=w)
    return Selection(params=params, model=final, table=table, best_index=best, method=chosen,
                     cv="loo" if folds is None else (len(folds) if isinstance(cv, numbers.Integral) else "splits"),
                     scoring=score_name, n_factorizations=n_fact,
                     seconds=time.perf_counter() - t_start)


def _params(kern: tuple) -> TGPParams:
    return TGPParams(gamma_x=kern[0], gamma_y=kern[1], lambda_x=kern[2], lambda_y=kern[3])


def _screen(n_valid: int, n_alphas: int, random_state: int | None) -> np.ndarray | None:
    """The leave-one-out points that screen the alphas (sorted, :data:`fastsm.config.ALPHA_SCREEN_POINTS` of
    them, drawn with ``random_state``), or ``None`` where every point is scored (few points or one alpha)."""
    m = config.ALPHA_SCREEN_POINTS
    if n_alphas < 2 or n_valid <= m:
        return None
    return np.sort(np.random.default_rng(random_state).choice(n_valid, m, replace=False)).astype(np.int64)


def _fit_methods(scored: str) -> tuple[str, ...]:
    return ("kl", "sm") if scored == "sm" else (scored,)


