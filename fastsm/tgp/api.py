"""Fit and predict with KLTGP, IKLTGP and SMTGP: the public functions.

``predict`` validates and hands a global model to
:func:`fastsm.tgp.prediction.predict_global` and a local one to
:func:`fastsm.tgp.local.predict_local`; the batched machinery both use lives
in :mod:`fastsm.tgp.prediction`, all numerical work in :mod:`fastsm._kernels`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fastsm import config
from fastsm._interrupt import run_interruptible
from fastsm._threads import Compute, run_chunks
from fastsm._validation import check_choice, check_int
from fastsm.tgp.fitting import METHODS, check_training, factorize
from fastsm.tgp.local import LocalTGPModel, predict_local
from fastsm.tgp.model import Prediction, TGPModel, TGPParams, check_inputs, check_model, check_pairs
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.prediction import (
    Method,
    batch_ranges,
    evaluate,
    log_certainty_at,
    predict_global,
    prefetch_prediction,
    prepare_points,
)
from fastsm.tgp.views import check_method_factors, products_plan


def fit(
    X: ArrayLike,
    Y: ArrayLike,
    params: TGPParams | None = None,
    *,
    methods: tuple[str, ...] | None = ("kl", "ikl", "sm"),
    threads: int | None = None,
    sample_weight: ArrayLike | None = None,
) -> TGPModel:
    """Precompute a twin-GP model from training data (importance-weighted with ``sample_weight``).

    Parameters
    ----------
    X : array_like, shape (N, dx)
        Training inputs (a 1-D array is one column).
    Y : array_like, shape (N, dy)
        Training outputs.
    params : TGPParams, optional
        Hyperparameters; defaults to ``TGPParams()`` (widths ``"scale"``:
        relative to the data).  ``model.params`` holds the resolved numbers.
    methods : tuple of str, str or None
        Methods the model must serve (``None``: KL, IKL and SM); ``"ikl"``
        adds ``C = K_Y^-1 K_X K_Y^-1`` (two extra N^3 products).
    threads : int, optional
        Numba threads for the kernel matrices and ``C``.  The Cholesky
        factorisations run on one BLAS thread so that the model is bitwise
        the same for every thread count (:mod:`fastsm.tgp.fitting`).
    sample_weight : array_like (N,), optional
        Importance weights ``w_i >= 0`` (e.g. ``estimate_weights(...).weights``)
        for IW-KLTGP / IW-IKLTGP / IW-SMTGP ([CS] §IV-B) in the form of
        docs/math.md §6: ``K_X = K0_X + lambda_x W^-1``, ``K_Y = K0_Y + lambda_y W^-1``
        and ``K_XY = (1-a) K_X + a K_Y`` — GP noise ``lambda / w_i`` per
        training point.  ([CS] Eq. 12–13 read literally, ``W^1/2 K W^1/2``,
        leave every prediction unchanged.)  The weights are used as given
        (KLIEP's have mean 1); ``w = 1`` reproduces the unweighted model bit
        for bit; points with ``w_i = 0`` are left out.  Their scale matters:
        a training point's noise is ``lambda / w_i``, a test point's stays
        ``lambda``, so uniform weights ``c != 1`` are not the unweighted model
        (the default kernel widths alone ignore the scale); normalise them to
        mean 1.  Weights so large that ``lambda / w_i`` is lost to rounding
        make a Gram matrix singular: the error then names ``sample_weight``.  ``predict`` is
        unchanged and ``Prediction.log_certainty`` is then the weighted
        certainty ``phi_W`` ([CS] Eq. 17).

    Returns
    -------
    TGPModel
        Holds private read-only copies of ``X``, ``Y`` and the factors.
    """
    params = TGPParams() if params is None else params
    X, Y, methods, w, params = check_training(X, Y, params, methods, sample_weight)
    prefetch_prediction()  # on a cold cache: a helper compiles half of the first prediction's kernels meanwhile
    return TGPModel._from_parts(X, Y, params, methods, factorize(X, Y, params, methods, threads, w), w)

def predict(
    model: TGPModel,
    X: ArrayLike,
    *,
    method: Method = "sm",
    init: str | ArrayLike | None = None,
    max_iter: int | None = None,
    tol: float = config.DEFAULT_TOL,
    threads: int | None = None,
    optimizer: Literal["bfgs", "gd"] = "bfgs",
    trust_radius: float = config.DEFAULT_TRUST_RADIUS,
    batch_size: int = config.DEFAULT_BATCH_SIZE,
    progress: bool | Callable[[int, int], None] = False,
    ftol: float = config.DEFAULT_FTOL,
) -> Prediction:
    """Predict outputs by minimising a TGP objective for every test input.

    Parameters
    ----------
    model : TGPModel or LocalTGPModel
        From :func:`fit`, or :func:`fit_local` (each test point predicted by
        the model of its nearest training inputs).
    X : array_like, shape (n, dx)
        Test inputs.
    method : {"sm", "kl", "ikl", "sm_cubic"}
        SMTGP (quadratic form, [SM] Eq. 16), KLTGP (Eq. 5), IKLTGP (Eq. 7), or
        SMTGP through the O(N^3) Nielsen–Nock form (Eq. 9, reference only).
        SMTGP minimises the beta-free transform ``-s / (2(1-a))`` (its argmin
        does not depend on beta, [SM] Lemma 4.2); ``Prediction.objective``
        reports the SM value at the result.
    init : None, "linear", "kl" or array_like (n, dy)
        Start.  ``None``: ``"linear"`` (ridge regression) for KL/IKL and
        ``"kl"`` (the KLTGP prediction, [SM] §5.2) for SM.  ``"kl"`` runs
        KLTGP for at most :data:`fastsm.config.SM_START_ITER` (5) iterations:
        a start need not be converged (pass ``predict(model, X,
        method="kl").y`` for a converged one).  Where the ridge
        start leaves the training outputs' bounding box, the output of the
        nearest training input replaces it if the objective is lower there
        (a start far from the outputs can sit on a flat, spurious minimum).
    max_iter : int, optional
        Maximum optimiser iterations per point.  ``None`` (default): ``50 + 2 dy``
        (:func:`fastsm.config.default_max_iter`): [SM] §5.2's 50, and room for the
        ``dy`` or so iterations BFGS needs to learn the curvature of a ``dy``-dimensional
        criterion (docs/performance.md, "An iteration budget that grows with dy").
    tol, ftol : float
        A point has converged when its last full step (one the line search
        did not shorten), or the quasi-Newton step it would take next, moves
        every coordinate by at most ``tol * model.y_spread``: then it is a
        local minimum whose position is fixed to about ``tol`` (docs/accuracy.md
        checks it by an independent search).  ``ftol > 0`` also ends a point
        whose full step passed Armijo's test and lowered the objective by at
        most ``ftol * |f|``, or whose next quasi-Newton step predicts a
        decrease (``g^T H g / 2``, the Newton decrement) of at most
        ``ftol * |f|``: fewer evaluations (~13 % at dy = 16 with
        ``ftol = 1e-12``), a minimum in value, but its position only to
        ``sqrt(ftol |f| / curvature)``.  Default ``0``.
    threads : int, optional
        Numba threads for this call (BLAS runs single-threaded inside them).
        Results are bitwise the same for every thread count.
    optimizer : {"bfgs", "gd"}
        Quasi-Newton (BFGS on the inverse Hessian) or gradient descent.  SMTGP with at most
        ``config.SM_HESSIAN_MAX_DY`` (32) outputs seeds BFGS with the exact Hessian of its
        criterion, where positive definite, from iteration ``max(3, ceil(dy / 2))`` on; an indefinite
        one is shifted to positive definite at the schedule's last request, and at its first where
        ``dy >= 15`` (``config.CURVATURE_SHIFT_COST``; docs/performance.md).
    trust_radius : float
        Largest step, in units of ``model.y_spread``; keeps each prediction
        in the basin of its start.
    batch_size : int
        Test points optimised together (bounds memory at about
        ``8 * batch_size * N`` doubles).  Results do not depend on it on
        this machine's OpenBLAS (docs/accuracy.md).
    progress : bool or callable
        Report progress per batch (local models: per group of test points):
        ``True`` shows tqdm when installed, else a line on stderr; a
        callable gets ``(done, total)`` test points.  Off by default.

    Returns
    -------
    Prediction
        Test inputs outside the training data's kernel support are flagged
        ``extrapolated`` (their ``log_certainty`` is ``-inf``) and a
        ``fastsm.ExtrapolationWarning`` (a ``RuntimeWarning``) says how many there were, once per call.

    Notes
    -----
    Ctrl-C interrupts the call within one evaluation round and raises
    ``KeyboardInterrupt``.
    """
    opts = PredictOptions(method=method, init=init, max_iter=max_iter, tol=tol, ftol=ftol, trust_radius=trust_radius,
                          optimizer=optimizer, batch_size=batch_size, threads=threads, progress=progress)
    if isinstance(model, LocalTGPModel):
        return predict_local(model, X, opts)
    model = check_model(model)
    return predict_global(model, check_inputs(model, X), opts)

def objective(
    model: TGPModel,
    X: ArrayLike,
    Y: ArrayLike,
    *,
    method: Method = "sm",
    return_gradient: bool = False,
    threads: int | None = None,
    batch_size: int = config.DEFAULT_BATCH_SIZE,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The prediction objective at given outputs (diagnostics, comparisons).

    Row ``i`` evaluates the objective of test input ``X[i]`` at ``Y[i]``:
    KL: ``k(y,y) - 2 k_y^T u_x - eta_x log eta_y`` ([SM] Eq. 5); IKL: Eq. 7;
    SM: ``exp(c s) / (beta - 1)`` with ``s = a log eta_y - log eta_xy`` and
    ``c = (1-beta) / (2(1-a))`` (Eq. 16; ``-s / (2(1-a))`` at ``beta = 1``);
    SM_CUBIC: the full divergence ``D_{a,b}(p_X : p_Y)`` by Eq. 9 (corrected).

    Returns
    -------
    values : ndarray (n,)
    gradient : ndarray (n, dy), only if ``return_gradient``
    """
    model = check_model(model)
    X, Y = check_pairs(model, X, Y)
    check_choice("method", method, METHODS)
    batch_size = check_int("batch_size", batch_size, low=1)
    check_method_factors(model, method)
    n, dy = Y.shape
    val = np.empty(n)
    grad = np.empty((n, dy))

    def chunk(s: int, e: int) -> None:
        F, eta_x, _, _ = prepare_points(model, X[s:e], method)
        evaluate(model, method, F, eta_x, Y[s:e], val[s:e], grad[s:e])

    def body(run: Compute) -> None:
        products_plan(model)  # formed (probed) once, before threads share it
        for s, e in batch_ranges(n, batch_size):
            run_chunks(e - s, run.n_threads, chunk, start=s)

    run_interruptible(threads, body, flops=6.0 * n * model.n_train**2)
    return (val, grad) if return_gradient else val

def certainty(model: TGPModel, X: ArrayLike, Y: ArrayLike, *, threads: int | None = None,
              batch_size: int = config.DEFAULT_BATCH_SIZE) -> np.ndarray:
    """``log phi_a(x, y)`` ([SM] §4.2, Lemma 4.1) for given input/output pairs.

    ``log phi = (1-a) log eta_x + a log eta_y - log eta_xy`` with the model's
    ``alpha``, evaluated as is (no extrapolation flag: see
    :attr:`Prediction.log_certainty` for predictions).
    """
    model = check_model(model)
    X, Y = check_pairs(model, X, Y)
    batch_size = check_int("batch_size", batch_size, low=1)
    out = np.empty(X.shape[0])

    def chunk(s: int, e: int) -> None:
        _, eta_x, Gxy, _ = prepare_points(model, X[s:e], "sm")
        out[s:e] = log_certainty_at(model, Y[s:e], eta_x, Gxy)

    def body(run: Compute) -> None:
        products_plan(model)  # formed (probed) once, before threads share it
        for s, e in batch_ranges(X.shape[0], batch_size):
            run_chunks(e - s, run.n_threads, chunk, start=s)

    run_interruptible(threads, body, flops=6.0 * X.shape[0] * model.n_train**2)
    return out
