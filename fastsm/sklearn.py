"""scikit-learn estimators: ``TwinGPRegressor``, ``TwinGPRegressorCV`` and the ``KLIEPWeights`` helper.

Needs scikit-learn >= 1.6 (``pip install "fastsm[sklearn]"``).  The
estimators wrap :mod:`fastsm.tgp`; a 1-D ``y`` is fitted as one output
column and predicted back as 1-D, as scikit-learn users expect.
"""

from __future__ import annotations

import numbers

import numpy as np

try:
    from sklearn.base import BaseEstimator, RegressorMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - optional dependency
    raise ImportError('fastsm.sklearn needs scikit-learn >= 1.6: pip install "fastsm[sklearn]"') from exc

from fastsm import config, shift, tgp
from fastsm.shift.kliep import DEFAULT_MAX_ITER as KLIEP_MAX_ITER
from fastsm.shift.kliep import DEFAULT_TOL as KLIEP_TOL
from fastsm.tgp.select import PAPER_ALPHAS, PAPER_BETAS

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

    def _check_method(self):
        if self.method not in ("sm", "kl", "ikl"):
            raise ValueError(f"method must be one of ('sm', 'kl', 'ikl'), got {self.method!r}")

    def predict(self, X, return_certainty: bool = False):
        """Predicted outputs; with ``return_certainty`` also ``log phi`` per point ([SM] §4.2).

        Returns
        -------
        y : ndarray, shape (n,) or (n, dy)
        log_certainty : ndarray (n,), only if ``return_certainty``
        """
        check_is_fitted(self, "model_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        pred = tgp.predict(self.model_, X, method=self.method, max_iter=self.max_iter, tol=self.tol,
                           threads=_threads(self.n_jobs))
        y = pred.y[:, 0] if self._y_1d else pred.y
        return (y, pred.log_certainty) if return_certainty else y

    def partial_fit(self, X, y, sample_weight=None):
        """Append training points by the bordered O(N^2) update (:func:`fastsm.tgp.partial_fit`).

        The first call (unfitted estimator) fits.
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
    method : {"sm", "kl", "ikl"}
        SMTGP ([SM] Eq. 16, started from KLTGP), KLTGP or IKLTGP.
    alpha, beta : float
        SM order in (0, 1) and degree > 0 (``beta`` does not change the
        prediction, [SM] Lemma 4.2).
    gamma_x, gamma_y : float
        RBF inverse widths ``k = exp(-gamma |a - b|^2)`` of inputs and outputs.
    lambda_x, lambda_y : float
        Regularisers (GP noise) of ``K_X`` and ``K_Y``.
    max_iter, tol : int, float
        Optimiser limits per test point (:func:`fastsm.tgp.predict`).
    n_jobs : int, optional
        Threads (``None`` or ``-1``: all cores).  Results do not depend on it.

    Attributes
    ----------
    model_ : fastsm.tgp.TGPModel
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when ``X`` has string column names.

    Examples
    --------
    >>> from fastsm import datasets
    >>> from fastsm.sklearn import TwinGPRegressor
    >>> X, Xt, Y, Yt = datasets.toy1(n_train=200, n_test=50)
    >>> reg = TwinGPRegressor(alpha=0.9).fit(X, Y.ravel())
    >>> y, log_phi = reg.predict(Xt, return_certainty=True)
    >>> y.shape, log_phi.shape
    ((50,), (50,))
    """

    def __init__(self, method="sm", alpha=0.9, beta=1.5, gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4,
                 max_iter=config.DEFAULT_MAX_ITER, tol=config.DEFAULT_TOL, n_jobs=None):
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
        """Fit on ``X`` (n, dx) and ``y`` (n,) or (n, dy); ``sample_weight`` gives IW-TGP (MATH §6)."""
        self._check_method()
        params = tgp.TGPParams(gamma_x=self.gamma_x, gamma_y=self.gamma_y, lambda_x=self.lambda_x,
                               lambda_y=self.lambda_y, alpha=self.alpha, beta=self.beta)
        X, Y = self._fit_data(X, y)
        self.model_ = tgp.fit(X, Y, params, methods=_methods(self.method), threads=_threads(self.n_jobs),
                              sample_weight=sample_weight)
        return self


class TwinGPRegressorCV(_TwinGPPredictMixin, RegressorMixin, BaseEstimator):
    """:class:`TwinGPRegressor` with hyperparameters chosen by cross-validation (:func:`fastsm.tgp.select`).

    ``cv="loo"`` is exact leave-one-out by downdates — no refits, the
    analogue of ``RidgeCV``'s fast leave-one-out.

    Parameters
    ----------
    method : {"sm", "kl", "ikl"}
    alphas, betas : sequence of float
        Default [SM] §5.2's grid (0.05 … 0.95 × {0.5, 0.99, 1.5}).
    gammas_x, gammas_y, lambdas_x, lambdas_y : float or sequence of float
    cv : "loo", int, splitter or iterable of (train, test) splits
        As in :func:`fastsm.tgp.select` (an int is capped at the number of
        samples).
    scoring : {"mae", "mse", "euclidean"}
    max_iter, tol, n_jobs
        As in :class:`TwinGPRegressor`.

    Attributes
    ----------
    alpha_, beta_, gamma_x_, gamma_y_, lambda_x_, lambda_y_ : float
        Selected hyperparameters.
    best_score_ : float
        Their mean validation error (lower is better).
    cv_results_ : dict of str to ndarray
        The score table of :class:`fastsm.tgp.Selection`.
    selection_ : fastsm.tgp.Selection
    model_ : fastsm.tgp.TGPModel
        Refit on all the data with the selected hyperparameters.
    """

    def __init__(self, method="sm", alphas=PAPER_ALPHAS, betas=PAPER_BETAS, gammas_x=0.2, gammas_y=20.0,
                 lambdas_x=1e-4, lambdas_y=1e-4, cv="loo", scoring="mae", max_iter=config.DEFAULT_MAX_ITER,
                 tol=config.DEFAULT_TOL, n_jobs=None):
        self.method = method
        self.alphas = alphas
        self.betas = betas
        self.gammas_x = gammas_x
        self.gammas_y = gammas_y
        self.lambdas_x = lambdas_x
        self.lambdas_y = lambdas_y
        self.cv = cv
        self.scoring = scoring
        self.max_iter = max_iter
        self.tol = tol
        self.n_jobs = n_jobs

    def fit(self, X, y, sample_weight=None):
        """Select on ``X``, ``y`` (importance-weighted CV with ``sample_weight``) and refit on all of it."""
        self._check_method()
        X, Y = self._fit_data(X, y)
        cv = self.cv
        if isinstance(cv, numbers.Integral) and not isinstance(cv, bool):
            cv = min(int(cv), X.shape[0])
        sel = tgp.select(X, Y, alphas=self.alphas, betas=self.betas, gammas_x=self.gammas_x,
                         gammas_y=self.gammas_y, lambdas_x=self.lambdas_x, lambdas_y=self.lambdas_y, cv=cv,
                         method=self.method, scoring=self.scoring, sample_weight=sample_weight,
                         max_iter=self.max_iter, tol=self.tol, threads=_threads(self.n_jobs))
        p = sel.params
        self.alpha_, self.beta_, self.gamma_x_, self.gamma_y_ = p.alpha, p.beta, p.gamma_x, p.gamma_y
        self.lambda_x_, self.lambda_y_ = p.lambda_x, p.lambda_y
        self.best_score_ = sel.best_score
        self.cv_results_ = sel.table
        self.selection_ = sel
        self.model_ = sel.model
        return self


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
        return shift.weights_at(self.result_, X)
