"""Online updates of a fitted model: append training points, remove them (MATH §2, [SM] App. 1).

Appending ``m`` points to a kernel matrix ``K`` with inverse ``A`` is the
bordered (block) update: with the cross kernel ``k`` (N×m), the new block
``kappa`` (m×m, noise on its diagonal), ``U = A k`` and the Schur complement
``S = kappa - k^T U``::

    K'^-1 = [[A + U S^-1 U^T, -U S^-1], [-S^-1 U^T, S^-1]],   log|K'| = log|K| + log|S|

— O(N^2 m) instead of the refit's O((N+m)^3).  Removing the index set ``R``
is the downdate ``A_kk - A_kR A_RR^-1 A_Rk`` with ``log|K_kk| = log|K| +
log|A_RR|``.  ``C = K_Y^-1 K_X K_Y^-1`` (IKLTGP) follows in O(N^2 m) without
``K_X`` itself: every product ``B K_X B`` it needs is a block of ``C``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular

from fastsm._kernels.rbf import rbf_cross, rbf_gram
from fastsm._threads import thread_limits
from fastsm._validation import as_2d
from fastsm.tgp.fitting import _check_spread, check_sample_weight, informative, ridge
from fastsm.tgp.model import TGPModel
from fastsm.tgp.prediction import _check_model

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


def _sym(A: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(0.5 * (A + A.T))


def _border(A: np.ndarray, logdet: float, k: np.ndarray, kappa: np.ndarray, name: str, lam_name: str):
    """Inverse and log-determinant of ``[[K, k], [k^T, kappa]]`` from ``A = K^-1``; also ``U = A k``, ``S^-1``.

    ``U S^-1 U^T = W W^T`` with ``W = U L^-T`` (``S = L L^T``) is one
    symmetric rank-m product (BLAS syrk): the result is exactly symmetric
    without a transposed pass over the N×N matrix.
    """
    n, m = k.shape
    U = A @ k
    S = kappa - k.T @ U
    S = 0.5 * (S + S.T)
    message = (f"{name} with the new points is not positive definite (a new point duplicates a training point or "
               f"another new point); duplicates need {lam_name} > 0")
    c, logdet_s = _spd_factor(S, message)
    # a pivot at rounding level is a duplicate too: its inverse would be rounding noise
    if np.any(np.diag(c[0]) ** 2 <= SCHUR_FLOOR * np.diag(kappa)):
        raise ValueError(message)
    L = np.tril(c[0])
    W = solve_triangular(L, U.T, lower=True, check_finite=False).T
    S_inv = cho_solve(c, np.eye(m), check_finite=False)
    S_inv = 0.5 * (S_inv + S_inv.T)
    US = U @ S_inv
    out = np.empty((n + m, n + m))
    out[:n, :n] = A
    out[:n, :n] += W @ W.T
    out[:n, n:] = -US
    out[n:, :n] = -US.T
    out[n:, n:] = S_inv
    return out, logdet + logdet_s, U, S_inv


def _noise(lam: float, w: np.ndarray | None, m: int) -> np.ndarray:
    return np.full(m, lam) if w is None else lam / w


def _parts(X: np.ndarray, Y: np.ndarray, w, inverses: dict, C) -> dict:
    spread = float(np.sqrt(np.sum(np.var(Y, axis=0))))
    return {**inverses, "C": C, "y_spread": spread if spread > 0.0 else 1.0, "ridge_coef": ridge(X, Y, w)}


def partial_fit(model: TGPModel, X_new, Y_new, *, sample_weight=None, threads: int | None = None) -> TGPModel:
    """A new model with training points appended, by bordered updates (O(N^2 m) for m points).

    Equals ``fit(vstack([model.X, X_new]), vstack([model.Y, Y_new]),
    model.params, sample_weight=...)`` up to rounding (``tests/test_update.py``):
    every stored inverse (``K_X^-1``, ``K_Y^-1``, ``K_XY^-1``, ``C``), the
    log-determinants, the output spread and the ridge start.

    Parameters
    ----------
    model : TGPModel
    X_new : array_like, shape (m, dx)
    Y_new : array_like, shape (m, dy)
    sample_weight : array_like (m,), optional
        Weights of the new points (IW-TGP, MATH §6).  For an unweighted
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
    model = _check_model(model)
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
    _check_spread("X", X)
    _check_spread("Y", Y)
    w = None if wn is None else np.concatenate([w_old, wn])
    p = model.params
    m = Xn.shape[0]
    with thread_limits(threads):
        kx, ky = _cross(model.X, Xn, p.gamma_x), _cross(model.Y, Yn, p.gamma_y)
        Kx_n = _block(Xn, p.gamma_x, _noise(p.lambda_x, wn, m))
        Ky_n = _block(Yn, p.gamma_y, _noise(p.lambda_y, wn, m))
        a = p.alpha
        Kx_inv, ld_x, _, _ = _border(model.Kx_inv, model.logdet_x, kx, Kx_n, "K_X", "lambda_x")
        Ky_inv, ld_y, Uy, Sy_inv = _border(model.Ky_inv, model.logdet_y, ky, Ky_n, "K_Y", "lambda_y")
        Kxy_inv, ld_xy, _, _ = _border(model.Kxy_inv, model.logdet_xy, (1 - a) * kx + a * ky,
                                       (1 - a) * Kx_n + a * Ky_n, "K_XY", "lambda_x or lambda_y")
        C = None
        if model.C is not None:
            C = _border_C(model.C, model.Ky_inv, ky, kx, Kx_n, Uy, Sy_inv)
    inverses = {"Kx_inv": Kx_inv, "Ky_inv": Ky_inv, "Kxy_inv": Kxy_inv,
                "logdet_x": ld_x, "logdet_y": ld_y, "logdet_xy": ld_xy}
    # every array here is new and held by nobody else: frozen, not copied
    return TGPModel._from_parts(X, Y, p, model.methods, _parts(X, Y, w, inverses, C), w, copy=False)


