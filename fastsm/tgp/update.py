"""Updates of a fitted model without a refit: append training points, remove them (docs/math.md §2, [SM] App. 1),
another ``alpha`` (:func:`with_alpha`).

A model holds Cholesky factors ``L`` (:mod:`fastsm.tgp.fitting`).  Appending ``m`` points to
``K = L L^T`` with the cross kernel ``k`` (N×m) and the new block ``kappa`` (m×m, noise on its
diagonal) is the bordered Cholesky factorisation: with ``B = (L^-1 k)^T`` (a triangular solve) and
``S = kappa - B B^T = D D^T``::

    L' = [[L, 0], [B, D]],   log|K'| = log|K| + log|S|

— O(N^2 m) instead of the refit's O((N+m)^3).  IKLTGP's ``G = L_Y^-1 L_X`` borders the same way:
``G' = [[G, 0], [D_Y^-1 (B_X - B_Y G), D_Y^-1 D_X]]``.  Removing a point rotates ``L``'s columns
(:mod:`fastsm._kernels.factor_update`), O(N^2) per point.  A model in inverse form (``W = L^-1``:
:func:`fastsm.tgp.views.inverse_form`, or one pickled before #55) is refitted in Cholesky form first
(:func:`in_cholesky_form`): the updates promise a refit's result anyway.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import cho_factor, solve_triangular

from fastsm._kernels.factor_update import drop_index_cholesky, rotate_and_drop
from fastsm._kernels.rbf import rbf_cross, rbf_gram
from fastsm._threads import thread_limits
from fastsm._validation import as_2d
from fastsm.tgp.fitting import (
    MODEL_PARTS,
    check_sample_weight,
    check_spread,
    factorize,
    informative,
    output_spread,
    remedy,
    ridge,
    spd_cholesky,
    weighted_gram,
)
from fastsm.tgp.model import TGPModel, check_model

#: Schur-complement pivots below this fraction of the new point's own kernel value count as duplicates.
SCHUR_FLOOR = 1e-12


def _cross(A: np.ndarray, B: np.ndarray, gamma: float) -> np.ndarray:
    out = np.empty((A.shape[0], B.shape[0]))
    rbf_cross(A, B, gamma, out)
    return out


def _block(Z: np.ndarray, gamma: float, noise: np.ndarray) -> np.ndarray:
    K = rbf_gram(Z, gamma, 0.0)
    K[np.diag_indices_from(K)] += noise
    return K


def _spd_factor(S: np.ndarray, message: str):
    try:
        c = cho_factor(S, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        c = None
    if c is None or not np.all(np.isfinite(c[0])):
        raise ValueError(message)
    return c, 2.0 * float(np.sum(np.log(np.diag(c[0]))))


def _schur_factor(B: np.ndarray, kappa: np.ndarray, name: str, lam_name: str) -> tuple[np.ndarray, float]:
    """``(D, log|S|)``: the Cholesky factor of the Schur complement ``S = kappa - B B^T`` of the new block."""
    S = kappa - B @ B.T
    S = 0.5 * (S + S.T)
    message = (f"{name} with the new points is not positive definite (a new point duplicates a training point or "
               f"another new point); duplicates need {lam_name} > 0")
    c, logdet_s = _spd_factor(S, message)
    # a pivot at rounding level is a duplicate too: its inverse would be rounding noise
    if np.any(np.diag(c[0]) ** 2 <= SCHUR_FLOOR * np.diag(kappa)):
        raise ValueError(message)
    return np.tril(c[0]), logdet_s


def in_cholesky_form(model: TGPModel, threads: int | None) -> TGPModel:
    """``model``, or for a model in inverse form its refit in Cholesky form (the bits of a fresh fit on
    its points, weights and parameters; O(N^3) once)."""
    if model.factor_form == "cholesky":
        return model
    w = model.sample_weight
    parts = factorize(model.X, model.Y, model.params, model.methods, threads, w)
    return TGPModel._from_parts(model.X, model.Y, model.params, model.methods, parts, w)


def _border(S: np.ndarray, logdet: float, k: np.ndarray, kappa: np.ndarray, name: str, lam_name: str):
    """``(S', log|K'|, B, D)`` of ``[[K, k], [k^T, kappa]]`` from its Cholesky factor in symmetric storage
    ``S``: ``L' = [[L, 0], [B, D]]`` with ``B = (L^-1 k)^T`` (one triangular solve) and ``D`` the Cholesky
    factor of the Schur complement ``kappa - B B^T`` (a model in Cholesky form, #55)."""
    n, m = k.shape
    B = solve_triangular(S, k, lower=True, check_finite=False).T  # reads S's lower triangle: L
    D, logdet_s = _schur_factor(B, kappa, name, lam_name)
    out = np.empty((n + m, n + m))
    out[:n, :n] = S
    out[n:, :n] = B
    out[:n, n:] = B.T
    out[n:, n:] = D + np.tril(D, -1).T
    return out, logdet + logdet_s, B, D


def _noise(lam: float, w: np.ndarray | None, m: int) -> np.ndarray:
    return np.full(m, lam) if w is None else lam / w


def _parts(X: np.ndarray, Y: np.ndarray, w, factors: dict, G) -> dict:
    return {**factors, "G": G, "y_spread": output_spread(Y), "ridge_coef": ridge(X, Y, w)}


def partial_fit(model: TGPModel, X_new: ArrayLike, Y_new: ArrayLike, *, sample_weight: ArrayLike | None = None,
                threads: int | None = None) -> TGPModel:
    """A new model with training points appended, by bordered updates (O(N^2 m) for m points).

    Equals ``fit(vstack([model.X, X_new]), vstack([model.Y, Y_new]),
    model.params, sample_weight=...)`` up to rounding (``tests/test_update.py``):
    every stored factor (``W_X``, ``W_Y``, ``W_XY``, ``G``), the
    log-determinants, the output spread and the ridge start.

    Parameters
    ----------
    model : TGPModel
    X_new : array_like, shape (m, dx)
    Y_new : array_like, shape (m, dy)
    sample_weight : array_like (m,), optional
        Weights of the new points (IW-TGP, docs/math.md §6).  For an unweighted
        model the existing points count with weight 1; a weighted model
        needs them (``None`` then means 1 for every new point).  Points of
        zero weight are left out, as in :func:`~fastsm.tgp.fit`.
    threads : int, optional
        Numba threads for the kernel blocks.

    Returns
    -------
    TGPModel
        A new model; ``model`` is unchanged (models are frozen).

    Raises
    ------
    ValueError
        Shape mismatches, non-finite values, or a new point that duplicates
        a training point while its regulariser is 0.
    """
    model = in_cholesky_form(check_model(model), threads)
    Xn = as_2d("X_new", X_new)
    Yn = as_2d("Y_new", Y_new)
    dx, dy = model.X.shape[1], model.Y.shape[1]
    if Xn.shape[1] != dx:
        raise ValueError(f"X_new must have {dx} columns (the model's dx), got {Xn.shape[1]}")
    if Yn.shape[1] != dy:
        raise ValueError(f"Y_new must have {dy} columns (the model's dy), got {Yn.shape[1]}")
    if Xn.shape[0] != Yn.shape[0]:
        raise ValueError(f"X_new and Y_new must have the same number of rows, got {Xn.shape[0]} and {Yn.shape[0]}")
    wn = check_sample_weight(sample_weight, Xn.shape[0])
    w_old = model.sample_weight
    if wn is not None or w_old is not None:
        wn = np.ones(Xn.shape[0]) if wn is None else wn
        keep = informative(wn, model.params)  # as fit: zero and negligible weights left out
        Xn, Yn, wn = Xn[keep], Yn[keep], wn[keep]
        w_old = np.ones(model.n_train) if w_old is None else w_old
    if Xn.shape[0] == 0:
        return model
    X = np.vstack([model.X, Xn])
    Y = np.vstack([model.Y, Yn])
    check_spread("X", X)
    check_spread("Y", Y)
    w = None if wn is None else np.concatenate([w_old, wn])
    p = model.params
    m = Xn.shape[0]
    with thread_limits(threads):
        gx, gy = p.widths()
        kx, ky = _cross(model.X, Xn, gx), _cross(model.Y, Yn, gy)
        Kx_n = _block(Xn, gx, _noise(p.lambda_x, wn, m))
        Ky_n = _block(Yn, gy, _noise(p.lambda_y, wn, m))
        a = p.alpha
        Wx, ld_x, Bx, Dx = _border(model.Wx, model.logdet_x, kx, Kx_n, "K_X", "lambda_x")
        Wy, ld_y, By, Dy = _border(model.Wy, model.logdet_y, ky, Ky_n, "K_Y", "lambda_y")
        Wxy, ld_xy, _, _ = _border(model.Wxy, model.logdet_xy, (1 - a) * kx + a * ky,
                                  (1 - a) * Kx_n + a * Ky_n, "K_XY", "lambda_x or lambda_y")
        G = None
        if model.G is not None:
            # L_Y' G' = L_X': G' = [[G, 0], [Dy^-1 (Bx - By G), Dy^-1 Dx]] (Dy^-1 = the new block of W_Y')
            n = model.n_train
            G = np.zeros((n + m, n + m))
            G[:n, :n] = model.G
            G[n:, :n] = solve_triangular(Dy, Bx - By @ model.G, lower=True, check_finite=False)
            G[n:, n:] = np.tril(solve_triangular(Dy, Dx, lower=True, check_finite=False))
    factors = {"Wx": Wx, "Wy": Wy, "Wxy": Wxy, "logdet_x": ld_x, "logdet_y": ld_y, "logdet_xy": ld_xy,
               "factor_form": "cholesky"}
    # every array here is new and held by nobody else: frozen, not copied
    return TGPModel._from_parts(X, Y, p, model.methods, _parts(X, Y, w, factors, G), w, copy=False)


def _check_indices(indices, n: int) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx[None]
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
        raise TypeError(f"indices must be an integer or a 1-D sequence of integers, got dtype {idx.dtype} "
                        f"and shape {idx.shape}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"indices must lie in [-{n}, {n}) (the model has {n} training points), got "
                         f"{int(idx.min()) if idx.min() < -n else int(idx.max())}")
    idx = np.unique(np.where(idx < 0, idx + n, idx))
    if idx.size >= n:
        raise ValueError(f"remove would leave no training points (removing {idx.size} of {n})")
    return idx


def _drop(model: TGPModel, R: np.ndarray):
    """The factors, log-determinants and ``G`` without the points ``R`` (rotations, highest index first)."""
    Wx, Wy, Wxy, G = model.Wx, model.Wy, model.Wxy, model.G
    for i in R[::-1]:
        i = int(i)
        Wx, cx, sx = drop_index_cholesky(Wx, i)
        Wy, cy, sy = drop_index_cholesky(Wy, i)
        Wxy, _, _ = drop_index_cholesky(Wxy, i)
        if G is not None:
            G = rotate_and_drop(G, i, cy, sy, cx, sx)
    for name, W in (("K_X", Wx), ("K_Y", Wy), ("K_XY", Wxy)):
        if not np.all(np.isfinite(W)) or np.any(np.diag(W) == 0.0):
            raise ValueError(f"the factor of {name} lost definiteness to rounding while removing points; refit instead")
    logdet = [2.0 * float(np.sum(np.log(np.abs(np.diag(W))))) for W in (Wx, Wy, Wxy)]  # log|K| = 2 sum log L_ii
    return {"Wx": Wx, "Wy": Wy, "Wxy": Wxy, "logdet_x": logdet[0], "logdet_y": logdet[1], "logdet_xy": logdet[2],
            "factor_form": "cholesky"}, G


def remove(model: TGPModel, indices: ArrayLike, *, threads: int | None = None) -> TGPModel:
    """A new model without the training points ``indices``, by rotations of the factors (O(N^2 r) for r points).

    Equals refitting on the remaining points (same order, weights and
    ``params``) up to rounding: each factor is rotated back to triangular
    form without the removed points (:mod:`fastsm._kernels.factor_update`),
    ``log|K_kk| = 2 sum log diag L'``.

    Parameters
    ----------
    model : TGPModel
    indices : int or sequence of int
        Rows of ``model.X`` to remove (negative indices count from the end;
        repeats are removed once).  At least one point must remain.
    threads : int, optional

    Returns
    -------
    TGPModel
    """
    model = check_model(model)
    n = model.n_train
    R = _check_indices(indices, n)
    if R.size == 0:
        return model
    model = in_cholesky_form(model, threads)
    keep = np.setdiff1d(np.arange(n), R)
    with thread_limits(threads):
        factors, G = _drop(model, R)
    X, Y = model.X[keep], model.Y[keep]
    w = None if model.sample_weight is None else model.sample_weight[keep]
    return TGPModel._from_parts(X, Y, model.params, model.methods, _parts(X, Y, w, factors, G), w,
                                copy=False)


def with_alpha(model: TGPModel, alpha: float, beta: float | None = None) -> TGPModel:
    """``model`` with another ``alpha`` (and ``beta``): only ``K_XY(alpha)`` is factorised again.

    ``W_X``, ``W_Y``, ``G``, the ridge start and the spread are shared
    (the arrays are read-only), so this costs one Cholesky instead of a fit.
    """
    model = check_model(model)
    if alpha != model.params.alpha:
        model = in_cholesky_form(model, None)
    p = dataclasses.replace(model.params, alpha=alpha, beta=model.params.beta if beta is None else beta)
    if p.alpha == model.params.alpha:
        parts_xy = {"Wxy": model.Wxy, "logdet_xy": model.logdet_xy}
    else:
        with thread_limits(None):
            w = model.sample_weight
            gx, gy = p.widths()
            # writable copies of the model's read-only arrays: the Gram kernels' signature of a fit (no second one)
            Kxy = ((1.0 - p.alpha) * weighted_gram(model.X.copy(), gx, p.lambda_x, w)
                   + p.alpha * weighted_gram(model.Y.copy(), gy, p.lambda_y, w))
            Wxy, ld = spd_cholesky(Kxy, "K_XY", remedy("lambda_x or lambda_y", min(p.lambda_x, p.lambda_y), w))
        parts_xy = {"Wxy": Wxy, "logdet_xy": ld}
    parts = {name: getattr(model, name) for name in MODEL_PARTS}
    return TGPModel._from_parts(model.X, model.Y, p, model.methods, {**parts, **parts_xy}, model.sample_weight,
                                copy=False)
