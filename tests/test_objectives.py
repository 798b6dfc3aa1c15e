"""The objectives (:mod:`fastsm._kernels.objectives`, through :func:`fastsm.tgp.objective`): every gradient
against finite differences, every O(N^2) value against dense (N+1)x(N+1) brute force (the core's
acceptance points 1 and 2)."""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from fastsm import tgp
from fastsm._kernels.rank_one import bordered_inverse
from tests.conftest import problem
from tests.naive import dense_kl_xy, dense_kltgp, dense_log_rho2, dense_parts, dense_sm, fd_gradient

CASES = [("kl", 0.7, 1.5), ("ikl", 0.7, 1.5)] + [
    ("sm", a, b) for a in (0.1, 0.5, 0.9) for b in (0.5, 0.99, 1.0, 1.5)
] + [("sm_cubic", 0.6, 1.5), ("sm_cubic", 0.3, 1.0)]


def max_rel_error(model, X, Y, method, h):
    worst = 0.0
    _, G = tgp.objective(model, X, Y, method=method, return_gradient=True)
    for i in range(len(X)):
        f = lambda y, i=i: tgp.objective(model, X[i : i + 1], y[None], method=method)[0]  # noqa: E731
        fd = fd_gradient(f, Y[i].copy(), h)
        worst = max(worst, np.linalg.norm(fd - G[i]) / np.linalg.norm(G[i]))
    return worst


@pytest.mark.parametrize("dy", [1, 3, 16])
@pytest.mark.parametrize(("method", "alpha", "beta"), CASES)
def test_gradient_matches_finite_differences(dy, method, alpha, beta):
    if method == "sm_cubic" and dy == 16:
        pytest.skip("cubic reference: dy=1 and 3 suffice")
    Xtr, Xte, Ytr, Yte, p = problem(dy, n_train=40, n_test=4, lam=1e-2, alpha=alpha, beta=beta)
    p = tgp.TGPParams(gamma_x=p.gamma_x, gamma_y=p.gamma_y, lambda_x=p.lambda_x, lambda_y=p.lambda_y,
                      alpha=alpha, beta=beta)
    model = tgp.fit(Xtr, Ytr, p)
    rng = np.random.default_rng(dy)
    # evaluate off the training outputs, at realistic distances
    Y = Yte + 0.1 * model.y_spread * rng.standard_normal(Yte.shape)
    err = max_rel_error(model, Xte, Y, method, h=3e-3 * model.y_spread)
    assert err <= 1e-5, err


def pairs_of_y(Yte, spread, rng, k=4):
    return [(Yte[i] + 0.2 * spread * rng.standard_normal(Yte.shape[1]),
             Yte[i] + 0.2 * spread * rng.standard_normal(Yte.shape[1])) for i in range(k)]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.mark.parametrize("dy", [1, 3])
def test_kl_differences_match_dense(dy, rng):
    Xtr, Xte, Ytr, Yte, p = problem(dy, lam=1e-2)
    m = tgp.fit(Xtr, Ytr, p)
    for i, (y1, y2) in enumerate(pairs_of_y(Yte, m.y_spread, rng)):
        f1, f2 = tgp.objective(m, Xte[[i, i]], np.stack([y1, y2]), method="kl")
        d1, d2 = dense_kltgp(Xtr, Ytr, Xte[i], y1, p), dense_kltgp(Xtr, Ytr, Xte[i], y2, p)
        assert rel(f1 - f2, d1 - d2) < 1e-8


