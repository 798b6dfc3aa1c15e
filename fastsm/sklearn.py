"""scikit-learn estimators: ``TwinGPRegressor``, ``TwinGPRegressorCV`` and the ``KLIEPWeights`` helper.

Needs scikit-learn >= 1.6 (``pip install "fastsm[sklearn]"``).  The
estimators wrap :mod:`fastsm.tgp`; a 1-D ``y`` is fitted as one output
column and predicted back as 1-D, as scikit-learn users expect.
"""

from __future__ import annotations

import numbers
from typing import Any, cast

import numpy as np

from fastsm.tgp.prediction import Method
from fastsm.tgp.regimes import fit_auto, regime_params

try:
    from sklearn.base import BaseEstimator, RegressorMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - optional dependency
    raise ImportError('fastsm.sklearn needs scikit-learn >= 1.6: pip install "fastsm[sklearn]"') from exc

from fastsm import config, shift, tgp
from fastsm.shift.kliep import DEFAULT_MAX_ITER as KLIEP_MAX_ITER
from fastsm.shift.kliep import DEFAULT_TOL as KLIEP_TOL
from fastsm.tgp.scoring import cv_results
from fastsm.tgp.search import COLUMNS, DEFAULT_ALPHAS, GAMMA_X_GRID, GAMMA_Y_GRID, LAMBDA_GRID, SEARCHES

__all__ = ["TwinGPRegressor", "TwinGPRegressorCV", "KLIEPWeights"]


