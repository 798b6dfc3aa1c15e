"""Per-point KNN-local predictions (``share="none"``), many points per GIL-free call.

Each test point gets the twin GP of its ``K`` nearest training points (the paper's method):
:func:`knn_rows` gathers the members, factorises the model
(:func:`~fastsm._kernels.cholesky.twin_factors`), computes its ridge start and spread
(:func:`~fastsm._kernels.ridge.ridge_start`) and predicts the point
(:func:`~fastsm._kernels.predict.predict_rows`, the one prediction pipeline) — the kernels the per-point
path (:func:`fastsm.tgp.local_model.local_model` and :func:`fastsm.tgp.prediction.predict_points`) calls one
by one from Python, in the same order, so the bits are that path's (tests/test_knn.py).
Between those calls a point spent about as long in Python, holding the GIL, as in the kernels,
so two threads predicted 1.6x, not 2x, as fast as one (docs/scale.md).

A point whose model the Python path would refuse or treat specially (a factorisation that fails
or is numerically singular, outputs without spread, a ridge problem its QR refuses, a ridge start that
overflows) is left to that path (status ``1``), which raises its errors or handles it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.core.extending import intrinsic
from numba.core.imputils import impl_ret_borrowed

from fastsm._kernels.cholesky import TwinKernels, twin_factors
from fastsm._kernels.objectives import KL, SM, Objective
from fastsm._kernels.points import Fitted, linear_rows
from fastsm._kernels.predict import GIVEN, Batch, Objectives, predict_rows
from fastsm._kernels.ridge import ridge_start
from fastsm._kernels.shared import call
from fastsm.config import kernel


class Local(NamedTuple):
    """A local model's training data and parameters as :func:`knn_rows` reads them."""

    X: np.ndarray  # training inputs, n_train × dx
    Y: np.ndarray  # training outputs, n_train × dy
    w: np.ndarray  # sample weights (weighted), else a placeholder
    weighted: bool
    gamma_x: float
    gamma_y: float
    lambda_x: float
    lambda_y: float
    alpha: float
    beta: float
    floor: float  # of the etas
    min_pivot: float  # the smallest Cholesky pivot a model accepts


class Outcome(NamedTuple):
    """:func:`knn_rows`'s outputs, one row per point (``status`` 0: predicted, 1: left to Python)."""

    y: np.ndarray
    criterion: np.ndarray
    n_iter: np.ndarray
    n_eval: np.ndarray
    converged: np.ndarray
    hits: np.ndarray
    eta_y: np.ndarray
    eta_xy: np.ndarray
    eta_x: np.ndarray
    extrapolated: np.ndarray
    status: np.ndarray


def outcome(m: int, dy: int) -> Outcome:
    """Empty :class:`Outcome` arrays for ``m`` points."""
    return Outcome(np.empty((m, dy)), np.empty(m), np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64),
                   np.empty(m, dtype=np.bool_), np.empty(m, dtype=np.int64), np.empty(m), np.empty(m), np.empty(m),
                   np.empty(m, dtype=np.bool_), np.ones(m, dtype=np.int64))


@intrinsic
def read_only(typingctx, arr):
    """``arr`` typed as a read-only array (the same array: only Numba's type changes).

    A fitted model's arrays are read-only (:class:`fastsm.tgp.model.TGPModel`), so the Python
    path calls :func:`~fastsm._kernels.predict.predict_rows` with read-only array types;
    :func:`knn_rows` hands it its own arrays typed so too, and the prediction's kernels are
    compiled once for both callers instead of twice (about a minute each, cold).
    """
    rtype = arr.copy(readonly=True)

    def codegen(context, builder, signature, args):
        return impl_ret_borrowed(context, builder, rtype, args[0])

    return rtype(arr), codegen