@pytest.mark.parametrize("dy", [1, 3])
@pytest.mark.parametrize(("alpha", "beta"), [(0.3, 1.0), (0.7, 1.0), (0.9, 1.5), (0.6, 0.5), (0.5, 0.99)])
def test_sm_matches_dense_lemma_3_1(dy, alpha, beta, rng):
    Xtr, Xte, Ytr, Yte, p = problem(dy, lam=1e-2, alpha=alpha, beta=beta)
    m = tgp.fit(Xtr, Ytr, p)
    for i, (y1, y2) in enumerate(pairs_of_y(Yte, m.y_spread, rng)):
        f1, f2 = tgp.objective(m, Xte[[i, i]], np.stack([y1, y2]), method="sm")
        d1, d2 = dense_sm(Xtr, Ytr, Xte[i], y1, p), dense_sm(Xtr, Ytr, Xte[i], y2, p)
        if beta == 1.0:
            assert rel(f1 - f2, d1 - d2) < 1e-8
        else:
            # L' = exp(c s)/(b-1) and D' = (exp(c log rho^2) - 1)/(b-1) with log rho^2 = s + const:
            # compare the exact monotone transform log((b-1) D' + 1) = c log rho^2, whose
            # differences the dense form keeps to full precision (D' itself can be 2 - 1e-13)
            c = (1 - beta) / (2 * (1 - alpha))
            lr1 = dense_log_rho2(Xtr, Ytr, Xte[i], y1, alpha, p)
            lr2 = dense_log_rho2(Xtr, Ytr, Xte[i], y2, alpha, p)
            ours = np.log((beta - 1) * f1) - np.log((beta - 1) * f2)
            assert rel(ours, c * (lr1 - lr2)) < 1e-8
        # the cubic (Nielsen) form gives the full divergence itself
        c1, c2 = tgp.objective(m, Xte[[i, i]], np.stack([y1, y2]), method="sm_cubic")
        assert rel(c1, d1) < 1e-8 and rel(c2, d2) < 1e-8


def test_certainty_matches_dense(rng):
    Xtr, Xte, Ytr, Yte, p = problem(3, lam=1e-2, alpha=0.4)
    m = tgp.fit(Xtr, Ytr, p)
    lc = tgp.certainty(m, Xte, Yte)
    for i in range(len(Xte)):
        # log rho^2 = log(|K_X|^(1-a)|K_Y|^a/|K_XY|) + log phi   (Lemma 4.1)
        agree = (1 - p.alpha) * m.logdet_x + p.alpha * m.logdet_y - m.logdet_xy
        assert abs(dense_log_rho2(Xtr, Ytr, Xte[i], Yte[i], p.alpha, p) - (agree + lc[i])) < 1e-8
    # Lemma 4.1: phi <= |K_XY| / (|K_X|^(1-a) |K_Y|^a)
    assert np.all(lc <= -agree + 1e-9)


def test_ikl_building_blocks_match_dense_bordered_inverse(rng):
    Xtr, Xte, Ytr, Yte, p = problem(3, lam=1e-2)
    m = tgp.fit(Xtr, Ytr, p)
    for i in range(3):
        _, Sq = dense_parts(Xtr, Ytr, Xte[i], Yte[i], p)
        Sq_inv = np.linalg.inv(Sq)
        ky = Sq[:-1, -1]
        big, eta_y = bordered_inverse(m.Ky_inv, ky, 1 + p.lambda_y)
        np.testing.assert_allclose(big, Sq_inv, rtol=1e-7, atol=1e-7 * np.abs(Sq_inv).max())
        assert rel(eta_y, 1 / Sq_inv[-1, -1]) < 1e-9
        u_y = m.Ky_inv @ ky
        np.testing.assert_allclose(-u_y / eta_y, Sq_inv[:-1, -1], rtol=1e-7, atol=1e-9 * np.abs(Sq_inv).max())


def _dense_argmin_1d(f, lo, hi):
    ys = np.linspace(lo, hi, 401)
    vals = [f(np.array([y])) for y in ys]
    j = int(np.argmin(vals))
    r = minimize_scalar(lambda t: f(np.array([t])), bounds=(ys[max(j - 1, 0)], ys[min(j + 1, 400)]),
                        method="bounded", options={"xatol": 1e-10})
    return r.x


