"""KNN-local TGP (fastsm.tgp.fit_local): K = N equals the global model; sharing; bad input."""

import numpy as np
import pytest

from fastsm import datasets, tgp
from fastsm.tgp.local_model import LOCAL_METHODS, local_model
from fastsm.tgp.views import use_row_products

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)


@pytest.fixture(scope="module")
def data():
    X, Xt, Y, Yt = datasets.random_structured(0, n_train=150, n_test=30, dx=2, dy=3)
    return X, Xt, Y, Yt


@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_k_equal_n_is_the_global_model(data, method):
    X, Xt, Y, _ = data
    glob = tgp.fit(X, Y, PARAMS)
    g = tgp.predict(glob, Xt, method=method)
    loc = tgp.predict(tgp.fit_local(X, Y, PARAMS, n_neighbors=len(X)), Xt, method=method)
    # the same factorisation; the local model multiplies by row loops (KLTGP, SMTGP: substitutions with
    # L), the global one by DTRMM tiles with W = L^-1: measured 1.6e-13 apart (y) and 1e-13 (objective,
    # relative); a converged point is fixed to tol
    np.testing.assert_allclose(loc.y, g.y, rtol=0, atol=1e-9)
    np.testing.assert_allclose(loc.objective, g.objective, rtol=1e-9)
    np.testing.assert_allclose(loc.log_certainty, g.log_certainty, rtol=1e-9)
    # the global model built and multiplying as the local one (for KLTGP and SMTGP in Cholesky form,
    # its products substitutions): bitwise the same
    same = tgp.predict(local_model(glob.X, glob.Y, glob.params, LOCAL_METHODS[method]), Xt, method=method)
    for name in ("y", "objective", "log_certainty", "n_eval"):
        np.testing.assert_array_equal(getattr(loc, name), getattr(same, name), err_msg=name)


@pytest.mark.determinism
def test_local_model_equals_a_fit_on_the_neighbours(data):
    from scipy.spatial import cKDTree

    X, Xt, Y, _ = data
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=40, share="none")
    loc = tgp.predict(model, Xt[:6], method="sm")
    _, idx = cKDTree(X).query(Xt[:6], k=40)
    for i in range(6):
        nb = np.sort(idx[i])
        alone = local_model(X[nb], Y[nb], model.params, ("kl", "sm"))  # a fit as local models fit
        ref = tgp.predict(alone, Xt[i:i + 1], method="sm")
        np.testing.assert_array_equal(loc.y[i], ref.y[0])


@pytest.mark.determinism
def test_exact_sharing_changes_nothing_and_threads_change_nothing(data):
    X, Xt, Y, _ = data
    Xq = np.vstack([Xt, Xt[:10] + 1e-9])  # near-duplicates share their neighbour sets
    a = tgp.predict(tgp.fit_local(X, Y, PARAMS, n_neighbors=30, share="none"), Xq, threads=1)
    b = tgp.predict(tgp.fit_local(X, Y, PARAMS, n_neighbors=30, share="exact"), Xq, threads=2)
    np.testing.assert_array_equal(a.y, b.y)
    from fastsm.tgp.neighbours import neighbour_groups

    assert len(neighbour_groups(tgp.fit_local(X, Y, PARAMS, n_neighbors=30), Xq)) <= len(Xt)


def test_cluster_sharing_contains_each_points_neighbours(data):
    from fastsm.tgp.neighbours import neighbour_groups

    X, Xt, Y, Yt = data
    m = tgp.fit_local(X, Y, PARAMS, n_neighbors=30, share="cluster", group_size=8)
    groups = neighbour_groups(m, Xt)
    assert sorted(np.concatenate([r for r, _ in groups]).tolist()) == list(range(len(Xt)))
    _, idx = m.tree.query(Xt, k=30)
    for rows, members in groups:
        for r in rows:
            assert set(idx[r]) <= set(members)
    p = tgp.predict(m, Xt)
    g = tgp.predict(tgp.fit(X, Y, PARAMS), Xt)
    assert np.abs(p.y - Yt).mean() < 2 * np.abs(g.y - Yt).mean()


def test_progress_callback(data):
    X, Xt, Y, _ = data
    calls = []
    tgp.predict(tgp.fit_local(X, Y, PARAMS, n_neighbors=30), Xt, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (len(Xt), len(Xt))
    calls.clear()
    tgp.predict(tgp.fit(X, Y, PARAMS), Xt, batch_size=8, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(8, 30), (16, 30), (24, 30), (30, 30)]


def test_fit_local_rejects_bad_input(data):
    X, Xt, Y, _ = data
    with pytest.raises(ValueError, match="at most the number of training points"):
        tgp.fit_local(X, Y, PARAMS, n_neighbors=151)
    with pytest.raises(ValueError, match="at least dy \\+ 1 = 4"):
        tgp.fit_local(X, Y, PARAMS, n_neighbors=3)
    with pytest.raises(TypeError, match="n_neighbors"):
        tgp.fit_local(X, Y, PARAMS, n_neighbors=10.5)
    with pytest.raises(ValueError, match="share"):
        tgp.fit_local(X, Y, PARAMS, n_neighbors=20, share="all")
    m = tgp.fit_local(X, Y, PARAMS, n_neighbors=20)
    with pytest.raises(ValueError, match="columns"):
        tgp.predict(m, np.zeros((2, 5)))
    with pytest.raises(ValueError, match="sm_cubic"):
        tgp.predict(m, Xt, method="sm_cubic")
    with pytest.raises(TypeError, match="TGPModel"):
        tgp.objective(m, Xt, np.zeros((30, 3)))


def test_row_products_and_their_factor_storage_stay_in_the_process(data):
    """A local model's row-loop flag and symmetric factor storage are not pickled (a global model's
    products are the default elsewhere), and the storage reads as the factor: lower triangle ``G``,
    upper triangle ``G^T`` (the Cholesky factors of a model in Cholesky form are stored so already)."""
    import pickle

    from fastsm.tgp.views import product_factors, products_plan

    X, Xt, Y, _ = data
    model = tgp.fit(X[:40], Y[:40], PARAMS)
    size = len(pickle.dumps(model))
    assert not products_plan(model).rows
    use_row_products(model)
    tgp.predict(model, Xt[:3], method="sm")
    assert products_plan(model).rows
    stored = product_factors(model)
    assert model.factor_form == "cholesky" and stored["Wxy"] is model.Wxy
    np.testing.assert_array_equal(model.Wxy, model.Wxy.T)
    np.testing.assert_array_equal(np.tril(stored["G"]), model.G)
    np.testing.assert_array_equal(np.triu(stored["G"]), model.G.T)
    back = pickle.loads(pickle.dumps(model))
    assert len(pickle.dumps(model)) == size and not products_plan(back).rows
    np.testing.assert_array_equal(back.G, model.G)


def test_cluster_groups_of_repeated_test_rows_warn_nothing(data):
    """#53 item 11: a test set with 3 distinct rows and 30 clusters to form showed SciPy's k-means warnings
    ("invalid value encountered in divide", "One of the clusters is empty")."""
    import warnings

    X, Xt, Y, _ = data
    model = tgp.fit_local(X, Y, PARAMS, n_neighbors=30, share="cluster", group_size=4)
    Xr = np.repeat(Xt[:3], 40, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = tgp.predict(model, Xr)
    np.testing.assert_array_equal(p.y, np.repeat(p.y[::40], 40, axis=0))
