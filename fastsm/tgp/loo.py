"""Exact leave-one-out predictions by projecting the stored factors (no refits).

The model trained without training point ``i`` has the kernel matrices with row and column
``i`` removed.  With ``A = K^-1 = W^T W`` (``W = L^-1``), ``w = W[:, i]`` and ``k`` the full kernel
column::

    K_{-i}^-1 k_{-i} = (W^T P W k)_{-i},   k_{-i}^T K_{-i}^-1 k_{-i} = ||P W k||^2,

with ``P`` the projector onto the complement of ``w`` (``P W e_i = 0``: entry ``i`` of ``k`` drops
out; keeping its true value, not 0, avoids a cancellation, #55) — the batched triangular products of the
full model (substitutions with ``L``, as its predictions run them) plus an O(N) projection per point
between them, for ``K_X``, ``K_Y``, ``K_XY`` and IKLTGP's ``G``
(:func:`fastsm._kernels.objectives.project_out`).  Only the projections read ``W``'s columns: LAPACK's
``dtrtri`` forms them once per call (:func:`fastsm.tgp.views.leave_one_out`).  Leave-one-out of all
``N`` points therefore costs about one batch prediction of ``N`` points,
O(N^3), instead of ``N`` refits, O(N^4).  The start (ridge regression), the
output spread that scales the tolerance and trust radius, and the
certainty are those of each ``N-1``-point model too: the result is the
brute-force refit-and-predict leave-one-out up to rounding and the
optimiser's tolerance.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fastsm import config
from fastsm._memory import LOO_MATRICES, check_memory
from fastsm._validation import check_choice
from fastsm.tgp.fitting import output_spread, ridge_frame
from fastsm.tgp.model import Prediction, TGPModel, check_model
from fastsm.tgp.options import PredictOptions
from fastsm.tgp.prediction import predict_points, start, supported_start, warn_extrapolated
from fastsm.tgp.views import LeaveOneOut, leave_one_out

LooMethod = Literal["sm", "kl", "ikl"]


def loo_spread(Y: np.ndarray) -> np.ndarray:
    """Output spread (as ``TGPModel.y_spread``) of every leave-one-out training set, O(N·dy)."""
    n = Y.shape[0]
    if n < 2:
        raise ValueError("leave-one-out needs at least 2 training points")
    Yc = Y - Y.mean(axis=0)
    r2 = np.einsum("ij,ij->i", Yc, Yc)
    total = r2.sum() - r2 - r2 / (n - 1)  # sum over j != i of |y_j - mean_{-i}|^2
    s = np.sqrt(np.maximum(total, 0.0) / (n - 1))
    # the update cancels where the other outputs (nearly) coincide: there the spread is formed from
    # them directly, as the refit does (output_spread: a remainder of equal outputs has no spread)
    cancel = np.flatnonzero(total <= _CANCEL * (r2.sum() - r2 + r2 / (n - 1)))
    keep = np.ones(n, dtype=bool)
    for i in cancel:
        keep[i] = False
        s[i] = output_spread(Y[keep])
        keep[i] = True
    return s


#: Relative size below which :func:`loo_spread`'s downdate has lost digits to cancellation (its
#: error is ~1e-16 of the terms; 1e-6 leaves ten digits).
_CANCEL = 1e-6


def loo_ridge(model: TGPModel) -> np.ndarray:
    """The ``init="linear"`` start of every leave-one-out model: ridge without point ``i``, at ``x_i``.

    The ridge of :func:`fastsm.tgp.fitting.ridge` (penalty ``1e-6`` times the
    mean column sum of squares of the centred inputs and the mean weight, unpenalised bias,
    weighted squared residuals), solved for all ``N`` left-out sets at once
    through their ``(dx+1)×(dx+1)`` normal equations (min-norm by a batched
    pseudo-inverse, as the refit's least squares).  O(N·dx^3).
    """
    X, Y = model.X, model.Y
    n, dx = X.shape
    w = np.ones(n) if model.sample_weight is None else model.sample_weight
    top = float(w.max())
    w = w / top  # with the penalty divided by the same: the same minimisers, no overflow for huge weights
    # in the full set's centred, unit-scale columns (ridge_frame): the same minimisers, and
    # normal equations whose scale does not depend on the units of X
    mu, scale, Xc = ridge_frame(X)
    A1 = np.hstack([Xc / scale, np.ones((n, 1))])
    G = (A1 * w[:, None]).T @ A1
    R = (A1 * w[:, None]).T @ Y
    Gi = G[None] - w[:, None, None] * A1[:, :, None] * A1[:, None, :]
    Ri = R[None] - w[:, None, None] * A1[:, :, None] * Y[:, None, :]
    # the penalty of each N-1 set: 1e-6 * mean over columns of sum_j (x_j - mean)^2
    sq = Xc * Xc
    ss = (sq.sum(axis=0)[None] - sq - sq / (n - 1)).mean(axis=1)
    r = 1e-6 * np.maximum(ss, 1e-300) * ((w.sum() - w) / (n - 1))  # times each set's mean weight (/ top)
    # each set centred at its own mean, as its refit: a_j -> T_i a_j, T_i = [[I, -delta_i], [0, 1]] with
    # delta_i = (mean_{-i} - mean) / scale; the minimiser is the same, but where a set's system is
    # singular (e.g. one point left) the minimal-norm solution depends on the centre
    delta = -(Xc / scale) / (n - 1)
    T = np.broadcast_to(np.eye(dx + 1), (n, dx + 1, dx + 1)).copy()
    T[:, :dx, dx] = -delta
    Gi = T @ Gi @ T.transpose(0, 2, 1)
    Ri = T @ Ri
    diag = np.arange(dx)
    Gi[:, diag, diag] += r[:, None] / scale[None] ** 2
    coef = np.linalg.pinv(Gi, hermitian=True) @ Ri
    Ai = np.einsum("ijk,ik->ij", T, A1)
    return np.einsum("ij,ijk->ik", Ai, coef)


def loo_linear_start(model: TGPModel, method: str, ridge: np.ndarray | None = None,
                     threads: int | None = None, rows: np.ndarray | None = None,
                     loo: LeaveOneOut | None = None) -> np.ndarray:
    """``init="linear"`` of :func:`loo_predict`: each left-out set's ridge at its point, kept where supported.

    ``ridge`` is :func:`loo_ridge` of ``model`` if already computed: it depends on the training data and
    weights only, not on the kernels, so a search over kernels computes it once
    (:func:`fastsm.tgp.select`).  The rest (:func:`~fastsm.tgp.prediction.supported_start`) depends on
    the model.  ``rows``: only those training points' starts (:func:`loo_predict`'s ``rows``); ``loo``: the
    model's :func:`~fastsm.tgp.views.leave_one_out` if already formed.
    """
    held = _rows(model, rows)
    full = loo_ridge(model) if ridge is None else ridge
    return supported_start(model, model.X[held], full[held], method, held, loo_spread(model.Y)[held], threads=threads,
                           loo=leave_one_out(model, threads) if loo is None else loo)


def _rows(model: TGPModel, rows) -> np.ndarray:
    """``rows`` as checked training indices (all of them for ``None``)."""
    n = model.n_train
    if rows is None:
        return np.arange(n, dtype=np.int64)
    idx = np.asarray(rows)
    if idx.ndim == 1 and idx.size == 0:  # [] is float64 to NumPy; no rows: an empty result, as remove(model, [])
        return np.empty(0, dtype=np.int64)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"rows must be a 1-D array of training-point indices, got {idx.dtype} of shape {idx.shape}")
    idx = idx.astype(np.int64)
    if idx.min() < 0 or idx.max() >= n:
        raise ValueError(f"rows must index the model's {n} training points (0 .. {n - 1}), got values in "
                         f"[{idx.min()}, {idx.max()}]")
    return idx


def loo_predict(
    model: TGPModel,
    *,
    method: LooMethod = "sm",
    init: str | ArrayLike | None = None,
    max_iter: int | None = None,
    tol: float = config.DEFAULT_TOL,
    threads: int | None = None,
    optimizer: Literal["bfgs", "gd"] = "bfgs",
    trust_radius: float = config.DEFAULT_TRUST_RADIUS,
    batch_size: int = config.DEFAULT_BATCH_SIZE,
    ftol: float = config.DEFAULT_FTOL,
    rows: ArrayLike | None = None,
    certainty: bool = True,
    projections: LeaveOneOut | None = None,
) -> Prediction:
    """Exact leave-one-out prediction of every training point, without refitting.

    Row ``i`` of the result is what ``predict(fit(X without i, Y without i),
    X[i])`` returns (same ``params``, weights and options): the start, the
    inverses, the log-determinants' role, the output spread that scales
    ``tol`` and ``trust_radius`` — all those of the ``N-1``-point model,
    obtained by projecting the stored factors (module docstring).  Cost:
    about one :func:`~fastsm.tgp.predict` of ``N`` points.

    Parameters
    ----------
    model : TGPModel
        From :func:`fastsm.tgp.fit`, with at least two training points.
    method : {"sm", "kl", "ikl"}
        As in :func:`~fastsm.tgp.predict` (``"sm_cubic"``, the O(N^3)
        reference form, has no leave-one-out).
    init : None, "linear", "kl" or array_like (N, dy)
        Start per training point (per entry of ``rows``); ``None``: ``"linear"`` (each left-out
        set's ridge) for KL/IKL, ``"kl"`` (the leave-one-out KLTGP
        prediction) for SM.
    max_iter, tol, threads, optimizer, trust_radius, batch_size, ftol
        As in :func:`~fastsm.tgp.predict`.
    rows : array_like of int, optional
        Leave out and predict only these training points (row ``j`` of the
        result is training point ``rows[j]``); each row is bitwise what the
        full leave-one-out gives it (a point's optimisation depends on its own
        data only), at ``len(rows) / N`` of the cost.  ``None``: all of them; an empty list:
        an empty result.
    certainty : bool
        ``False``: KLTGP and IKLTGP leave ``log_certainty`` NaN and skip the SMTGP
        evaluation at every returned point that forms it (SMTGP's costs nothing extra);
        for scores that need only ``y`` (:func:`fastsm.tgp.select`).
    projections : LeaveOneOut, optional
        ``model``'s :func:`fastsm.tgp.views.leave_one_out`, where a caller that scores one model
        several times formed them once (:func:`fastsm.tgp.select`); ``None``: formed here (three
        O(N^3 / 3) triangular inversions, a few percent of the call).

    Returns
    -------
    Prediction
        ``y[i]`` is the prediction of training point ``i`` (``rows[i]``) by the model
        without it; ``log_certainty`` is that model's certainty.

    Examples
    --------
    >>> from fastsm import datasets, tgp
    >>> X, _, Y, _ = datasets.toy1(n_train=100, n_test=10, seed=0)
    >>> model = tgp.fit(X, Y, tgp.TGPParams(lambda_x=1e-2, lambda_y=1e-2))
    >>> loo = tgp.loo_predict(model, method="sm")
    >>> float(((loo.y - Y) ** 2).mean()) < 0.1
    True
    """
    model = check_model(model)
    check_choice("method", method, ("sm", "kl", "ikl"))
    opts = PredictOptions(method=method, init=init, max_iter=max_iter, tol=tol, ftol=ftol, trust_radius=trust_radius,
                          optimizer=optimizer, batch_size=batch_size, threads=threads)
    what = "one start per training point" if rows is None else "one start per row"
    return loo_points(model, _rows(model, rows), opts, certainty=certainty, what=what, loo=projections)


def _checked_projections(loo, n: int) -> LeaveOneOut:
    """``loo`` if it is a :class:`~fastsm.tgp.views.LeaveOneOut` of ``n × n`` arrays (a model of ``n``
    training points), else a clear error: the kernels would read past smaller arrays."""
    if not isinstance(loo, LeaveOneOut):
        raise TypeError(f"projections must be fastsm.tgp.views.leave_one_out(model), got {type(loo).__name__}")
    for name, V in zip(LeaveOneOut._fields, loo, strict=True):
        if not (isinstance(V, np.ndarray) and V.shape == (n, n) and V.dtype == np.float64 and V.flags.c_contiguous):
            raise ValueError(f"projections.{name} must be a C-contiguous float64 array of shape ({n}, {n}) "
                             f"(leave_one_out of this model), got {getattr(V, 'shape', type(V).__name__)}")
    return loo


def loo_points(model: TGPModel, held: np.ndarray, opts: PredictOptions, certainty: bool = True,
               what: str = "one start per row", loo: LeaveOneOut | None = None) -> Prediction:
    """:func:`loo_predict` of the training points ``held`` of ``model`` with validated options; ``what``
    names the starts ``opts.init`` must give (its error message); ``loo``: the model's
    :func:`~fastsm.tgp.views.leave_one_out` if already formed."""
    method = opts.method
    if method == "ikl" and model.G is None:
        raise ValueError("this model was fitted without 'ikl' in methods; refit with methods including 'ikl'")
    check_memory(8.0 * LOO_MATRICES * model.n_train**2, f"leave-one-out of N = {model.n_train} training points",
                 "use a model of fewer training points")
    n, dy = held.size, model.Y.shape[1]
    spread = loo_spread(model.Y)[held]
    Xh = model.X[held]
    lv = leave_one_out(model, opts.threads) if loo is None else _checked_projections(loo, model.n_train)
    Y0 = start(opts.init, method, (n, dy), what, linear=lambda: loo_ridge(model)[held])
    res = predict_points(model, Xh, Y0, opts, held=held, spread=spread, loo=lv, certainty=certainty)
    warn_extrapolated(res.extrapolated, n)
    return res