def test_ikl_argmin_near_dense_kl_x_to_y():
    """IKL (Eq. 7) approximates argmin KL(p_X||p_Y); report how far apart they are."""
    Xtr, Xte, Ytr, Yte, p = problem(1, n_train=60, n_test=6, lam=1e-2)
    m = tgp.fit(Xtr, Ytr, p)
    dists = []
    for i in range(len(Xte)):
        y_dense = _dense_argmin_1d(lambda y, i=i: dense_kl_xy(Xtr, Ytr, Xte[i], y, p), -0.2, 1.2)
        pr = tgp.predict(m, Xte[i : i + 1], method="ikl", init=np.array([[y_dense]]), max_iter=200, tol=1e-12)
        dists.append(abs(pr.y[0, 0] - y_dense))
    print(f"IKL argmin vs dense KL(p_X||p_Y) argmin: max |dy| = {max(dists):.3g}, "
          f"median = {np.median(dists):.3g} (output range 1)")
    assert max(dists) < 0.05


def test_quadratic_and_cubic_forms_share_the_argmin():
    Xtr, Xte, Ytr, Yte, p = problem(3, n_train=40, n_test=5, lam=1e-2, alpha=0.6, beta=1.5)
    m = tgp.fit(Xtr, Ytr, p)
    Y0 = tgp.predict(m, Xte, method="kl").y
    kw = dict(init=Y0, max_iter=300, tol=1e-12, ftol=0.0)
    q = tgp.predict(m, Xte, method="sm", **kw)
    c = tgp.predict(m, Xte, method="sm_cubic", **kw)
    np.testing.assert_allclose(q.y, c.y, atol=1e-6)


def test_argmin_does_not_depend_on_beta():
    """[SM] Lemma 4.2: beta changes the path, not the minimiser."""
    Xtr, Xte, Ytr, Yte, p = problem(3, n_train=60, n_test=10, lam=1e-2, alpha=0.6)
    Y0 = None
    preds = []
    for beta in (0.5, 0.99, 1.0, 1.5, 3.0):
        m = tgp.fit(Xtr, Ytr, tgp.TGPParams(gamma_x=p.gamma_x, gamma_y=p.gamma_y, lambda_x=p.lambda_x,
                                             lambda_y=p.lambda_y, alpha=0.6, beta=beta))
        if Y0 is None:
            Y0 = tgp.predict(m, Xte, method="kl").y
        preds.append(tgp.predict(m, Xte, method="sm", init=Y0, max_iter=500, tol=1e-12, trust_radius=0.05).y)
    for y in preds[1:]:
        np.testing.assert_allclose(y, preds[0], atol=1e-6)


def test_alpha_limits_point_to_the_right_kl_direction():
    """docs/math.md §3: a -> 1 gives argmin KL(p_X||p_Y); a -> 0 gives argmin KL(p_Y||p_X) (KLTGP)."""
    Xtr, Xte, Ytr, Yte, p = problem(1, n_train=50, n_test=6, lam=3e-2)
    lo, hi = -0.2, 1.2

    def sm_argmin(a, i):
        q = tgp.TGPParams(gamma_x=p.gamma_x, gamma_y=p.gamma_y, lambda_x=p.lambda_x, lambda_y=p.lambda_y,
                          alpha=a, beta=1.0)
        return _dense_argmin_1d(lambda y: dense_sm(Xtr, Ytr, Xte[i], y, q), lo, hi)

    for i in range(len(Xte)):
        kl_xy = _dense_argmin_1d(lambda y, i=i: dense_kl_xy(Xtr, Ytr, Xte[i], y, p), lo, hi)
        kl_yx = _dense_argmin_1d(lambda y, i=i: dense_kltgp(Xtr, Ytr, Xte[i], y, p), lo, hi)
        if abs(kl_xy - kl_yx) < 1e-3:
            continue  # both directions agree here: nothing to tell apart
        near1, near0 = sm_argmin(0.9999, i), sm_argmin(1e-4, i)
        assert abs(near1 - kl_xy) < abs(near1 - kl_yx)
        assert abs(near0 - kl_yx) < abs(near0 - kl_xy)
