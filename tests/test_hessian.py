"""The exact Hessian of SMTGP's criterion (``fastsm._kernels.hessian``) and the optimiser it seeds."""

import numpy as np
import pytest
from scipy.linalg import cho_factor, cho_solve

from fastsm import config, tgp
from fastsm._kernels import objectives as obj
from fastsm._threads import thread_limits
from fastsm.tgp import prediction as api
from fastsm.tgp import views
from tests.conftest import problem
from tests.entries import hessian_rows, seed_inverse


def kernel_hessian(model, X, Y, held=None):
    """fastsm's Hessians of the beta-free SM criterion at rows ``Y`` (one evaluation, then the kernel);
    ``held``: the training point left out of each row's model (leave-one-out)."""
    m, dy = Y.shape
    n = model.n_train
    loo = None if held is None else views.leave_one_out(model)
    F, eta_x, _, _ = api.prepare_points(model, X, "sm", held, loo)
    plan = views.products_plan(model, "sm")
    out = obj.Evaluations(np.empty(m), np.empty((m, dy)), np.empty(m), np.empty(m), np.zeros(m, dtype=np.int64))
    H = np.empty((m, dy, dy))
    with thread_limits(None):
        prod = obj.Products(obj.workspace(m, n), plan)
        jprod = obj.Products(obj.workspace(m * dy, n), plan)
        rows = np.arange(m)
        Y = np.ascontiguousarray(Y)
        o = views.objective_view(model, "sm", 1.0, loo)
        held = np.full(m, -1, dtype=np.int64) if held is None else held
        obj.evaluate_batch(o, obj.Points(F, eta_x, held), rows, Y, out, prod, None)
        hessian_rows(o, rows, Y, out, prod.work, H, jprod, held)
    return H, out.hits


def rbf(A, B, gamma):
    return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))


def reference_hessian(model, x, y):
    """Plain NumPy/SciPy: dense Cholesky solves, the Jacobian and the kernel's second derivatives
    formed explicitly (docs/math.md §1–§3), for ``-(a log eta_y - log eta_xy) / (2 (1 - a))``."""
    p = model.params
    gx, gy = p.widths()
    a, Xtr, Z = p.alpha, model.X, model.Y
    n, dy = Z.shape
    KX = rbf(Xtr, Xtr, gx) + p.lambda_x * np.eye(n)
    KY = rbf(Z, Z, gy) + p.lambda_y * np.eye(n)
    KXY = (1 - a) * KX + a * KY
    kx = rbf(x[None], Xtr, gx)[0]
    ky = rbf(y[None], Z, gy)[0]
    kxy = (1 - a) * kx + a * ky
    cy, cxy = cho_factor(KY, lower=True), cho_factor(KXY, lower=True)
    u_y, u_xy = cho_solve(cy, ky), cho_solve(cxy, kxy)
    eta_y = 1 + p.lambda_y - ky @ u_y
    eta_xy = (1 - a) * (1 + p.lambda_x) + a * (1 + p.lambda_y) - kxy @ u_xy
    D = y[None, :] - Z
    J = -2 * gy * D * ky[:, None]
    hk = [ky[i] * (4 * gy**2 * np.outer(D[i], D[i]) - 2 * gy * np.eye(dy)) for i in range(n)]
    g_eta_y = -2 * J.T @ u_y
    g_eta_xy = -2 * a * J.T @ u_xy
    H_eta_y = -2 * (J.T @ cho_solve(cy, J) + sum(u_y[i] * hk[i] for i in range(n)))
    H_eta_xy = -2 * (a * a * J.T @ cho_solve(cxy, J) + a * sum(u_xy[i] * hk[i] for i in range(n)))
    H_log_y = H_eta_y / eta_y - np.outer(g_eta_y, g_eta_y) / eta_y**2
    H_log_xy = H_eta_xy / eta_xy - np.outer(g_eta_xy, g_eta_xy) / eta_xy**2
    return -(a * H_log_y - H_log_xy) / (2 * (1 - a))


def fd_hessian(model, x, y, h):
    """Central differences of the criterion's gradient (``tgp.objective``, beta = 1: the Rényi form)."""
    g = lambda v: tgp.objective(model, x[None], v[None], method="sm", return_gradient=True)[1][0]  # noqa: E731
    cols = [(g(y + h * e) - g(y - h * e)) / (2 * h) for e in np.eye(len(y))]
    H = np.array(cols)
    return (H + H.T) / 2


