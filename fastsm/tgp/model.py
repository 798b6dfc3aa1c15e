"""Frozen dataclasses holding TGP hyperparameters, fitted models and predictions."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fastsm._validation import check_scalar


@dataclass(frozen=True)
class TGPParams:
    """Hyperparameters of KLTGP, IKLTGP and SMTGP.

    Kernels are ``k(a, b) = exp(-gamma ||a - b||^2) + lambda [a is b]``, the
    convention of scikit-learn's ``rbf_kernel`` and Bo & Sminchisescu's
    ``kparam``: the papers' width ``2 rho^2`` is ``1 / gamma`` ([SM] Table 1,
    Toy 1: ``2 rho_x^2 = 5, 2 rho_y^2 = 0.05`` is ``gamma_x = 0.2, gamma_y = 20``).

    Parameters
    ----------
    gamma_x, gamma_y : float
        RBF inverse widths of the input and output kernels (> 0).
    lambda_x, lambda_y : float
        Diagonal regularisers of ``K_X`` and ``K_Y`` (>= 0).
    alpha : float
        SM order, ``0 < alpha < 1`` (weight of ``K_Y`` in ``K_XY``, [SM] Eq. 22).
    beta : float
        SM degree, ``beta > 0``; ``beta == 1`` is the Rényi limit.
    """

    gamma_x: float = 0.2
    gamma_y: float = 20.0
    lambda_x: float = 1e-4
    lambda_y: float = 1e-4
    alpha: float = 0.9
    beta: float = 1.5

    def __post_init__(self) -> None:
        for name in ("gamma_x", "gamma_y"):
            object.__setattr__(self, name, check_scalar(name, getattr(self, name), low=0.0, low_open=True))
        for name in ("lambda_x", "lambda_y"):
            object.__setattr__(self, name, check_scalar(name, getattr(self, name), low=0.0))
        object.__setattr__(
            self, "alpha", check_scalar("alpha", self.alpha, low=0.0, high=1.0, low_open=True, high_open=True)
        )
        object.__setattr__(self, "beta", check_scalar("beta", self.beta, low=0.0, low_open=True))


@dataclass(frozen=True, eq=False)
class TGPModel:
    """A fitted twin-GP model: training data and everything precomputed from it.

    Attributes
    ----------
    X, Y : ndarray
        Training inputs (N×dx) and outputs (N×dy), float64 C-contiguous.
    params : TGPParams
    Kx_inv, Ky_inv, Kxy_inv : ndarray
        ``K_X^-1``, ``K_Y^-1`` and ``K_XY^-1`` with ``K_XY = (1-a) K_X + a K_Y``.
    C : ndarray or None
        ``K_Y^-1 K_X K_Y^-1`` (IKLTGP), ``None`` if not requested at fit.
    logdet_x, logdet_y, logdet_xy : float
        Log-determinants of ``K_X``, ``K_Y``, ``K_XY``.
    y_spread : float
        RMS distance of the training outputs from their mean (unit of the
        trust radius and of the step tolerance).
    ridge_coef : ndarray
        ``(dx+1)×dy`` ridge-regression coefficients (bias last), the
        ``init="linear"`` start.
    """

    X: np.ndarray
    Y: np.ndarray
    params: TGPParams
    Kx_inv: np.ndarray = field(repr=False)
    Ky_inv: np.ndarray = field(repr=False)
    Kxy_inv: np.ndarray = field(repr=False)
    C: np.ndarray | None = field(repr=False)
    logdet_x: float
    logdet_y: float
    logdet_xy: float
    y_spread: float
    ridge_coef: np.ndarray = field(repr=False)

    @property
    def n_train(self) -> int:
        """Number of training points N."""
        return self.X.shape[0]


@dataclass(frozen=True, eq=False)
class Prediction:
    """Result of :func:`fastsm.tgp.predict`.

    Attributes
    ----------
    y : ndarray
        Predicted outputs (n×dy).
    log_certainty : ndarray
        ``log phi_a(x, y) = (1-a) log eta_x + a log eta_y - log eta_xy``
        ([SM] §4.2) at the prediction, with the model's ``alpha``.
    n_iter : ndarray
        Accepted optimiser steps per point.
    n_eval : ndarray
        Objective evaluations per point, line-search trials included.
    converged : ndarray
        Whether the step tolerance was met within ``max_iter``.
    objective : ndarray
        Final objective value per point.
    n_eta_floor : ndarray
        How often an ``eta`` was floored (MATH §2) during the run, per point.
    method : str
    """

    y: np.ndarray
    log_certainty: np.ndarray
    n_iter: np.ndarray
    n_eval: np.ndarray
    converged: np.ndarray
    objective: np.ndarray
    n_eta_floor: np.ndarray
    method: str
