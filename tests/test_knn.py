"""Per-point KNN models (``share="none"``) many points per kernel call (:mod:`fastsm._kernels.knn`):
bitwise the per-point path (one model and one prediction per point from Python), whatever the
block, thread count, start, weights; the points that path refuses or treats specially are left
to it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fastsm import config, datasets, tgp
from fastsm._kernels.knn import knn_rows, outcome
from fastsm._kernels.tri_rows import SOLVE_PLAN
from fastsm.tgp import local
from fastsm.tgp.neighbours import neighbours
from fastsm.tgp.options import PredictOptions

PARAMS = tgp.TGPParams(gamma_x=0.6, gamma_y=2.0, lambda_x=1e-3, lambda_y=1e-3, alpha=0.6, beta=1.4)
FIELDS = ("y", "log_certainty", "n_iter", "n_eval", "converged", "objective", "criterion", "n_eta_floor",
          "extrapolated")


@pytest.fixture(scope="module")
def data():
    X, Xt, Y, _ = datasets.smooth_manifold(2, n_train=700, n_test=37, dx=5, dy=3, latent=2)
    Xt = Xt.copy()
    Xt[5] = X.max(axis=0) + 40.0  # outside every kernel's support: extrapolated
    return X, Xt, Y


def _per_point(monkeypatch, model, X, **kw):
    with monkeypatch.context() as mp:
        mp.setattr(local, "knn_blocks", lambda *a, **k: None)
        return tgp.predict(model, X, **kw)


def _same(a, b):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)


@pytest.mark.parametrize("method", ["sm", "kl"])
@pytest.mark.parametrize("init", [None, "linear", "kl", "given"])
def test_blocks_are_the_per_point_path(data, monkeypatch, method, init):
    X, Xt, Y = data
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=40, share="none")
    if init == "given":
        init = np.random.default_rng(0).standard_normal((len(Xt), Y.shape[1])) * 0.1 + Y.mean(axis=0)
    ref = _per_point(monkeypatch, model, Xt, method=method, init=init)
    assert ref.extrapolated[5] and ref.extrapolated.sum() == 1
    for threads in (1, 2):
        _same(tgp.predict(model, Xt, method=method, init=init, threads=threads), ref)
    monkeypatch.setattr(config, "KNN_BLOCK", 5)  # other blocks, other chunk splits
    monkeypatch.setattr(config, "LOCAL_CHUNK_ENTRIES", 7 * 40)
    _same(tgp.predict(model, Xt, method=method, init=init), ref)


def test_weighted_models(data, monkeypatch):
    """Weighted models, bitwise the per-point path; one compiled kernel for weighted and unweighted models (a
    model's read-only weights once typed a second one, about 5 s cold)."""
    X, Xt, Y = data
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(X))
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=40, share="none", sample_weight=w)
    _same(tgp.predict(model, Xt, method="sm"), _per_point(monkeypatch, model, Xt, method="sm"))
    tgp.predict(tgp.fit_local(X, Y, PARAMS, n_neighbors=40, share="none"), Xt[:2], method="sm")
    assert len(knn_rows.signatures) == 1, knn_rows.signatures


def test_neighbours_at_one_input_are_left_to_python(data, monkeypatch):
    """A point whose neighbours' inputs are one point: the ridge kernel's QR refuses the problem (the ridge is
    the outputs' mean, ``dgelsd``'s minimal-norm solution, taken in NumPy), so the kernel leaves the point to
    the per-point path; the predictions are bitwise that path's."""
    X, Xt, Y = data
    X = X.copy()
    near = np.argsort(((X - Xt[0]) ** 2).sum(axis=1))[:60]
    X[near] = X[near[0]]
    model = tgp.fit_local(X, Y, tgp.TGPParams(gamma_x=0.6, gamma_y=2.0, lambda_x=0.1, lambda_y=1e-3),
                          n_neighbors=40, share="none")
    got = tgp.predict(model, Xt, method="sm")
    _same(got, _per_point(monkeypatch, model, Xt, method="sm"))
    assert _statuses(model, Xt, Y.shape[1])[0] == 1


def test_points_the_kernel_leaves_to_python(data, monkeypatch):
    """Neighbours with equal outputs (no spread: the per-point path's own unit) are predicted by the
    per-point path, with no warning (the kernel's unset etas of such a point went into a logarithm up to
    session 48); a failing factorisation raises its error."""
    X, Xt, Y = data
    Y = Y.copy()
    near = np.argsort(((X - Xt[0]) ** 2).sum(axis=1))[:60]
    Y[near] = [0.5, -0.25, 1.0]  # exact means: no spread at all
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=40, share="none")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="divide by zero", category=RuntimeWarning)
        got = tgp.predict(model, Xt, method="sm")
    _same(got, _per_point(monkeypatch, model, Xt, method="sm"))
    np.testing.assert_allclose(got.y[0], [0.5, -0.25, 1.0], rtol=1e-14)  # the ridge start, to rounding
    assert (_statuses(model, Xt, Y.shape[1]) == np.r_[1, np.zeros(len(Xt) - 1)]).all()

    Xd = np.concatenate([X, X[near[:1]]])  # a duplicate input among the first point's neighbours
    Yd = np.concatenate([Y, Y[near[:1]] + 1.0])
    bad = tgp.fit_local(Xd, Yd, tgp.TGPParams(gamma_x=0.6, gamma_y=2.0, lambda_x=0.0, lambda_y=1e-3),
                        n_neighbors=40, share="none")
    with pytest.raises(ValueError, match="K_X is not positive definite") as blocks:
        tgp.predict(bad, Xt, method="sm")
    with pytest.raises(ValueError, match="K_X is not positive definite") as points:
        _per_point(monkeypatch, bad, Xt, method="sm")
    assert str(blocks.value) == str(points.value)


def _statuses(model, Xt, dy, stop=0):
    """The kernel's status per point (0: predicted, 1: left to Python)."""
    opts = PredictOptions(method="sm", init=None, max_iter=100, tol=1e-6, optimizer="bfgs", trust_radius=1.0, ftol=0.0)
    blocks = local.knn_blocks(model, Xt, None, opts, {}, None)
    res = outcome(len(Xt), dy)
    knn_rows(blocks.local, Xt, neighbours(model, Xt), np.empty((len(Xt), dy)), blocks.spec,
             SOLVE_PLAN, np.full(1, stop, dtype=np.int64), res)
    return res.status


def test_a_stopped_call_predicts_nothing(data):
    X, Xt, Y = data
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=40, share="none")
    assert (_statuses(model, Xt, Y.shape[1], stop=1) == 1).all()
    assert (_statuses(model, Xt, Y.shape[1]) == 0).all()
