"""Frozen dataclasses holding fitted TGP models and predictions (hyperparameters: :mod:`fastsm.tgp.params`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import solve_triangular

from fastsm._validation import as_2d
from fastsm.tgp.fitting import check_training, factorize
from fastsm.tgp.params import TGPParams

__all__ = ["TGPParams", "TGPModel", "Prediction"]


def _frozen_copy(a):
    if a is None:
        return None
    a = np.array(a, dtype=np.float64, order="C", copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False, repr=False)
class TGPModel:
    """A fitted twin-GP model: training data and everything precomputed from it.

    ``TGPModel(X, Y, params, methods)`` fits (as :func:`fastsm.tgp.fit` with
    default threads); the derived arrays are computed here and cannot be
    passed in, so ``dataclasses.replace(model, params=...)`` refits and a
    model's factors always belong to its own data and parameters.  Every
    stored array is a private read-only copy: changing the caller's ``X``
    after the fit changes nothing, and ``model.Wy[0, 0] += 1`` raises.

    Attributes
    ----------
    X, Y : ndarray
        Training inputs (N×dx) and outputs (N×dy), float64 C-contiguous.
    params : TGPParams
    methods : tuple of str
        Methods the model serves (``"ikl"`` needs ``C``).
    sample_weight : ndarray or None
        Importance weights of the training points (IW-TGP, docs/math.md §6): the
        kernel matrices carry the noise ``lambda / w_i`` on their diagonals.
        Points of zero weight are left out of ``X``, ``Y`` and the weights.
    Wx, Wy, Wxy : ndarray
        The factors of ``K_X``, ``K_Y`` and ``K_XY = (1-a) K_X + a K_Y`` (``K = L L^T``, ``L``
        lower triangular), as ``factor_form`` says.  Every evaluation uses them
        (``eta = k(z,z) - ||W k||^2`` with ``W = L^-1``, docs/accuracy.md); the explicit inverses
        are the properties ``Kx_inv``, ``Ky_inv``, ``Kxy_inv`` (formed on access, O(N^3)).
    factor_form : {"cholesky", "inverse"}
        ``"cholesky"`` (every model fastsm fits: :func:`fastsm.tgp.fit` since #55, its updates,
        every local model since session 37): the Cholesky factors ``L`` in symmetric storage (lower
        triangle ``L``, upper ``L^T``), every product with ``W`` a substitution with ``L``.
        ``"inverse"`` (fits pickled before #55, :func:`fastsm.tgp.views.inverse_form`): the inverse
        factors ``W = L^-1`` themselves (lower triangular, ``K^-1 = W^T W``); 7-70x less accurate at
        ``lambda <= 1e-6`` (docs/accuracy.md); ``partial_fit``, ``remove`` and ``with_alpha`` refit
        such a model in Cholesky form first.  :meth:`inverse_factor` gives ``W`` in either form.
    G : ndarray or None
        ``W_Y L_X = L_Y^-1 L_X`` (lower triangular, in either form; IKLTGP:
        ``C = K_Y^-1 K_X K_Y^-1 = W_Y^T G G^T W_Y``, the property ``C``), ``None`` if ``"ikl"`` was
        not requested at fit.
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
    params: TGPParams = field(default_factory=TGPParams)
    methods: tuple[str, ...] = ("kl", "ikl", "sm")
    sample_weight: np.ndarray | None = None
    Wx: np.ndarray = field(init=False)
    Wy: np.ndarray = field(init=False)
    Wxy: np.ndarray = field(init=False)
    G: np.ndarray | None = field(init=False)
    logdet_x: float = field(init=False)
    logdet_y: float = field(init=False)
    logdet_xy: float = field(init=False)
    y_spread: float = field(init=False)
    ridge_coef: np.ndarray = field(init=False)
    factor_form: str = field(init=False, default="inverse")  # pickles from before #55 hold none

    def __post_init__(self) -> None:
        X, Y, methods, w, params = check_training(self.X, self.Y, self.params, self.methods, self.sample_weight)
        object.__setattr__(self, "params", params)
        self._set(X, Y, methods, factorize(X, Y, params, methods, threads=None, sample_weight=w), w)

    def _set(self, X, Y, methods, parts: dict, sample_weight=None, copy: bool = True) -> None:
        for name, value in (("X", X), ("Y", Y), ("sample_weight", sample_weight), *parts.items()):
            if copy and (isinstance(value, np.ndarray) or value is None):
                value = _frozen_copy(value)
            elif isinstance(value, np.ndarray) and value.flags.writeable:
                value.setflags(write=False)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "methods", tuple(methods))

    @classmethod
    def _from_parts(cls, X, Y, params: TGPParams, methods, parts: dict, sample_weight=None,
                    copy: bool = True) -> TGPModel:
        """A model from precomputed parts (``fit``, the reference twin); copies and freezes them.

        ``copy=False`` (internal: arrays of another model, or fresh arrays
        nobody else holds) shares them and only freezes them.
        """
        self = object.__new__(cls)
        object.__setattr__(self, "params", params)
        self._set(X, Y, methods, parts, sample_weight, copy)
        return self

    def __getstate__(self) -> dict:
        # how the products run and their factors' storage (views.product_factors) belong to the caller
        state = dict(self.__dict__)
        state.pop("_product_factors", None)
        state.pop("_row_products", None)
        return state

    def inverse_factor(self, name: str) -> np.ndarray:
        """``W = L^-1`` of factor ``name`` (``"Wx"``, ``"Wy"`` or ``"Wxy"``), lower triangular: the
        field itself, or for a model in Cholesky form formed on access (O(N^3))."""
        M = getattr(self, name)
        if self.factor_form == "inverse":
            return M
        return solve_triangular(np.tril(M), np.eye(M.shape[0]), lower=True)

    @property
    def Kx_inv(self) -> np.ndarray:
        """``K_X^-1 = W_X^T W_X`` (formed on access, O(N^3); the model itself never uses it)."""
        W = self.inverse_factor("Wx")
        return W.T @ W

    @property
    def Ky_inv(self) -> np.ndarray:
        """``K_Y^-1 = W_Y^T W_Y`` (formed on access, O(N^3))."""
        W = self.inverse_factor("Wy")
        return W.T @ W

    @property
    def Kxy_inv(self) -> np.ndarray:
        """``K_XY^-1 = W_XY^T W_XY`` (formed on access, O(N^3))."""
        W = self.inverse_factor("Wxy")
        return W.T @ W

    @property
    def C(self) -> np.ndarray | None:
        """``K_Y^-1 K_X K_Y^-1 = (W_Y^T G)(W_Y^T G)^T`` (IKLTGP; formed on access, O(N^3)), or ``None``."""
        if self.G is None:
            return None
        F = self.inverse_factor("Wy").T @ self.G
        return F @ F.T

    @property
    def n_train(self) -> int:
        """Number of training points N."""
        return self.X.shape[0]

    def __repr__(self) -> str:
        return (f"TGPModel(n_train={self.n_train}, dx={self.X.shape[1]}, dy={self.Y.shape[1]}, "
                f"params={self.params!r}, methods={self.methods!r}, weighted={self.sample_weight is not None})")