@pytest.mark.parametrize("dy", [1, 3, 8])
@pytest.mark.parametrize("alpha", [0.2, 0.7])
def test_hessian_matches_the_dense_reference_and_finite_differences(dy, alpha):
    Xtr, Xte, Ytr, Yte, p = problem(dy, n_train=50, n_test=5, lam=1e-2, alpha=alpha, beta=1.0)
    model = tgp.fit(Xtr, Ytr, p)
    rng = np.random.default_rng(dy)
    Y = Yte + 0.1 * model.y_spread * rng.standard_normal(Yte.shape)
    H, hits = kernel_hessian(model, Xte, Y)
    assert not hits.any()
    for i in range(len(Xte)):
        ref = reference_hessian(model, Xte[i], Y[i])
        scale = np.abs(ref).max()
        # measured: at most 1.3e-12 relative to the largest entry (dense solves vs factor products)
        assert np.abs(H[i] - ref).max() <= 1e-9 * scale
        fd = fd_hessian(model, Xte[i], Y[i], 1e-4 * model.y_spread)
        # measured: at most 4.7e-7 (central differences, truncation O(h^2))
        assert np.abs(H[i] - fd).max() <= 1e-5 * scale
        assert np.allclose(H[i], H[i].T, rtol=0, atol=0)


def test_a_points_hessian_does_not_depend_on_the_other_points():
    Xtr, Xte, Ytr, Yte, p = problem(8, n_train=80, n_test=9, lam=1e-2, alpha=0.6, beta=1.0)
    model = tgp.fit(Xtr, Ytr, p)
    H_all, _ = kernel_hessian(model, Xte, Yte)
    for i in (0, 4, 8):
        H_one, _ = kernel_hessian(model, Xte[i:i + 1], Yte[i:i + 1])
        assert np.array_equal(H_one[0], H_all[i])


def bench_like(dy, n_train=400, n_test=60):
    from fastsm import datasets

    Xtr, Xte, Ytr, _ = datasets.random_structured(0, n_train=n_train, n_test=n_test, dx=8, dy=dy)
    params = tgp.TGPParams(gamma_x=1.0 / 8, gamma_y=1.0 / dy, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)
    return tgp.fit(Xtr, Ytr, params), Xte


def test_exact_curvature_converges_where_bfgs_alone_runs_out_of_iterations(monkeypatch):
    model, X = bench_like(16)
    seeded = tgp.predict(model, X, method="sm", max_iter=config.DEFAULT_MAX_ITER)  # a flat 50, as measured
    monkeypatch.setattr(config, "SM_HESSIAN_MAX_DY", 0)
    plain = tgp.predict(model, X, method="sm", max_iter=config.DEFAULT_MAX_ITER)
    tight = tgp.predict(model, X, method="sm", init=plain.y, tol=1e-13, max_iter=2000)
    # measured on this problem: 59 of 60 converged seeded, 50 of 60 with BFGS alone
    assert seeded.converged.sum() >= 58
    assert plain.converged.sum() <= 55
    # fewer evaluations (Hessians counted at their cost, dy/2 evaluations each): 26.2 vs 36.9 per point
    assert seeded.n_eval.mean() < 0.85 * plain.n_eval.mean()
    # the same minima: every converged seeded prediction within 1e-10 relative of a tight run's (measured 5e-14)
    c = seeded.converged
    f = tight.objective[c]
    assert np.all(seeded.criterion[c] <= tight.criterion[c] + 1e-10 * np.abs(tight.criterion[c]))
    assert np.all(np.abs(seeded.objective[c] - f) <= 1e-10 * np.abs(f))


def test_no_exact_curvature_above_its_output_limit(monkeypatch):
    model, X = bench_like(4, n_train=150, n_test=20)
    default = tgp.predict(model, X, method="sm")
    monkeypatch.setattr(config, "SM_HESSIAN_MAX_DY", 3)
    plain = tgp.predict(model, X, method="sm")
    assert not np.array_equal(default.n_eval, plain.n_eval)  # the Hessian changed the paths
    monkeypatch.setattr(config, "SM_HESSIAN_MAX_DY", 0)
    assert np.array_equal(tgp.predict(model, X, method="sm").y, plain.y)


