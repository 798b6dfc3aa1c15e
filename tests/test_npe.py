"""GMM-NPE pieces against independent references (issue 3: acceptance 3 and 6)."""

import time
import warnings

import numpy as np
import pytest

from fastsm import divergences, gmm
from fastsm._kernels.maxdet import maxdet_weights
from fastsm.gmm.npe import _emd, vectorize


def rand_spd(rng, n, scale=1.0):
    A = rng.normal(size=(n, n))
    return scale * (A @ A.T / n + 0.2 * np.eye(n))


def maxdet_instance(rng, n, m, lam):
    Pi = rand_spd(rng, n)
    Ps = [Pi + rand_spd(rng, n, 0.5 * rng.random()) for _ in range(m)]
    ev, V = np.linalg.eigh(Pi)
    Pm = V @ np.diag(ev**-0.5) @ V.T
    Q = np.stack([Pm @ P @ Pm for P in Ps])
    return Q, np.trace(Q, axis1=1, axis2=2) + lam


@pytest.mark.parametrize("seed", range(6))
def test_maxdet_matches_cvxpy_clarabel(seed):
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(3, 7)), int(rng.integers(4, 16))
    Q, c = maxdet_instance(rng, n, m, lam=float(rng.choice([0.0, 0.1, 1.0])))
    w, _, ok = maxdet_weights(Q, c, 1e-10, 200)
    assert ok
    x = cp.Variable(m, nonneg=True)
    G = sum(x[j] * Q[j] for j in range(m))
    prob = cp.Problem(cp.Minimize(c @ x - cp.log_det(G)), [np.eye(n) - G >> 0])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert np.abs(w - x.value).max() < 1e-5
    # feasibility and optimality of ours on its own terms
    Gw = np.einsum("j,jab->ab", w, Q)
    assert np.linalg.eigvalsh(np.eye(n) - Gw).min() > -1e-9 and w.min() >= 0
    assert c @ w - np.linalg.slogdet(Gw)[1] <= prob.value + 1e-7


def test_embedding_has_unit_determinant_and_recovers_parameters(rng):
    mu = rng.normal(size=(4, 3))
    S = np.stack([rand_spd(rng, 3) for _ in range(4)])
    P = gmm.embed_components(mu, S)
    np.testing.assert_allclose(np.linalg.det(P), 1.0, rtol=1e-10)
    scale = P[:, 3, 3]  # = |S|^(-1/(d+1))
    np.testing.assert_allclose(P[:, :3, 3] / scale[:, None], mu, rtol=1e-12)
    np.testing.assert_allclose(P[:, :3, :3] / scale[:, None, None] - np.einsum("ki,kj->kij", mu, mu), S,
                               rtol=1e-10, atol=1e-12)
    # vectorisation is an isometry for the Frobenius norm
    v = vectorize(P)
    assert v.shape == (4, 10)
    np.testing.assert_allclose(np.linalg.norm(v[0] - v[1]), np.linalg.norm(P[0] - P[1]), rtol=1e-12)


def test_d1_d2_follow_eq16_eq17(rng):
    V, U = rng.normal(size=(3, 2)), rng.normal(size=(4, 2))
    a, b = np.array([0.2, 0.3, 0.5]), np.array([0.1, 0.2, 0.3, 0.4])
    d = np.array([[np.linalg.norm(v - u) for u in U] for v in V])
    p = [min(b[j] * d[i, j] for j in range(4)) for i in range(3)]
    q = [min(a[i] * d[i, j] for i in range(3)) for j in range(4)]
    d1 = 0.5 * (max(a[i] * p[i] for i in range(3)) + max(b[j] * q[j] for j in range(4)))
    d2 = 0.5 * (max(a[i] * sum(b[j] * d[i, j] for j in range(4)) for i in range(3))
                + max(b[j] * sum(a[i] * d[i, j] for i in range(3)) for j in range(4)))
    from fastsm.gmm.npe import _measure

    assert abs(_measure(V, a, U, b, "d1") - d1) < 1e-14
    assert abs(_measure(V, a, U, b, "d2") - d2) < 1e-14


def test_emd_pot_and_linprog_agree(rng, monkeypatch):
    d = rng.random((3, 5))
    a, b = np.array([0.2, 0.3, 0.5]), np.full(5, 0.2)
    with_pot = _emd(a, b, d)
    import builtins

    real_import = builtins.__import__

    def no_pot(name, *args, **kw):
        if name == "ot":
            raise ImportError("simulated: POT not installed")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pot)
    assert abs(_emd(a, b, d) - with_pot) < 1e-10
    # identical clouds cost nothing; a point mass moves by its distance
    assert abs(_emd(a, a, np.abs(np.subtract.outer(np.arange(3.0), np.arange(3.0))))) < 1e-12