@dataclass(frozen=True, eq=False, repr=False)
class Prediction:
    """Result of :func:`fastsm.tgp.predict`.

    Attributes
    ----------
    y : ndarray
        Predicted outputs (n×dy).
    log_certainty : ndarray
        ``log phi_a(x, y) = (1-a) log eta_x + a log eta_y - log eta_xy``
        ([SM] §4.2) at the prediction, with the model's ``alpha``;
        ``-inf`` where ``extrapolated`` (no certainty at all).
    n_iter : ndarray
        Accepted optimiser steps per point.
    n_eval : ndarray
        Objective evaluations per point, line-search trials included; an exact Hessian (SMTGP,
        ``dy <= config.SM_HESSIAN_MAX_DY``) counts as the ``ceil(dy / 2)`` evaluations its
        products cost.
    converged : ndarray
        Whether the point is a minimum to the step tolerance, found within ``max_iter``: its last
        full step, or the quasi-Newton step it would take next, moves no coordinate by more than
        ``tol`` times the output spread, or its gradient is zero, or a line search that found no
        decrease down to a step of ``0.1 tol`` ended where the directional derivative is no longer
        negative (the minimum along the direction lies within that step).  False for a point that
        stopped at ``max_iter``, a *stalled* one (no decrease found while the gradient still points
        down: values noisier than the decrease left, at very small ``lambda``), extrapolated points
        and where a step or value became non-finite (docs/accuracy.md).
    objective : ndarray
        The method's objective at ``y`` (what :func:`fastsm.tgp.objective`
        returns).  For SMTGP with a large ``|beta - 1| * criterion`` this
        under- or overflows in float64 (it is ``exp((beta-1) * criterion) /
        (beta - 1)``); ``criterion`` does not.
    criterion : ndarray
        The value actually minimised.  For ``"sm"``/``"sm_cubic"`` the
        beta-free transform ``-s / (2(1-a))`` (the Rényi, ``beta = 1``,
        objective): SMTGP's argmin does not depend on beta ([SM] Lemma 4.2)
        and this transform neither underflows nor overflows.  For ``"kl"``
        and ``"ikl"`` it equals ``objective``.
    n_eta_floor : ndarray
        How often an ``eta`` was floored (docs/math.md §2) during the run, per point.
    extrapolated : ndarray
        Test inputs with every kernel value ``k(x, x_i)`` below
        ``config.EXTRAPOLATION_K``: the training data carry no information
        about them, the prediction is the start (``init``) unchanged.
    method : str
    """

    y: np.ndarray
    log_certainty: np.ndarray
    n_iter: np.ndarray
    n_eval: np.ndarray
    converged: np.ndarray
    objective: np.ndarray
    criterion: np.ndarray
    n_eta_floor: np.ndarray
    extrapolated: np.ndarray
    method: str

    def __repr__(self) -> str:
        return (f"Prediction(method={self.method!r}, n={self.y.shape[0]}, dy={self.y.shape[1]}, "
                f"converged={int(self.converged.sum())}/{self.converged.size}, "
                f"extrapolated={int(self.extrapolated.sum())})")


def check_model(model) -> TGPModel:
    """``model`` if it is a :class:`TGPModel`, else a ``TypeError`` naming it."""
    if not isinstance(model, TGPModel):
        raise TypeError(f"model must be a TGPModel from fastsm.tgp.fit, got {type(model).__name__}")
    return model


def check_inputs(model, X, name: str = "X") -> np.ndarray:
    """``X`` as a float64 2-D array with the training inputs' ``dx`` columns of ``model`` (any model type)."""
    X = as_2d(name, X)
    if X.shape[1] != model.X.shape[1]:
        raise ValueError(f"{name} must have {model.X.shape[1]} columns (the training inputs' dx), got {X.shape[1]}")
    return X


def check_pairs(model: TGPModel, X, Y) -> tuple[np.ndarray, np.ndarray]:
    """Test inputs ``X`` and outputs ``Y`` of ``model``, one output row per input row."""
    X = check_inputs(model, X)
    Y = as_2d("Y", Y)
    if Y.shape != (X.shape[0], model.Y.shape[1]):
        raise ValueError(f"Y must have shape {(X.shape[0], model.Y.shape[1])} (one output per row of X), "
                         f"got {Y.shape}")
    return X, Y