def _border_C(C, B, ky, kx, kappa_x, U, S_inv):
    """``C' = B' K_X' B'`` of the bordered matrices from ``C = B K_X B`` (module docstring).

    ``B' = P + V S^-1 V^T`` with ``P = diag(B, 0)`` and ``V = [U; -I]``;
    ``P K_X' V = [C k_y - B k_x; 0] = W`` and ``V^T K_X' V = k_y^T C k_y -
    U^T k_x - k_x^T U + kappa_x = T``, so ``C' = diag(C, 0) + Z Q Z^T`` with
    ``Z = [W, V]`` and ``Q = [[0, S^-1], [S^-1, S^-1 T S^-1]]``.  ``Q = E diag(l)
    E^T`` splits the update into two symmetric products (syrk), exactly
    symmetric.
    """
    n, m = ky.shape
    Ck = C @ ky
    T = ky.T @ Ck - U.T @ kx - kx.T @ U + kappa_x
    Z = np.zeros((n + m, 2 * m))
    Z[:n, :m] = Ck - B @ kx
    Z[:n, m:] = U
    Z[n:, m:] = -np.eye(m)
    Q = np.zeros((2 * m, 2 * m))
    Q[:m, m:] = S_inv
    Q[m:, :m] = S_inv
    Q[m:, m:] = S_inv @ T @ S_inv
    lam, E = np.linalg.eigh(0.5 * (Q + Q.T))
    P = Z @ (E * np.sqrt(np.abs(lam)))
    pos, neg = np.ascontiguousarray(P[:, lam > 0]), np.ascontiguousarray(P[:, lam < 0])
    out = np.zeros((n + m, n + m))
    out[:n, :n] = C
    out += pos @ pos.T
    out -= neg @ neg.T
    return out


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


def _downdate(A: np.ndarray, logdet: float, R: np.ndarray, keep: np.ndarray, name: str):
    c, logdet_r = _spd_factor(A[np.ix_(R, R)], f"the removed block of {name} is not positive definite: the model's "
                                               f"inverse has lost definiteness to rounding; refit instead")
    W = solve_triangular(np.tril(c[0]), A[np.ix_(R, keep)], lower=True, check_finite=False)
    out = A[np.ix_(keep, keep)]
    out -= W.T @ W
    return out, logdet + logdet_r


def remove(model: TGPModel, indices, *, threads: int | None = None) -> TGPModel:
    """A new model without the training points ``indices``, by downdates (O(N^2 r) for r points).

    Equals refitting on the remaining points (same order, weights and
    ``params``) up to rounding: ``K_kk^-1 = A_kk - A_kR A_RR^-1 A_Rk`` for
    each stored inverse ``A``, ``log|K_kk| = log|K| + log|A_RR|``, and for
    IKLTGP ``C_kk = (C - C_R A_RR^-1 B_R^T - B_R A_RR^-1 C_R^T + B_R A_RR^-1
    C_RR A_RR^-1 B_R^T)_kk`` with ``B = K_Y^-1`` (``A_RR = B_RR`` there).

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
    model = _check_model(model)
    n = model.n_train
    R = _check_indices(indices, n)
    if R.size == 0:
        return model
    keep = np.setdiff1d(np.arange(n), R)
    with thread_limits(threads):
        Kx_inv, ld_x = _downdate(model.Kx_inv, model.logdet_x, R, keep, "K_X^-1")
        Ky_inv, ld_y = _downdate(model.Ky_inv, model.logdet_y, R, keep, "K_Y^-1")
        Kxy_inv, ld_xy = _downdate(model.Kxy_inv, model.logdet_xy, R, keep, "K_XY^-1")
        C = None
        if model.C is not None:
            B, Cm = model.Ky_inv, model.C
            c, _ = _spd_factor(B[np.ix_(R, R)], "the removed block of K_Y^-1 is not positive definite; refit instead")
            Z = cho_solve(c, B[np.ix_(R, keep)], check_finite=False)  # B_RR^-1 B_Rk
            G = Cm[np.ix_(keep, R)] @ Z
            C = _sym(Cm[np.ix_(keep, keep)] - G - G.T + Z.T @ Cm[np.ix_(R, R)] @ Z)
    X, Y = model.X[keep], model.Y[keep]
    w = None if model.sample_weight is None else model.sample_weight[keep]
    inverses = {"Kx_inv": Kx_inv, "Ky_inv": Ky_inv, "Kxy_inv": Kxy_inv,
                "logdet_x": ld_x, "logdet_y": ld_y, "logdet_xy": ld_xy}
    return TGPModel._from_parts(X, Y, model.params, model.methods, _parts(X, Y, w, inverses, C), w,
                                copy=False)
