"""The O(N^3) precomputation of a twin-GP model (validation, factorisations).

A model keeps Cholesky factors, not inverses (*Cholesky form*, #55): ``K = L L^T`` with ``L``
lower triangular, held in symmetric storage (lower triangle ``L``, upper ``L^T``).  With
``W = L^-1`` every Schur complement is a sum of squares, ``eta = k(z,z) - ||W k||^2``, and
``K^-1 k = W^T (W k)``, every product with ``W`` a substitution with ``L`` (the row loops of
:mod:`fastsm._kernels.tri_rows`; docs/accuracy.md: 13-80x more accurate than products with an
explicit ``W`` at ``lambda <= 1e-6``, as fast).  IKLTGP's ``u^T K_X u`` with ``u = K_Y^-1 k`` is
``||G^T W_Y k||^2`` with ``G = W_Y L_X = L_Y^-1 L_X``, lower triangular too, kept explicit.

Every model a fit builds is in Cholesky form: global and local, for every method and ``share``
(small KLTGP/SMTGP local models by fastsm's own factorisation, :func:`factorize_cholesky`; the others
by LAPACK, :func:`factorize`).  The *inverse form* (``W = L^-1`` explicit) remains
for :func:`fastsm.tgp.views.inverse_form` and models pickled before #55.  Leave-one-out runs on the
Cholesky form too: only its projections read columns of ``W`` (:func:`fastsm.tgp.views.leave_one_out`).

Determinism: LAPACK's multi-threaded Cholesky changes its blocking with the
thread count (measured: inverses differed by ~1e-7 between 1 and 2 OpenBLAS
threads at lambda = 1e-4, SMTGP predictions then by 1.6e-3).  The
factorisations and ``G`` therefore always run on one BLAS thread (LAPACK's
and BLAS's calls then have shapes that depend on ``N`` only).  A fitted model
is bitwise the same whatever ``threads`` is.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg.blas import dtrsm

from fastsm import config
from fastsm._kernels.cholesky import TwinKernels, twin_factors
from fastsm._kernels.linalg import potrf_symmetric
from fastsm._kernels.rbf import rbf_gram
from fastsm._kernels.ridge import solve_ridge_start
from fastsm._lapack import triangular_inverse
from fastsm._memory import FIT_MATRICES, FIT_MATRICES_WITHOUT_IKL, check_memory
from fastsm._threads import check_stop, resolve_threads, thread_limits, worker_pool
from fastsm._validation import as_2d, as_float_array
from fastsm._warn import warn
from fastsm.tgp.params import TGPParams

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


def check_spread(name: str, A: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        spread = np.sum(np.var(A, axis=0))
    if not np.isfinite(spread):
        raise ValueError(f"{name} is too large to fit in float64 arithmetic (its variance overflows); rescale it")


def check_sample_weight(sample_weight, n: int) -> np.ndarray | None:
    """``None`` or a finite, non-negative, not-all-zero vector of length ``n``."""
    if sample_weight is None:
        return None
    w = as_float_array("sample_weight", sample_weight, ndim=1)
    if w.shape[0] != n:
        raise ValueError(f"sample_weight must have one entry per training point ({n}), got {w.shape[0]}")
    if np.any(w < 0.0):
        raise ValueError(f"sample_weight must be >= 0, got a minimum of {w.min():g}")
    if not np.any(w > 0.0):
        raise ValueError("sample_weight must have at least one positive entry, got all zeros")
    return w


def informative(w: np.ndarray, params) -> np.ndarray:
    """Training points whose weight carries information at float64 precision.

    A weight enters as the noise ``lambda / w`` (docs/math.md §6).  Below
    ``w = eps * lambda`` that noise exceeds ``1 / eps`` times the kernel's
    unit variance: the point moves no prediction by more than rounding, and
    ``lambda / w`` overflows on the way to zero.  Such points, like those of
    zero weight, are left out -- by ``fit``, ``fit_local``, ``partial_fit``
    and ``select`` alike.
    """
    lam = max(params.lambda_x, params.lambda_y)
    return w > np.finfo(np.float64).eps * lam if lam > 0.0 else w > 0.0


def check_training(X, Y, params: TGPParams, methods, sample_weight=None) -> tuple[
        np.ndarray, np.ndarray, tuple[str, ...], np.ndarray | None, TGPParams]:
    """Validated copies of the training data, the method tuple, the weights and the resolved parameters.

    ``"scale"`` widths are resolved on the points kept (:meth:`TGPParams.resolve`).

    Training points of zero (or negligible, :func:`informative`) weight are
    left out: their noise ``lambda / w`` is infinite, they carry no
    information (docs/math.md §6).
    """
    if not isinstance(params, TGPParams):
        raise TypeError(f"params must be a TGPParams, got {type(params).__name__}")
    X = as_2d("X", X)
    Y = as_2d("Y", Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same number of rows, got {X.shape[0]} and {Y.shape[0]}")
    w = check_sample_weight(sample_weight, X.shape[0])
    if w is not None:
        if params.lambda_x == 0.0 and params.lambda_y == 0.0 and np.ptp(w) > 0.0:
            warn("sample_weight has no effect with lambda_x = lambda_y = 0: the weights act through the "
                 "noise lambda / w_i (docs/math.md §6)", UserWarning)
        keep = informative(w, params)
        if not keep.any():
            raise ValueError(f"sample_weight must have an entry above eps * max(lambda_x, lambda_y) = "
                             f"{np.finfo(np.float64).eps * max(params.lambda_x, params.lambda_y):.3g} (smaller "
                             f"weights carry no information at float64 precision), got a maximum of {w.max():.3g}")
        if not keep.all():
            X, Y, w = np.ascontiguousarray(X[keep]), np.ascontiguousarray(Y[keep]), np.ascontiguousarray(w[keep])
    check_spread("X", X)
    check_spread("Y", Y)
    return X, Y, check_methods(methods), w, params.resolve(X, Y, w)


def remedy(lam_name: str, lam: float, sample_weight: np.ndarray | None) -> str:
    """What makes a Gram matrix with noise ``lam_name`` (``lam``; ``lam / w_i`` with weights) positive definite."""
    if sample_weight is not None:
        return (f"with sample_weight the noise of point i is {lam_name} / sample_weight[i] (weights up to "
                f"{float(sample_weight.max()):.3g} here): normalise sample_weight to mean 1 or increase {lam_name}")
    if lam == 0.0:
        return f"duplicate or near-duplicate training points need {lam_name} > 0"
    return f"duplicate or near-duplicate training points need a larger {lam_name} (now {lam:g})"


def ridge(X: np.ndarray, Y: np.ndarray, sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Ridge regression with an unpenalised bias: Bo & Sminchisescu's start.

    Solved by least squares (minimal norm), so one training point or
    identical inputs give the mean of ``Y`` rather than a singular system.
    With ``sample_weight`` the squared residuals are weighted and the penalty
    is multiplied by the mean weight: a common factor of the weights changes nothing.
    """
    n, dx = X.shape
    mu, scale, Xc = ridge_frame(X)
    r = 1e-6 * max(float(np.mean(np.sum(Xc * Xc, axis=0))), 1e-300)
    # solved for z = scale * coef on centred, unit-scale columns (the same minimiser: the penalty
    # rows carry 1 / scale), so lstsq's rank cut-off does not drop the bias or the inputs when
    # X is in units far from 1 (X * 1e14 lost the bias)
    A1 = np.hstack([Xc / scale, np.ones((n, 1))])
    Y1 = Y
    if sample_weight is not None:
        # the penalty scales with the mean weight (a common factor of the weights changes nothing);
        # the objective is divided by max w: the same minimiser, and no overflow for huge weights
        top = float(sample_weight.max())
        s = np.sqrt(sample_weight / top)[:, None]
        A1, Y1, r = s * A1, s * Y, r * float(np.mean(sample_weight / top))
    A = np.vstack([A1, np.hstack([np.diag(np.sqrt(r) / scale), np.zeros((dx, 1))])])
    b = np.vstack([Y1, np.zeros((dx, Y.shape[1]))])
    z = np.linalg.lstsq(A, b, rcond=None)[0]
    coef = z[:dx] / scale[:, None]
    return np.vstack([coef, z[dx:] - mu @ coef])


