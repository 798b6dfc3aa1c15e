"""Choosing KLIEP's kernel width: likelihood CV on held-out test points, and importance-weighted CV.

docs/math.md §5: KLIEP's in-sample objective keeps improving as sigma shrinks, so sigma
is chosen on points the fit has not seen.  LCV (Sugiyama et al. 2008) scores
``mean log w(x_te)`` on held-out test folds, with the held-out points removed
from the centres; IWCV (Sugiyama et al. 2007) scores a downstream
regressor's importance-weighted squared error on held-out training folds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fastsm._threads import resolve_threads
from fastsm._validation import as_2d, as_float_array, as_rng, check_choice, check_int, check_scalar
from fastsm.shift.kliep import (
    SOLVERS,
    SigmaTooSmallError,
    check_center_count,
    check_centers,
    check_pair,
    fit_on_centers,
    median_distance,
    weights_at,
)

#: Folds of the cross-validation that chooses ``sigma`` (``select_sigma``'s default, ``estimate_weights``')
SIGMA_CV_FOLDS = 5

Regressor = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True, eq=False, repr=False)
class SigmaSelection:
    """Result of :func:`select_sigma`.

    Attributes
    ----------
    sigma : float
        The chosen width.
    sigmas : ndarray
        The grid.
    scores : ndarray
        Mean CV score per width: LCV, held-out mean log-likelihood (higher
        is better); IWCV, importance-weighted squared error (lower is better).
    fold_scores : ndarray (n_sigmas, n_folds)
    method : str
    """

    sigma: float
    sigmas: np.ndarray
    scores: np.ndarray
    fold_scores: np.ndarray
    method: str

    def table(self) -> str:
        """The score table as text, the chosen width marked."""
        head = "held-out mean log w" if self.method == "lcv" else "IW squared error"
        lines = [f"{'sigma':>10}  {head:>20}"]
        for s, v in zip(self.sigmas, self.scores, strict=True):
            lines.append(f"{s:10.4g}  {v:20.6g}{'  <-' if s == self.sigma else ''}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SigmaSelection(method={self.method!r}, sigma={self.sigma:.4g}, n_sigmas={self.sigmas.size})"


def default_sigmas(X_train: ArrayLike, X_test: ArrayLike, n: int = 9) -> np.ndarray:
    """``n`` widths from 1/8 to 2 times the median pairwise distance of the pooled inputs (log-spaced)."""
    X_train, X_test = check_pair(X_train, X_test)
    n = check_int("n", n, low=1)
    return median_distance(X_train, X_test) * 2.0 ** np.linspace(-3.0, 1.0, n)


def weighted_kernel_ridge(X_fit: ArrayLike, Y_fit: ArrayLike, w_fit: ArrayLike, X_eval: ArrayLike, *, lam: float = 0.1,
                          gamma: float | None = None) -> np.ndarray:
    """Importance-weighted kernel ridge regression: ``k(x, X) (K + lam W^-1)^-1 Y`` (RBF kernel).

    The default downstream regressor of IWCV (GP mean with noise
    ``lam / w_i``, docs/math.md §6); ``gamma`` defaults to ``1 / (2 med^2)`` with
    ``med`` the median pairwise distance of ``X_fit``.
    """
    X_fit, Y_fit, w_fit = np.asarray(X_fit, dtype=float), np.asarray(Y_fit, dtype=float), np.asarray(w_fit, dtype=float)
    keep = w_fit > 0.0
    X_fit, Y_fit, w_fit = X_fit[keep], Y_fit[keep], w_fit[keep]
    if gamma is None:
        gamma = 1.0 / (2.0 * median_distance(X_fit, X_fit[:0]) ** 2)

    def rbf(A, B):
        d2 = np.sum(A * A, 1)[:, None] + np.sum(B * B, 1)[None, :] - 2.0 * A @ B.T
        return np.exp(-gamma * np.maximum(d2, 0.0))

    K = rbf(X_fit, X_fit) + np.diag(lam / w_fit)
    coef = np.linalg.solve(K, Y_fit)
    return rbf(X_eval, X_fit) @ coef


def _folds(n: int, n_folds: int, rng) -> list[np.ndarray]:
    return np.array_split(rng.permutation(n), n_folds)


def select_sigma(
    X_train: ArrayLike,
    X_test: ArrayLike,
    *,
    method: Literal["lcv", "iwcv"] = "lcv",
    sigmas: ArrayLike | None = None,
    Y_train: ArrayLike | None = None,
    regressor: Regressor | None = None,
    n_folds: int = SIGMA_CV_FOLDS,
    centers: int | ArrayLike | None = None,
    solver: str = "pfw",
    tol: float = 1e-6,
    threads: int | None = None,
    random_state: int | np.random.Generator | None = None,
) -> SigmaSelection:
    """Choose the KLIEP width ``sigma`` by cross-validation.

    Parameters
    ----------
    X_train, X_test : array_like
        As for :func:`fastsm.shift.estimate_weights`.
    method : {"lcv", "iwcv"}
        ``"lcv"``: likelihood cross-validation over test folds — fit on the
        other folds (their points the centres) and score the held-out points'
        mean ``log w`` (Sugiyama et al. 2008, with the held-out points out of
        the centres).  ``"iwcv"``: weights from all data, then K-fold CV of
        ``regressor`` on the training set with importance-weighted fits and
        importance-weighted squared errors (Sugiyama et al. 2007); needs
        ``Y_train``.
    sigmas : array_like, optional
        Grid of widths (> 0); default :func:`default_sigmas`.
    Y_train : array_like, optional
        Training outputs (IWCV only).
    regressor : callable, optional
        ``regressor(X_fit, Y_fit, w_fit, X_eval) -> Y_eval`` (IWCV); default
        :func:`weighted_kernel_ridge`.
    n_folds : int
        Number of folds (>= 2).
    centers : None, int or array
        As for ``estimate_weights``; under LCV ``None`` and ``int`` draw the
        centres from the fitting folds only.
    solver : str
        KLIEP solver (with polish) for every fit.
    tol : float
        Duality-gap tolerance of every fit.
    threads, random_state
        As for ``estimate_weights``.

    Returns
    -------
    SigmaSelection
    """
    X_train, X_test = check_pair(X_train, X_test)
    check_choice("method", method, ("lcv", "iwcv"))
    check_choice("solver", solver, SOLVERS)
    n_folds = check_int("n_folds", n_folds, low=2)
    tol = check_scalar("tol", tol, low=0.0)
    if sigmas is None:
        sigmas = default_sigmas(X_train, X_test)
    sigmas = as_float_array("sigmas", sigmas, ndim=1)
    if np.any(sigmas <= 0.0):
        raise ValueError(f"sigmas must all be > 0, got a minimum of {sigmas.min():g}")
    resolve_threads(threads)
    rng = as_rng("random_state", random_state)
    fit_kw = dict(max_iter=10_000, tol=tol, ftol=0.0, polish=True, threads=threads)
    if isinstance(centers, (int, np.integer)) and not isinstance(centers, bool):
        check_center_count(centers, X_test.shape[0])  # the rule of estimate_weights
    if method == "lcv":
        if n_folds > X_test.shape[0]:
            raise ValueError(f"likelihood cross-validation (method='lcv') over n_folds = {n_folds} folds of the test "
                             f"points needs at least {n_folds} of them, got n_test = {X_test.shape[0]}; "
                             "pass fewer n_folds (>= 2) or choose sigma yourself")
        folds = _folds(X_test.shape[0], n_folds, rng)
        scores = np.empty((sigmas.size, n_folds))
        for k, held in enumerate(folds):
            fit_idx = np.setdiff1d(np.arange(X_test.shape[0]), held)
            Xf = X_test[fit_idx]
            C = _lcv_centers(centers, X_test, Xf, rng)
            for i, s in enumerate(sigmas):
                scores[i, k] = _held_out_loglik(X_train, Xf, C, float(s), solver, fit_kw, X_test[held])
        mean = scores.mean(axis=1)
        if not np.isfinite(mean).any():
            raise ValueError(f"no width in sigmas ({sigmas.min():.3g} ... {sigmas.max():.3g}) gives every held-out "
                             "test point a finite likelihood: every fit needs a wider kernel; pass larger sigmas "
                             "(or sigma= to estimate_weights)")
        best = int(np.argmax(np.where(np.isfinite(mean), mean, -np.inf)))
    else:
        if Y_train is None:
            raise ValueError("Y_train is required for method='iwcv'")
        Y_train = as_2d("Y_train", Y_train)
        if Y_train.shape[0] != X_train.shape[0]:
            raise ValueError(f"Y_train must have {X_train.shape[0]} rows (one per training input), "
                             f"got {Y_train.shape[0]}")
        if n_folds > X_train.shape[0]:
            raise ValueError(f"n_folds must be at most n_train = {X_train.shape[0]} for IWCV, got {n_folds}")
        reg = weighted_kernel_ridge if regressor is None else regressor
        if not callable(reg):
            raise TypeError(f"regressor must be callable, got {type(reg).__name__}")
        C = check_centers(centers, X_test, rng)
        folds = _folds(X_train.shape[0], n_folds, rng)
        scores = np.empty((sigmas.size, n_folds))
        for i, s in enumerate(sigmas):
            w = fit_on_centers(X_train, X_test, C, float(s), solver, **fit_kw).weights
            for k, held in enumerate(folds):
                fit_idx = np.setdiff1d(np.arange(X_train.shape[0]), held)
                pred = np.asarray(reg(X_train[fit_idx], Y_train[fit_idx], w[fit_idx], X_train[held]), dtype=float)
                err = np.sum((pred.reshape(len(held), -1) - Y_train[held]) ** 2, axis=1)
                scores[i, k] = float(np.mean(w[held] * err))
        mean = scores.mean(axis=1)
        best = int(np.argmin(np.where(np.isfinite(mean), mean, np.inf)))
    return SigmaSelection(sigma=float(sigmas[best]), sigmas=sigmas.copy(), scores=mean, fold_scores=scores,
                          method=method)


def _lcv_centers(centers, X_test, X_fit, rng) -> np.ndarray:
    if centers is None:
        return X_fit
    if isinstance(centers, (int, np.integer)) and not isinstance(centers, bool):
        m = min(int(centers), X_fit.shape[0])
        return X_fit[np.sort(rng.choice(X_fit.shape[0], size=m, replace=False))]
    return check_centers(centers, X_test, rng)


def _held_out_loglik(X_train, X_fit, C, sigma, solver, fit_kw, X_held) -> float:
    try:
        iw = fit_on_centers(X_train, X_fit, C, sigma, solver, **fit_kw)
    except SigmaTooSmallError:  # sigma too small for these centres: F = -inf on the fitting folds
        return -np.inf
    w = weights_at(iw, X_held, threads=fit_kw.get("threads"))
    with np.errstate(divide="ignore"):
        return float(np.mean(np.log(w)))