def _threads(n_jobs):
    """scikit-learn's ``n_jobs`` as fastsm's ``threads``: ``None`` or ``-1`` all cores, ``-k`` all but k-1."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0:
        raise ValueError(f"n_jobs must be None or a non-zero int, got {n_jobs!r}")
    if n_jobs < 0:
        from fastsm._threads import resolve_threads

        return max(1, resolve_threads(None) + 1 + int(n_jobs))
    return int(n_jobs)


def _methods(method: str) -> tuple[str, ...]:
    return {"sm": ("kl", "sm"), "kl": ("kl",), "ikl": ("ikl",)}[method]


class _TwinGPPredictMixin:
    """``predict`` / ``partial_fit`` shared by both estimators (``model_``, ``_y_1d`` set by ``fit``)."""

    _METHODS: tuple[str, ...] = ("sm", "kl", "ikl")
    # the estimators' parameters (set by their __init__)
    method: str
    max_iter: int | None
    tol: float
    n_jobs: int | None

    def _check_method(self):
        if self.method not in self._METHODS:
            raise ValueError(f"method must be one of {self._METHODS}, got {self.method!r}")

    def _predict_method(self) -> Method:
        return cast(Method, self.method)  # checked by _check_method in fit

    def predict(self, X, return_certainty: bool = False):
        """Predicted outputs; with ``return_certainty`` also ``log phi`` per point ([SM] §4.2).

        Returns
        -------
        y : ndarray, shape (n,) or (n, dy)
        log_certainty : ndarray (n,), only if ``return_certainty``
        """
        check_is_fitted(self, "model_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        pred = tgp.predict(self.model_, X, method=self._predict_method(), max_iter=self.max_iter, tol=self.tol,
                           threads=_threads(self.n_jobs))
        y = pred.y[:, 0] if self._y_1d else pred.y
        return (y, pred.log_certainty) if return_certainty else y

    def partial_fit(self, X, y, sample_weight=None):
        """Append training points by the bordered O(N^2) update (:func:`fastsm.tgp.partial_fit`).

        The first call (unfitted estimator) fits; ``"scale"`` widths are
        resolved on its data and kept by the later calls (a model's
        hyperparameters do not move when points are appended).
        """
        if not hasattr(self, "model_"):
            return self.fit(X, y, sample_weight=sample_weight)
        X, y = validate_data(self, X, y, reset=False, multi_output=True, y_numeric=True, dtype=np.float64)
        Y = y.reshape(-1, 1) if y.ndim == 1 else y
        if Y.shape[1] != self.model_.Y.shape[1]:
            raise ValueError(f"y must have {self.model_.Y.shape[1]} outputs as in fit, got {Y.shape[1]}")
        self.model_ = tgp.partial_fit(self.model_, X, Y, sample_weight=sample_weight,
                                      threads=_threads(self.n_jobs))
        return self

    def _fit_data(self, X, y):
        X, y = validate_data(self, X, y, multi_output=True, y_numeric=True, dtype=np.float64)
        self._y_1d = y.ndim == 1
        return X, (y.reshape(-1, 1) if self._y_1d else y)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class TwinGPRegressor(_TwinGPPredictMixin, RegressorMixin, BaseEstimator):
    """Twin Gaussian process regression (SMTGP, KLTGP or IKLTGP) as a scikit-learn regressor.

    Parameters
    ----------
    method : {"kl", "sm", "ikl"}
        KLTGP (default), SMTGP ([SM] Eq. 16, started from KLTGP) or IKLTGP.
    alpha, beta : float
        SM order in (0, 1) and degree > 0 (SMTGP only; ``beta`` does not
        change the prediction, [SM] Lemma 4.2).
    gamma_x, gamma_y : float or str
        RBF inverse widths ``k = exp(-gamma |a - b|^2)`` of inputs and
        outputs, or ``"scale"`` / ``"f*scale"``: relative to the median
        squared distance between training rows (:class:`fastsm.tgp.TGPParams`),
        so that predictions do not depend on the units of ``X`` and ``y``.
        ``model_.params`` holds the numbers.
    lambda_x, lambda_y : float
        Regularisers (GP noise) of ``K_X`` and ``K_Y``, relative to the
        kernels' unit variance.

    ``gamma_x = lambda_x = "auto"`` (the default) take the input kernel of the
    regime ``"sharp"`` (``"0.5*scale"``, ``1e-3``: data with signal) or
    ``"smooth"`` (``"0.0625*scale"``, ``0.1``: small or weak-signal sets)
    with the smaller exact leave-one-out error
    (:mod:`fastsm.tgp.regimes`; about two predictions of the training
    set): within 0.03 R² of :class:`TwinGPRegressorCV` on every task of the
    real-data panel at a few per cent of its fit time, units-free
    (docs/selection.md, "TwinGPRegressor()'s defaults").  Numbers skip it.
    max_iter, tol : int or None, float
        Optimiser limits per test point (:func:`fastsm.tgp.predict`; ``max_iter=None``: 50 + 2 dy).
    n_jobs : int, optional
        Threads (``None`` or ``-1``: all cores).  Results do not depend on it.

    Attributes
    ----------
    model_ : fastsm.tgp.TGPModel
    regime_ : str or None
        ``"sharp"`` or ``"smooth"`` where ``gamma_x`` or ``lambda_x`` is ``"auto"``, else ``None``.
    regime_scores_ : dict of str to float
        Each regime's weighted leave-one-out mean squared error (empty without ``"auto"``).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    Examples
    --------
    >>> from fastsm import datasets
    >>> from fastsm.sklearn import TwinGPRegressor
    >>> X, Xt, Y, Yt = datasets.toy1(n_train=200, n_test=50)
    >>> reg = TwinGPRegressor(method="sm", alpha=0.9).fit(X, Y.ravel())
    >>> y, log_phi = reg.predict(Xt, return_certainty=True)
    >>> y.shape, log_phi.shape
    ((50,), (50,))
    """

    def __init__(self, method: str = "kl", alpha: float = 0.9, beta: float = 1.5, gamma_x: float | str = "auto",
                 gamma_y: float | str = "0.5*scale", lambda_x: float | str = "auto", lambda_y: float = 1.0,
                 max_iter: int | None = None, tol: float = config.DEFAULT_TOL, n_jobs: int | None = None):
        self.method = method
        self.alpha = alpha
        self.beta = beta
        self.gamma_x = gamma_x
        self.gamma_y = gamma_y
        self.lambda_x = lambda_x
        self.lambda_y = lambda_y
        self.max_iter = max_iter
        self.tol = tol
        self.n_jobs = n_jobs

    def fit(self, X, y, sample_weight=None):
        """Fit on ``X`` (n, dx) and ``y`` (n,) or (n, dy); ``sample_weight`` gives IW-TGP (docs/math.md §6).

        With ``gamma_x`` or ``lambda_x`` ``"auto"`` the input kernel's regime is chosen first by exact
        leave-one-out (:func:`fastsm.tgp.regimes.fit_auto`).
        """
        self._check_method()
        kw = dict(gamma_x=self.gamma_x, gamma_y=self.gamma_y, lambda_x=self.lambda_x, lambda_y=self.lambda_y,
                  alpha=self.alpha, beta=self.beta)
        regime_params(kw)  # invalid values raise here, before the data
        X, Y = self._fit_data(X, y)
        self.model_, choice = fit_auto(X, Y, kw, methods=_methods(self.method), sample_weight=sample_weight,
                                       threads=_threads(self.n_jobs), max_iter=self.max_iter, tol=self.tol)
        self.regime_ = None if choice is None else choice.regime
        self.regime_scores_ = {} if choice is None else choice.scores
        return self


class TwinGPRegressorCV(_TwinGPPredictMixin, RegressorMixin, BaseEstimator):
    """:class:`TwinGPRegressor` that tunes its kernels, then alpha, by cross-validation (:func:`fastsm.tgp.select`).

    With no arguments it searches what moves the prediction
    (docs/selection.md, "TwinGPRegressorCV"): the input and output widths
    relative to ``"scale"`` and both regularisers, by cyclic coordinate
    search (neighbour steps above :data:`fastsm.config.DESCENT_MIN_POINTS` points)
    scored by KLTGP's exact leave-one-out error, then SMTGP's alpha
    at those kernels (screened on a subsample of the points above
    :data:`fastsm.config.ALPHA_SCREEN_POINTS`, the best scored on all); KLTGP
    (SMTGP's ``alpha -> 0`` limit) and SMTGP compete
    (``method="auto"``).  ``beta`` does not move the prediction ([SM]
    Lemma 4.2).  ``cv="loo"`` is exact leave-one-out by downdates -- no
    refits, the analogue of ``RidgeCV``'s fast leave-one-out.

    Parameters
    ----------
    method : {"auto", "sm", "kl", "ikl"}
        ``"auto"``: the better of KLTGP and SMTGP (``method_``).
    alphas, betas : sequence of float
        SM orders tried after the kernels (default :data:`~fastsm.tgp.search.DEFAULT_ALPHAS`,
        0.01 … 0.9) and degrees (one suffices).
    gammas_x, gammas_y : float, str or sequence, optional
        Width grids, numbers or ``"f*scale"`` strings; ``None``: ``"scale"``
        times 1/64 … 4 (inputs) and 1/8 … 2 (outputs), powers of 2.
    lambdas_x, lambdas_y : float or sequence, optional
        ``None``: 1e-4, 1e-3, 1e-2, 1e-1, 1.
    cv : "loo", int, splitter or iterable of (train, test) splits
        As in :func:`fastsm.tgp.select` (an int is capped at the number of
        samples).
    scoring : {"mse", "mae", "euclidean"}
        The validation error minimised (``"mse"``: the one R^2 rests on;
        ``"mae"`` is [SM] Table 2's).
    search : {"auto", "descent", "coordinate", "grid"}
        How the kernel settings are searched (:func:`fastsm.tgp.select`):
        ``"descent"`` steps each axis to its better neighbour while the error falls,
        ``"coordinate"`` sweeps every value of each axis, ``"grid"`` tries every combination;
        ``"auto"``: ``"descent"`` above :data:`fastsm.config.DESCENT_MIN_POINTS` training
        points, else ``"coordinate"``.
    max_iter, tol, n_jobs
        As in :class:`TwinGPRegressor`.

    Attributes
    ----------
    method_ : str
        The predictor chosen ("kl" or "sm" for ``method="auto"``).
    alpha_, beta_, gamma_x_, gamma_y_, lambda_x_, lambda_y_ : float
        Selected hyperparameters (widths as numbers).
    best_params_ : dict
        The same, with ``method``.
    best_score_ : float
        Their validation score, scikit-learn's way: the negated mean error
        (higher is better; ``-best_score_`` is ``selection_.best_score``).
    best_index_ : int
        Row of the choice in ``cv_results_`` (its ``rank_test_score`` is 1, its
        ``params`` equal ``best_params_``).
    cv_results_ : dict of str to ndarray
        One row per candidate setting scored (``selection_.table`` also has
        the kernel search's KLTGP rows of ``method="sm"`` and the alpha screen's rows), as
        ``GridSearchCV``'s: ``params``,
        ``param_<name>`` (``param_method``: the predictor scored),
        ``mean_test_score``, ``std_test_score``, ``rank_test_score``, and
        the shares ``converged`` and ``extrapolated``.
    selection_ : fastsm.tgp.Selection
    model_ : fastsm.tgp.TGPModel
        Refit on all the data with the selected hyperparameters.
    """

    _METHODS = ("auto", "sm", "kl", "ikl")

    def __init__(self, method="auto", alphas=DEFAULT_ALPHAS, betas=(1.5,), gammas_x=None, gammas_y=None,
                 lambdas_x=None, lambdas_y=None, cv="loo", scoring="mse", search="auto",
                 max_iter=None, tol=config.DEFAULT_TOL, n_jobs=None):
        self.method = method
        self.alphas = alphas
        self.betas = betas
        self.gammas_x = gammas_x
        self.gammas_y = gammas_y
        self.lambdas_x = lambdas_x
        self.lambdas_y = lambdas_y
        self.cv = cv
        self.scoring = scoring
        self.search = search
        self.max_iter = max_iter
        self.tol = tol
        self.n_jobs = n_jobs

    def _predict_method(self) -> Method:
        return cast(Method, self.method_)

    def fit(self, X, y, sample_weight=None):
        """Select on ``X``, ``y`` (importance-weighted CV with ``sample_weight``) and refit on all of it."""
        self._check_method()
        if self.search not in SEARCHES:
            raise ValueError(f"search must be one of {SEARCHES}, got {self.search!r}")
        X, Y = self._fit_data(X, y)
        cv = self.cv
        if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
            cv = min(int(cv), X.shape[0])

        def grid(value, default):
            return default if value is None else value

        sel = tgp.select(X, Y, alphas=self.alphas, betas=self.betas, gammas_x=grid(self.gammas_x, GAMMA_X_GRID),
                         gammas_y=grid(self.gammas_y, GAMMA_Y_GRID), lambdas_x=grid(self.lambdas_x, LAMBDA_GRID),
                         lambdas_y=grid(self.lambdas_y, LAMBDA_GRID), cv=cv, method=self.method,
                         scoring=self.scoring, search=self.search, sample_weight=sample_weight,
                         max_iter=self.max_iter, tol=self.tol, threads=_threads(self.n_jobs))
        p = sel.params
        self.method_ = sel.method
        self.alpha_, self.beta_, self.gamma_x_, self.gamma_y_ = p.alpha, p.beta, p.gamma_x, p.gamma_y
        self.lambda_x_, self.lambda_y_ = p.lambda_x, p.lambda_y
        self.best_params_ = {"method": sel.method, **{c: getattr(p, c) for c in COLUMNS}}
        # candidates of the final choice only (the kernel search's KLTGP rows of method="sm" and the alpha
        # screen's rows are not settings it can return; they stay in selection_.table), alpha and beta as
        # best_params_ has them
        candidates = ("kl", "sm") if self.method == "auto" else (self.method,)
        rows = np.flatnonzero(np.isin(sel.table["method"], candidates) & ~sel.table["screen"])
        self.best_index_ = int(np.flatnonzero(rows == sel.best_index)[0])
        self.best_score_ = -sel.best_score
        d = tgp.TGPParams()
        self.cv_results_ = cv_results(sel.table, rows, _first(self.alphas, d.alpha), _first(self.betas, d.beta))
        self.selection_ = sel
        self.model_ = sel.model
        return self


def _first(values: Any, default: float) -> float:
    """The first entry of a grid as :func:`fastsm.tgp.select` reads it (a KLTGP choice's alpha, beta)."""
    if values is None:
        return float(default)
    first: Any = values if np.isscalar(values) else tuple(values)[0]
    return float(first)


class KLIEPWeights(BaseEstimator):
    """KLIEP importance weights (:func:`fastsm.shift.estimate_weights`) for ``sample_weight``.

    ``KLIEPWeights().fit(X_train, X_target).weights_`` are the weights of
    the training points (mean 1); :meth:`weights` evaluates ``w(x)`` at any
    points.  Feed them to ``TwinGPRegressor().fit(X_train, y,
    sample_weight=...)`` (IW-TGP) or to any estimator that takes
    ``sample_weight``.

    Parameters
    ----------
    solver, sigma, centers, max_iter, tol, polish, random_state
        As in :func:`fastsm.shift.estimate_weights`.
    n_jobs : int, optional
        Threads.

    Attributes
    ----------
    weights_ : ndarray (n_train,)
    result_ : fastsm.shift.ImportanceWeights
    n_features_in_ : int
    """

    def __init__(self, solver="pfw", sigma=None, centers=None, max_iter=KLIEP_MAX_ITER, tol=KLIEP_TOL,
                 polish=True, random_state=None, n_jobs=None):
        self.solver = solver
        self.sigma = sigma
        self.centers = centers
        self.max_iter = max_iter
        self.tol = tol
        self.polish = polish
        self.random_state = random_state
        self.n_jobs = n_jobs

    def fit(self, X, X_target):
        """Estimate ``p_target / p_train`` from training inputs ``X`` and unlabelled target inputs."""
        X = validate_data(self, X, dtype=np.float64)
        X_target = validate_data(self, X_target, reset=False, dtype=np.float64)
        self.result_ = shift.estimate_weights(X, X_target, solver=self.solver, sigma=self.sigma,
                                              centers=self.centers, max_iter=self.max_iter, tol=self.tol,
                                              polish=self.polish, threads=_threads(self.n_jobs),
                                              random_state=self.random_state)
        self.weights_ = self.result_.weights
        return self

    def fit_weights(self, X, X_target) -> np.ndarray:
        """``fit(X, X_target).weights_``."""
        return self.fit(X, X_target).weights_

    def weights(self, X) -> np.ndarray:
        """``w(x)`` at new points (:func:`fastsm.shift.weights_at`)."""
        check_is_fitted(self, "result_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return shift.weights_at(self.result_, X, threads=_threads(self.n_jobs))