def test_leave_one_out_hessian_is_the_refit_models():
    """The projected Jacobian products: a left-out point's Hessian equals the N-1 model's."""
    Xtr, Xte, Ytr, Yte, p = problem(3, n_train=40, n_test=1, lam=1e-2, alpha=0.6, beta=1.0)
    model = tgp.fit(Xtr, Ytr, p)
    for i in (0, 17, 39):
        keep = np.arange(len(Xtr)) != i
        ref = reference_hessian(tgp.fit(Xtr[keep], Ytr[keep], p), Xtr[i], Ytr[i] + 0.05)
        H, _ = kernel_hessian(model, Xtr[i:i + 1], Ytr[i:i + 1] + 0.05, held=np.array([i]))
        # measured: at most 8.3e-14 relative to the largest entry
        assert np.abs(H[0] - ref).max() <= 1e-9 * np.abs(ref).max()


def shifted_inverse(H):
    """NumPy: ``(H + tau I)^-1`` with the least ``tau`` of ``max(beta, beta - min H_ii) 2^k`` that makes
    ``H + tau I`` positive definite (``beta = CURVATURE_SHIFT ||H||_F``), and ``tau``."""
    beta = config.CURVATURE_SHIFT * np.linalg.norm(H)
    tau = max(beta, beta - np.diag(H).min())
    while np.linalg.eigvalsh(H + tau * np.eye(H.shape[0])).min() <= 0.0:
        tau *= 2.0
    return np.linalg.inv(H + tau * np.eye(H.shape[0])), tau


def indefinite_matrix(rng, d):
    """A symmetric ``d × d`` matrix with eigenvalues -3, -1e-6, 0 and the rest in (2e-5, 4]."""
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    lam = np.concatenate([[-3.0, -1e-6, 0.0], np.geomspace(2e-5, 4.0, d - 3)])
    return Q @ np.diag(lam) @ Q.T


def test_seed_inverse_takes_a_definite_hessian_at_once_and_an_indefinite_one_modified_at_the_last_request():
    """The curvature hook against NumPy, for a Hessian cheaper than ``CURVATURE_SHIFT_COST`` evaluations:
    a positive definite Hessian's inverse at any request; an indefinite one nothing until the schedule's
    last request, then ``(H + tau I)^-1`` with the least ``tau`` of ``max(beta, beta - min H_ii) 2^k`` that
    makes it positive definite; a non-finite one never."""
    first0, every, last = config.CURVATURE_SCHEDULE
    rng = np.random.default_rng(2)
    d = 7
    assert (d + 1) // 2 < config.CURVATURE_SHIFT_COST
    first = max(first0, (d + 1) // 2)
    final = first + ((last - first0) // every) * every
    A = rng.standard_normal((d, d))
    pd = A @ A.T + 0.1 * np.eye(d)
    H, seeded = seed_inverse(pd, first)
    assert seeded
    np.testing.assert_allclose(H, np.linalg.inv(pd), rtol=0, atol=1e-12 * np.abs(np.linalg.inv(pd)).max())
    indefinite = indefinite_matrix(rng, d)
    for k in range(first, final, every):
        H, seeded = seed_inverse(indefinite, k)
        assert not seeded and not H.any()
    H, seeded = seed_inverse(indefinite, final)
    assert seeded
    ref, tau = shifted_inverse(indefinite)
    assert tau > 3.0  # the shift covers the most negative eigenvalue, -3
    np.testing.assert_allclose(H, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    assert np.all(np.linalg.eigvalsh(0.5 * (H + H.T)) > 0)
    bad = pd.copy()
    bad[2, 3] = np.nan
    H, seeded = seed_inverse(bad, final)
    assert not seeded and not H.any()


@pytest.mark.parametrize("d", [15, 16, 32])
def test_seed_inverse_shifts_an_expensive_indefinite_hessian_at_its_first_request(d):
    """A Hessian of at least ``CURVATURE_SHIFT_COST`` evaluations (``(d + 1) // 2``) is never thrown away:
    an indefinite one seeds BFGS at the first request, shifted as at the last (NumPy reference)."""
    assert (d + 1) // 2 >= config.CURVATURE_SHIFT_COST
    first = max(config.CURVATURE_SCHEDULE[0], (d + 1) // 2)
    indefinite = indefinite_matrix(np.random.default_rng(d), d)
    H, seeded = seed_inverse(indefinite, first)
    assert seeded
    ref, tau = shifted_inverse(indefinite)
    assert tau > 3.0
    np.testing.assert_allclose(H, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    assert np.all(np.linalg.eigvalsh(0.5 * (H + H.T)) > 0)