def output_spread(Y: np.ndarray) -> float:
    """``sqrt(sum_c var(Y[:, c]))``, the unit of a model's step tolerance and trust radius.

    Outputs that are all equal have no spread of their own; the unit then is relative to
    them, ``eps * max |y|`` (the smallest normal float for all-zero outputs), so that the
    prediction stays at the common value instead of moving by a unit that does not scale with
    the data (it was 1.0: ``y = 0.002`` everywhere was predicted up to 0.22).
    """
    spread = float(np.sqrt(np.sum(np.var(Y, axis=0))))
    if spread > 0.0:
        return spread
    top = float(np.max(np.abs(Y))) if Y.size else 0.0
    return top * float(np.finfo(np.float64).eps) if top > 0.0 else float(np.finfo(np.float64).tiny)


def ridge_frame(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mu, scale, Xc)``: the frame :func:`ridge` solves in.

    ``mu``: column means; ``Xc = X - mu``; ``scale``: root mean square of ``Xc``'s columns.  A column
    whose spread is within the rounding of its mean (``scale <= n eps max_i |X[i, c]|``, a constant
    column whose mean is inexact included) is constant: its ``Xc`` is 0 and its scale 1.  Scaled to
    unit size, such rounding noise gave coefficients of ~1/eps (all-equal inputs predicted 1e5).
    """
    n = X.shape[0]
    mu = X.mean(axis=0)
    Xc = X - mu
    scale = np.sqrt(np.mean(Xc**2, axis=0))
    constant = scale <= n * np.finfo(np.float64).eps * np.abs(X).max(axis=0, initial=0.0)
    Xc[:, constant] = 0.0
    return mu, np.where(constant, 1.0, scale), Xc


def weighted_gram(Z: np.ndarray, gamma: float, lam: float, sample_weight: np.ndarray | None) -> np.ndarray:
    """``K0 + lam I``, or ``K0 + lam W^-1`` with weights: GP noise ``lam / w_i`` (docs/math.md §6).

    ``w = 1`` gives the unweighted matrix bit for bit (``1 + 0 + lam``).
    """
    if sample_weight is None:
        return rbf_gram(Z, gamma, lam)
    K = rbf_gram(Z, gamma, 0.0)
    K[np.diag_indices_from(K)] += lam / sample_weight
    return K


def factorize(X: np.ndarray, Y: np.ndarray, params, methods: tuple[str, ...], threads: int | None,
              sample_weight: np.ndarray | None = None) -> dict:
    """Everything a model precomputes from its training data (docs/math.md §2–§3, §6 with weights):
    the factors in Cholesky form (symmetric storage, LAPACK's ``dpotrf``).

    Raises ``MemoryError`` before any work where the process cannot hold the factorisation's
    peak (:func:`fastsm._memory.check_memory`).
    """
    p = params
    n = X.shape[0]
    check_memory(8.0 * n * n * (FIT_MATRICES if "ikl" in methods else FIT_MATRICES_WITHOUT_IKL),
                 f"a twin GP of N = {n} training points", "fit fewer points, or use fastsm.tgp.fit_local "
                 "(models of n_neighbors points)")
    with thread_limits(threads) as nt:
        grams = [(X, p.gamma_x, p.lambda_x), (Y, p.gamma_y, p.lambda_y)]
        if nt > 1:  # the two kernel matrices in two threads (each kernel runs in one)
            with worker_pool(2, "fastsm-fit") as pool:
                Kx, Ky = pool.map(lambda g: weighted_gram(g[0], g[1], g[2], sample_weight), grams)
        else:
            Kx, Ky = (weighted_gram(g[0], g[1], g[2], sample_weight) for g in grams)
        check_stop()  # on a worker_pool thread told to stop (Ctrl-C in a local prediction): here and below
        Kxy = (1.0 - p.alpha) * Kx + p.alpha * Ky
        w = sample_weight
        jobs = [(Kx, "K_X", remedy("lambda_x", p.lambda_x, w)),
                (Ky, "K_Y", remedy("lambda_y", p.lambda_y, w)),
                (Kxy, "K_XY", remedy("lambda_x or lambda_y", min(p.lambda_x, p.lambda_y), w))]
        workers = min(len(jobs), resolve_threads(threads))
        if workers > 1:
            # three independent single-threaded factorisations, GIL released: bitwise the same as in series
            with worker_pool(workers, "fastsm-fit") as pool:
                fx, fy, fxy = pool.map(lambda j: spd_cholesky(*j), jobs)
        else:
            fx, fy, fxy = (_checked(spd_cholesky, *j) for j in jobs)
        G = _checked(ikl_factor_cholesky, fy[0], fx[0]) if "ikl" in methods else None
        check_stop()
        coef = ridge(X, Y, sample_weight)
    spread = output_spread(Y)
    return {
        "Wx": fx[0], "Wy": fy[0], "Wxy": fxy[0], "G": G,
        "logdet_x": fx[1], "logdet_y": fy[1], "logdet_xy": fxy[1],
        "y_spread": spread, "ridge_coef": coef, "factor_form": "cholesky",
    }


def _checked(step, *args):
    check_stop()
    return step(*args)


def spd_cholesky(K: np.ndarray, name: str, remedy: str) -> tuple[np.ndarray, float]:
    """``(S, log|K|)`` of an SPD matrix: its Cholesky factor ``L`` in symmetric storage ``S``
    (LAPACK's ``dpotrf`` on ``K``'s bytes; GIL released,
    :func:`fastsm._kernels.linalg.potrf_symmetric`).  Call on one BLAS thread.

    Raises
    ------
    ValueError
        ``K`` not positive definite, or numerically singular (a pivot below
        :data:`MIN_PIVOT`, where ``K^-1`` has an entry past float64's range).
    """
    S = np.array(K, dtype=np.float64, order="C", copy=True)
    info = potrf_symmetric(S)
    if info != 0:
        raise ValueError(f"{name} is not positive definite (Cholesky failed at column {info}); {remedy}")
    d = np.diagonal(S)
    logdet = 2.0 * float(np.sum(np.log(d)))
    if not (np.isfinite(logdet) and d.min() >= MIN_PIVOT):
        raise ValueError(f"{name} is numerically singular; {remedy}")
    return S, logdet


def ikl_factor_cholesky(Sy: np.ndarray, Sx: np.ndarray) -> np.ndarray:
    """``G = L_Y^-1 L_X`` (lower triangular, C-ordered) from the factors in symmetric storage: one DTRSM,
    backward stable column by column (``W_Y L_X`` without forming ``W_Y``)."""
    G = dtrsm(1.0, np.asfortranarray(np.tril(Sy)), np.asfortranarray(np.tril(Sx)), side=0, lower=1)
    return np.ascontiguousarray(np.tril(G))


#: The fields of a fitted model beside its data (``X``, ``Y``, ``params``, ``methods``,
#: ``sample_weight``): the parts :func:`factorize` returns.
MODEL_PARTS = ("Wx", "Wy", "Wxy", "G", "logdet_x", "logdet_y", "logdet_xy", "y_spread", "ridge_coef", "factor_form")


def inverse_parts(model) -> dict:
    """The factors of a model in Cholesky form as the inverse form holds them: ``W = L^-1`` for
    ``Wx``, ``Wy``, ``Wxy`` (LAPACK's ``dtrtri``, :func:`fastsm._lapack.triangular_inverse`, one BLAS
    thread), ``G`` unchanged.  O(N^3); for comparisons of the two forms
    (:func:`fastsm.tgp.views.inverse_form`)."""
    parts = {name: getattr(model, name) for name in MODEL_PARTS}
    with thread_limits(1):
        for name in ("Wx", "Wy", "Wxy"):
            parts[name] = triangular_inverse(np.tril(getattr(model, name)))
    parts["factor_form"] = "inverse"
    return parts


#: The smallest Cholesky pivot a model in Cholesky form accepts: ``K^-1`` has an entry of
#: ``1 / L_nn^2``, past float64's range below it (the inverse form's "W not finite").
MIN_PIVOT: float = float(np.sqrt(np.finfo(np.float64).tiny))


def own_factorisation(n: int, methods: tuple[str, ...]) -> bool:
    """Whether a local model of ``n`` points for ``methods`` is factorised by fastsm's own kernel
    (:func:`factorize_cholesky`, one GIL-free call) rather than by LAPACK (:func:`factorize`; both give
    the Cholesky form): up to ``config.ROW_PRODUCTS_MAX_N`` points (local models of one or a few points per
    prediction) and without IKLTGP (whose ``G = L_Y^-1 L_X`` that kernel does not form)."""
    return n <= config.ROW_PRODUCTS_MAX_N and "ikl" not in methods


def factorize_cholesky(X: np.ndarray, Y: np.ndarray, params, sample_weight: np.ndarray | None = None) -> dict:
    """:func:`factorize` for a small model in Cholesky form (KLTGP and SMTGP; :func:`own_factorisation`).

    ``Wx``, ``Wy``, ``Wxy`` hold the Cholesky factors ``L`` of ``K_X``, ``K_Y``, ``K_XY`` in
    symmetric storage (lower triangle ``L``, upper ``L^T``; ``factor_form = "cholesky"``), by
    one GIL-free kernel (:func:`fastsm._kernels.cholesky.twin_factors`) on one BLAS thread: the
    factors of :func:`factorize`'s Gram matrices, as accurate as its ``dpotrf``'s (their own
    factorisation up to ``CHOLESKY_MAX_N`` points, bits independent of the BLAS).  Every product with ``W = L^-1``
    is then a substitution with ``L`` (:mod:`fastsm._kernels.tri_rows`).  The ridge
    start and the spread come from :func:`fastsm._kernels.ridge.solve_ridge_start` (:func:`ridge`'s
    problem, to rounding).

    Raises
    ------
    ValueError
        As :func:`factorize`: a matrix not positive definite, or numerically singular (a pivot
        below :data:`MIN_PIVOT`).
    """
    p = params
    n = X.shape[0]
    S = np.zeros((3, n, n))
    logdet = np.empty(3)
    info = np.zeros(3, dtype=np.int64)
    weighted = sample_weight is not None
    w = np.ones(1) if sample_weight is None else sample_weight
    # writable arrays, as the KNN kernel's gathered members: Numba compiles a kernel once per array type
    X, Y, w = (a if a.flags.writeable else a.copy() for a in (X, Y, w))
    with thread_limits(1):
        twin_factors(X, Y, TwinKernels(float(p.gamma_x), float(p.gamma_y), float(p.lambda_x), float(p.lambda_y),
                                       float(p.alpha), weighted), w, S, logdet, info)
        coef, spread = solve_ridge_start(X, Y, w, weighted)
    for k, (name, lam_name, lam) in enumerate((("K_X", "lambda_x", p.lambda_x), ("K_Y", "lambda_y", p.lambda_y),
                                               ("K_XY", "lambda_x or lambda_y", min(p.lambda_x, p.lambda_y)))):
        if info[k] != 0:
            raise ValueError(f"{name} is not positive definite (Cholesky failed at column {info[k]}); "
                             f"{remedy(lam_name, lam, sample_weight)}")
        if not (np.isfinite(logdet[k]) and np.diagonal(S[k]).min() >= MIN_PIVOT):
            raise ValueError(f"{name} is numerically singular; {remedy(lam_name, lam, sample_weight)}")
    return {
        "Wx": S[0], "Wy": S[1], "Wxy": S[2], "G": None,
        "logdet_x": float(logdet[0]), "logdet_y": float(logdet[1]), "logdet_xy": float(logdet[2]),
        "y_spread": spread if spread > 0.0 else output_spread(Y), "ridge_coef": coef, "factor_form": "cholesky",
    }