@kernel()
def knn_rows(loc, Xq, members, Y0, run, plan, stop, out):
    """Predict each row ``Xq[q]`` by the twin GP of the training points ``members[q]`` (sorted).

    ``Y0``: the given starts (``run.start == GIVEN``) or ignored; ``run``:
    :class:`~fastsm._kernels.predict.Run` (one thread); ``plan``: the substitutions' plan;
    ``stop``: polled between points and evaluation rounds.  Fills ``out`` (:class:`Outcome`);
    rows not reached (stopped) or left to Python keep ``status`` 1.
    """
    m, k = members.shape
    dx = loc.X.shape[1]
    dy = loc.Y.shape[1]
    S = np.zeros((3, k, k))  # the lower triangles are the factorisation's scratch: no subnormal junk
    logdet = np.empty(3)
    info = np.zeros(3, dtype=np.int64)
    kern = TwinKernels(loc.gamma_x, loc.gamma_y, loc.lambda_x, loc.lambda_y, loc.alpha, loc.weighted)
    for q in range(m):
        if stop[0]:
            return
        Xm = np.empty((k, dx))
        Ym = np.empty((k, dy))
        for i in range(k):  # element loops: a row assignment compiles Numba's shape check (1.3 s)
            r = members[q, i]
            for c in range(dx):
                Xm[i, c] = loc.X[r, c]
            for c in range(dy):
                Ym[i, c] = loc.Y[r, c]
        if loc.weighted:
            w = np.empty(k)
            for i in range(k):
                w[i] = loc.w[members[q, i]]
        else:
            w = loc.w
        twin_factors(Xm, Ym, kern, w, S, logdet, info)
        usable = True
        for f in range(3):
            if info[f] != 0 or not np.isfinite(logdet[f]):
                usable = False
            else:
                for i in range(k):
                    if not S[f, i, i] >= loc.min_pivot:
                        usable = False
        if not usable:
            continue
        coef, spread, solved = ridge_start(Xm, Ym, w, loc.weighted)
        if not (solved and spread > 0.0):
            continue
        xq = Xq[q:q + 1]
        if run.start == GIVEN:
            y0 = Y0[q:q + 1].copy()
        else:
            y0 = linear_rows(xq, coef)
            if not np.isfinite(y0).all():
                continue
        Xr, Yr, Wx, Wy, Wxy = read_only(Xm), read_only(Ym), read_only(S[0]), read_only(S[1]), read_only(S[2])
        none = read_only(np.empty((0, 0)))  # no leave-one-out projections
        fit = Fitted(Xr, Yr, read_only(coef), loc.gamma_x, 1.0 + loc.lambda_x, loc.floor, Wx, Wy, Wxy, none, none,
                     none)
        Zt = read_only(np.ascontiguousarray(Ym.T))
        kl = Objective(KL, Yr, loc.gamma_y, 1.0 + loc.lambda_y, 1.0 + loc.lambda_x, loc.alpha, loc.beta, loc.floor,
                       Wy, Wy, logdet[1], logdet[0], Zt, none, none)
        sm = Objective(SM, Yr, loc.gamma_y, 1.0 + loc.lambda_y, 1.0 + loc.lambda_x, loc.alpha, 1.0, loc.floor,
                       Wy, Wxy, logdet[1], logdet[0], Zt, none, none)
        held = np.empty(1, dtype=np.int64)
        held[0] = -1
        unit = np.empty(1)
        unit[0] = spread
        objs = Objectives(kl, sm if run.method == SM else kl, sm, None)
        Y, f, n_iter, n_eval, cv, hits, eta_y, eta_xy, eta_x, ex = call(predict_rows, fit, objs,
                                                                        Batch(xq, y0, held, unit), run, plan, stop)
        for c in range(dy):
            out.y[q, c] = Y[0, c]
        out.criterion[q] = f[0]
        out.n_iter[q] = n_iter[0]
        out.n_eval[q] = n_eval[0]
        out.converged[q] = cv[0]
        out.hits[q] = hits[0]
        out.eta_y[q] = eta_y[0]
        out.eta_xy[q] = eta_xy[0]
        out.eta_x[q] = eta_x[0]
        out.extrapolated[q] = ex[0]
        out.status[q] = 0