def test_fit_transform_distance(rng):
    d = 3
    mixes = [gmm.GaussianMixture(np.ones(2) / 2, rng.normal(size=(2, d)), np.stack([rand_spd(rng, d)] * 2))
             for _ in range(15)]
    emb = gmm.fit_npe(mixes, 2, n_neighbors=4)
    assert emb.projection.shape == (2, (d + 1) * (d + 2) // 2) and emb.converged.all()
    assert np.all(emb.weights >= 0) and np.all(np.diag(emb.weights) == 0)
    assert (emb.weights > 1e-6).sum(axis=1).max() <= 4
    V = gmm.transform(emb, mixes[0])
    assert V.shape == (2, 2)
    for m in ("d1", "d2", "emd"):
        if m == "d2":
            # [GMM] §4.2: no self-identity — sum_j b_j ||v_i - u_j|| includes the cross distances
            assert gmm.npe_distance(emb, mixes[0], mixes[0], m) > 0
        else:
            assert gmm.npe_distance(emb, mixes[0], mixes[0], m) == pytest.approx(0.0, abs=1e-12)
        P = gmm.npe_pairwise(emb, mixes[:4], measure=m)
        np.testing.assert_allclose(P, P.T, atol=1e-12)  # D1, D2 and the EMD are symmetric
        assert P[0, 1] == pytest.approx(gmm.npe_distance(emb, mixes[0], mixes[1], m), abs=1e-12)
    normed = gmm.fit_npe(mixes, 2, n_neighbors=4, normalize_weights=True)
    np.testing.assert_allclose(normed.weights.sum(axis=1), 1.0)


def test_npe_bad_input(rng):
    f = gmm.GaussianMixture([1.0], [[0.0, 0.0]], np.eye(2)[None])
    g = gmm.GaussianMixture([1.0], [[0.0, 0.0, 0.0]], np.eye(3)[None])
    with pytest.raises(ValueError, match="same dimension"):
        gmm.fit_npe([f, g])
    with pytest.raises(TypeError, match="GaussianMixture"):
        gmm.fit_npe(f)
    emb = gmm.fit_npe([f, gmm.GaussianMixture([1.0], [[1.0, 0.0]], 2 * np.eye(2)[None])], 1, n_neighbors=1)
    with pytest.raises(ValueError, match="dimension 3"):
        gmm.transform(emb, g)
    with pytest.raises(ValueError, match="measure"):
        gmm.npe_distance(emb, f, f, "kl")
    with pytest.raises(ValueError, match="n_components"):
        gmm.fit_npe([f, f], 99)
    with pytest.raises(ValueError, match="projection"):
        gmm.fit_npe([f, f], 1, projection="pca")
    with pytest.raises(ValueError, match="tol"):
        gmm.fit_npe([f, f], 1, tol=0.0)


def test_neighbour_kl_matches_divergences(rng):
    from fastsm.gmm.npe import _neighbour_kl

    mu = rng.normal(size=(6, 3))
    S = np.stack([rand_spd(rng, 3) for _ in range(6)])
    P = gmm.embed_components(mu, S)
    z = np.zeros((6, 4))
    ref = divergences.kl(z[:, None], P[:, None], z[None], P[None])
    np.testing.assert_allclose(_neighbour_kl(P), ref, rtol=1e-10, atol=1e-12)


def _reconstruction_ratio(emb, mixes):
    """NPE's objective for each projected direction: sum_i ||z_i - sum_j W_ij z_j||^2 / sum_i ||z_i||^2."""
    Z = np.concatenate([gmm.transform(emb, m) for m in mixes])  # (M, l), rows in fit_npe's order
    R = Z - emb.weights @ Z
    return (R**2).sum(axis=0) / (Z**2).sum(axis=0)


def test_paper_eq11_projection_maximises_the_reconstruction_error(rng):
    """[GMM] Eq. 11 ((I-W)(I-W)^T, largest eigenvalues) picks the directions NPE should avoid (docs/math.md §7)."""
    d = 3
    mixes = [gmm.GaussianMixture(np.ones(2) / 2, rng.normal(size=(2, d)), np.stack([rand_spd(rng, d)] * 2))
             for _ in range(15)]
    emb = gmm.fit_npe(mixes, 2, n_neighbors=4)
    ours = _reconstruction_ratio(emb, mixes)
    paper = _reconstruction_ratio(gmm.fit_npe(mixes, 2, n_neighbors=4, projection="paper"), mixes)
    # NPE's directions attain the two smallest generalised eigenvalues: the least reconstruction error possible
    np.testing.assert_allclose(ours, emb.eigenvalues[:2], rtol=1e-6)
    # measured: ours [0.50, 0.64], the paper's [1.08, 1.02]
    assert paper.min() > 1.3 * ours.max(), (ours, paper)


@pytest.mark.parametrize("max_newton", [1, 2, 3, 200])
def test_maxdet_reports_converged_only_with_a_certified_gap(max_newton):
    """#53 item 4: the gap bound ``(m + n) / t`` holds on the central path only.  Before, a centering cut
    short (here by ``max_newton``; in the issue by the line search) was reported converged: with
    ``max_newton`` = 1, 2, 3 objectives 1.7, 0.14, 7e-3 above Clarabel's optimum, "converged".  Now
    ``converged`` comes from a dual feasible point's gap: within ``tol`` of the optimum when it says so."""
    cp = pytest.importorskip("cvxpy")
    rng = np.random.default_rng(6)
    Q, c = maxdet_instance(rng, 7, 40, lam=0.1)
    x = cp.Variable(len(c), nonneg=True)
    G = sum(x[j] * Q[j] for j in range(len(c)))
    prob = cp.Problem(cp.Minimize(c @ x - cp.log_det((G + G.T) / 2)), [np.eye(Q.shape[1]) - G >> 0])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    tol = 1e-9
    w, _, ok = maxdet_weights(Q, c, tol, max_newton)
    excess = c @ w - np.linalg.slogdet(np.einsum("j,jab->ab", w, Q))[1] - prob.value
    if max_newton == 200:
        assert ok
    if ok:
        assert excess <= tol + 1e-10, excess
    else:
        assert excess > tol, excess  # honest: not at the optimum


def test_fit_npe_rejects_overflowing_components_quickly():
    """Regression test of #6, item 12."""
    mix = [gmm.GaussianMixture([0.5, 0.5], [[1e200, 0.0], [0.0, 1.0]], [np.eye(2), np.eye(2)]),
           gmm.GaussianMixture([1.0], [[0.0, 0.0]], [np.eye(2)])]
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="overflows"):
        gmm.fit_npe(mix)
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize("kw", [dict(threshold=0.5), dict(n_neighbors=10), dict(n_neighbors=79)])
def test_maxdet_weights_converge_with_many_neighbours(mixtures_d7, kw):
    """Before: 14, 5 and 10 of the 80 problems stopped unconverged (the Newton Hessian's Cholesky failed near
    the optimum), silently.  Measured after against Clarabel (cvxpy, gaps 1e-12) on rows 0, 5, 22, 23, 31,
    50 with 79 neighbours: objectives within 7.5e-11.

    Regression test of #30, item 6.
    """
    from fastsm import gmm

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        emb = gmm.fit_npe(mixtures_d7, 2, **kw)
    assert emb.converged.all()


