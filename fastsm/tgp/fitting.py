"""The O(N^3) precomputation of a twin-GP model (validation, factorisations).

Determinism: LAPACK's multi-threaded Cholesky and its inverse change their
blocking with the thread count (measured: inverses differ by ~1e-7 between 1
and 2 OpenBLAS threads at lambda = 1e-4, SMTGP predictions then by 1.6e-3).
The factorisations therefore always run on one BLAS thread, and the one
O(N^3) product (``C`` for IKLTGP) runs on Numba's threads by fixed row blocks
(:func:`fastsm._kernels.gemm.blocked_gemm`), whose results do not depend on the
thread count.  A fitted model is bitwise the same whatever ``threads`` is.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from fastsm._kernels.gemm import blocked_gemm
from fastsm._kernels.rbf import rbf_gram
from fastsm._threads import thread_limits
from fastsm._validation import as_2d

METHODS: tuple[str, ...] = ("sm", "kl", "ikl", "sm_cubic")
DEFAULT_METHODS: tuple[str, ...] = ("kl", "ikl", "sm")


def check_methods(methods) -> tuple[str, ...]:
    """``None`` (all), one method name, or a sequence of them."""
    if methods is None:
        return DEFAULT_METHODS
    if isinstance(methods, str):
        methods = (methods,)
    if not isinstance(methods, (tuple, list)):
        raise TypeError(f"methods must be None, a method name or a tuple of them, got {type(methods).__name__}")
    for m in methods:
        if not isinstance(m, str) or m not in METHODS:
            raise ValueError(f"methods must hold names from {METHODS}, got {m!r}")
    return tuple(methods)


def _check_spread(name: str, A: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        spread = np.sum(np.var(A, axis=0))
    if not np.isfinite(spread):
        raise ValueError(f"{name} is too large to fit in float64 arithmetic (its variance overflows); rescale it")


def check_training(X, Y, params, methods):
    """Validated copies of the training data and the method tuple."""
    from fastsm.tgp.model import TGPParams

    if not isinstance(params, TGPParams):
        raise TypeError(f"params must be a TGPParams, got {type(params).__name__}")
    X = as_2d("X", X)
    Y = as_2d("Y", Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    _check_spread("X", X)
    _check_spread("Y", Y)
    return X, Y, check_methods(methods)


def spd_inverse(K: np.ndarray, name: str, lam_name: str) -> tuple[np.ndarray, float]:
    """Inverse and log-determinant of an SPD matrix by Cholesky (LAPACK potrf/potri).

    Call on one BLAS thread (see the module docstring).

    Raises
    ------
    ValueError
        If ``K`` is not numerically positive definite (e.g. duplicate
        training points with a zero regulariser).
    """
    L, info = lapack.dpotrf(K, lower=1, clean=1)
    if info != 0:
        raise ValueError(
            f"{name} is not positive definite (Cholesky failed at column {info}); "
            f"duplicate or near-duplicate training points need {lam_name} > 0"
        )
    logdet = 2.0 * float(np.sum(np.log(np.diag(L))))
    inv, info = lapack.dpotri(L, lower=1)
    if info != 0:  # pragma: no cover - potrf succeeded, potri cannot fail
        raise ValueError(f"{name} could not be inverted (LAPACK info {info})")
    inv = np.tril(inv)
    inv = inv + np.tril(inv, -1).T
    if not np.all(np.isfinite(inv)):
        raise ValueError(f"{name} is numerically singular; increase {lam_name}")
    return np.ascontiguousarray(inv), logdet


def ridge(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Ridge regression with an unpenalised bias: Bo & Sminchisescu's start.

    Solved by least squares (minimal norm), so one training point or
    identical inputs give the mean of ``Y`` rather than a singular system.
    """
    n, dx = X.shape
    Xc = X - X.mean(axis=0)
    r = 1e-6 * max(float(np.mean(np.sum(Xc * Xc, axis=0))), 1e-300)
    A = np.vstack([np.hstack([X, np.ones((n, 1))]), np.hstack([np.sqrt(r) * np.eye(dx), np.zeros((dx, 1))])])
    b = np.vstack([Y, np.zeros((dx, Y.shape[1]))])
    return np.linalg.lstsq(A, b, rcond=None)[0]


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.setflags(write=False)
    return v


def factorize(X: np.ndarray, Y: np.ndarray, params, methods: tuple[str, ...], threads: int | None) -> dict:
    """Everything a model precomputes from its training data (MATH §2–§3)."""
    p = params
    with thread_limits(threads):
        Kx = rbf_gram(X, p.gamma_x, p.lambda_x)
        Ky = rbf_gram(Y, p.gamma_y, p.lambda_y)
        Kxy = (1.0 - p.alpha) * Kx + p.alpha * Ky
        Kx_inv, ld_x = spd_inverse(Kx, "K_X", "lambda_x")
        Ky_inv, ld_y = spd_inverse(Ky, "K_Y", "lambda_y")
        Kxy_inv, ld_xy = spd_inverse(Kxy, "K_XY", "lambda_x or lambda_y")
        C = None
        if "ikl" in methods:
            # read-only operands: the same specialisation as predict's products (one compile)
            T = np.empty_like(Kx)
            blocked_gemm(Kx, _read_only(Ky_inv), T)
            C = np.empty_like(Kx)
            blocked_gemm(Ky_inv, _read_only(T), C)
            C = np.ascontiguousarray(0.5 * (C + C.T))
    spread = float(np.sqrt(np.sum(np.var(Y, axis=0))))
    return {
        "Kx_inv": Kx_inv, "Ky_inv": Ky_inv, "Kxy_inv": Kxy_inv, "C": C,
        "logdet_x": ld_x, "logdet_y": ld_y, "logdet_xy": ld_xy,
        "y_spread": spread if spread > 0.0 else 1.0, "ridge_coef": ridge(X, Y),
    }