def test_unconverged_maxdet_problems_warn_once_with_the_count(mixtures_d7):
    """Regression test of #30, item 6."""
    from fastsm import gmm

    with pytest.warns(RuntimeWarning, match=r"of 80 representatives did not converge") as record:
        emb = gmm.fit_npe(mixtures_d7, 2, n_neighbors=5, tol=1e-300)  # a gap no float64 run can close
    assert len(record) == 1 and f"{(~emb.converged).sum()} of 80" in str(record[0].message)
    assert record[0].filename == __file__


def test_maxdet_weights_that_used_to_fail_match_clarabel(mixtures_d7):
    """Rows 22 and 23 of the 79-neighbour problems stopped unconverged before; measured after: objectives
    7.3e-11 and 7.5e-11 above Clarabel's at 1e-12 tolerances (1e-9 allowed).

    Regression test of #30, item 5.
    """
    cp = pytest.importorskip("cvxpy")
    from fastsm._kernels.maxdet import maxdet_weights
    from fastsm.gmm.npe import _neighbour_kl, embed_components

    means = np.concatenate([m.means for m in mixtures_d7])
    covs = np.concatenate([m.covariances for m in mixtures_d7])
    P = embed_components(means, covs)
    D = _neighbour_kl(P)
    np.fill_diagonal(D, np.inf)
    ev, V = np.linalg.eigh(P)
    Pm = np.einsum("kij,kj,klj->kil", V, ev**-0.5, V)
    for i in (22, 23):
        nb = np.argsort(D[i])[:79]
        Q = np.ascontiguousarray(Pm[i] @ P[nb] @ Pm[i])
        c = np.trace(Q, axis1=1, axis2=2) + 0.1
        w, _, ok = maxdet_weights(Q, c, 1e-9, 200)
        assert ok
        x = cp.Variable(len(c), nonneg=True)
        G = sum(x[j] * Q[j] for j in range(len(c)))
        G = (G + G.T) / 2
        cp.Problem(cp.Minimize(c @ x - cp.log_det(G)), [np.eye(Q.shape[1]) - G >> 0]).solve(
            solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        ours, ref = (c @ v - np.linalg.slogdet(np.einsum("j,jab->ab", v, Q))[1] for v in (w, np.maximum(x.value, 0.0)))
        assert ours - ref < 1e-9
