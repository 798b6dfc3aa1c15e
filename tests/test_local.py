"""KNN-local TGP (fastsm.tgp.fit_local): K = N equals the global model; sharing; bad input."""

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fastsm import datasets, tgp
from fastsm.tgp import regions
from fastsm.tgp.local import LocalTGPModel
from fastsm.tgp.local_model import LOCAL_METHODS, local_model
from fastsm.tgp.views import with_row_products
from tests.conftest import MANIFOLD_PARAMS

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
    # the same factorisation (the local one by fastsm's own Cholesky, the global one by dpotrf) and
    # products: measured 1.6e-13 apart (y) and 1e-13 (objective, relative); a converged point is fixed to tol
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

    assert len(neighbour_groups(tgp.fit_local(X, Y, PARAMS, n_neighbors=30, share="exact"), Xq)) <= len(Xt)


@pytest.mark.determinism
@pytest.mark.parametrize("method", ["kl", "ikl", "sm"])
def test_the_default_is_share_none_bitwise(data, method):
    """#75: ``fit_local``'s default is the fast mode (``"none"``: KLTGP and SMTGP in the blocked KNN kernel),
    and ``"exact"`` (the default up to d4a9171) gives bitwise its predictions."""
    X, Xt, Y, _ = data
    default = tgp.fit_local(X, Y, PARAMS, n_neighbors=30)
    assert default.share == "none"
    d = tgp.predict(default, Xt, method=method)
    for share in ("none", "exact"):
        p = tgp.predict(tgp.fit_local(X, Y, PARAMS, n_neighbors=30, share=share), Xt, method=method)
        for name in ("y", "log_certainty", "objective", "n_eval", "converged"):
            np.testing.assert_array_equal(getattr(d, name), getattr(p, name), err_msg=f"{share}: {name}")


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
    upper triangle ``G^T`` (the Cholesky factors of a model in Cholesky form are stored so already).
    The row-products twin shares the model's arrays; the model itself is unchanged."""
    import pickle

    from fastsm.tgp.views import predicts_few, product_factors, products_plan

    X, Xt, Y, _ = data
    plain = tgp.fit(X[:40], Y[:40], PARAMS)
    size = len(pickle.dumps(plain))
    assert not predicts_few(plain)
    model = with_row_products(plain)
    assert with_row_products(model) is model and not predicts_few(plain)
    assert all(getattr(model, name) is getattr(plain, name) for name in ("X", "Y", "Wx", "Wy", "Wxy", "G"))
    np.testing.assert_allclose(tgp.predict(model, Xt[:3], method="sm").y, tgp.predict(plain, Xt[:3], method="sm").y,
                               rtol=0, atol=1e-8)
    assert predicts_few(model) and products_plan(model).solve
    stored = product_factors(model)
    assert model.factor_form == "cholesky" and stored["Wxy"] is model.Wxy
    np.testing.assert_array_equal(model.Wxy, model.Wxy.T)
    np.testing.assert_array_equal(np.tril(stored["G"]), model.G)
    np.testing.assert_array_equal(np.triu(stored["G"]), model.G.T)
    back = pickle.loads(pickle.dumps(model))
    assert len(pickle.dumps(model)) == size and not predicts_few(back)
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


def _far_inputs(Xt):
    far = Xt.copy()
    far[::4] += 50.0  # every 4th test input outside the kernel support
    return far, int(np.ceil(len(Xt) / 4))


def test_local_and_threaded_predicts_leave_warning_filters_alone():
    """Before: ('ignore', RuntimeWarning) stayed in warnings.filters after one local predict.

    Regression test of #19, item 3.
    """
    X, Xt, Y, _ = datasets.toy1(0, n_train=120, n_test=24)
    far, n_far = _far_inputs(Xt)
    local = tgp.fit_local(X, Y, n_neighbors=40)
    model = tgp.fit(X, Y)
    before = list(warnings.filters)
    for _ in range(3):
        with pytest.warns(RuntimeWarning, match=f"^{n_far} of {len(Xt)} test inputs") as rec:
            tgp.predict(local, far, threads=2)
        assert len(rec) == 1
        assert warnings.filters == before
    # concurrent SM predicts (their KL starts ran the old catch_warnings in helper threads)
    with ThreadPoolExecutor(4) as pool:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            list(pool.map(lambda _: tgp.predict(model, far, method="sm", max_iter=5), range(8)))
    assert sum("kernel support" in str(w.message) for w in rec) == 8  # one per call, none lost
    assert warnings.filters == before
    # a later RuntimeWarning, fastsm's own included, still reaches the user
    with pytest.warns(RuntimeWarning, match=f"^{n_far} of {len(Xt)}"):
        tgp.predict(model, far, method="sm", max_iter=5)


@pytest.mark.parametrize("share", ["exact", "none", "cluster"])
def test_local_predict_of_huge_inputs_flags_them_as_extrapolated(share):
    """Before: a raw IndexError from the KD-tree's missing-neighbour index.

    Regression test of #19, item 11.
    """
    X, Xt, Y, _ = datasets.toy1(0, n_train=100, n_test=12)
    far = Xt.copy()
    far[1:4] = far[1:4] * 1e200 + 1e200
    glob = tgp.predict(tgp.fit(X, Y), far)
    with pytest.warns(RuntimeWarning, match="^3 of 12 test inputs"):
        loc = tgp.predict(tgp.fit_local(X, Y, n_neighbors=30, share=share, group_size=4), far)
    np.testing.assert_array_equal(loc.extrapolated, glob.extrapolated)
    assert np.isneginf(loc.log_certainty[1:4]).all() and np.isfinite(loc.y).all()
    near = np.delete(np.arange(12), [1, 2, 3])
    if share != "cluster":  # a point's model does not depend on the others
        ref = tgp.predict(tgp.fit_local(X, Y, n_neighbors=30, share=share), Xt[near])
        np.testing.assert_array_equal(loc.y[near], ref.y)


def _local_predict_peak(chunk_rows: int, monkeypatch) -> tuple[int, int]:
    """Peak traced memory of a KNN-local prediction (``fit_local``'s defaults, K = 100) of 3000 test points in
    chunks of ``chunk_rows``, and the size of one ``(n_test, K)`` index array."""
    import tracemalloc

    from fastsm import config

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0.0, 0.1, (100, 2)), rng.normal(5.0, 0.1, (100, 2))])
    Y = np.sin(X[:, :1])
    Xt = np.vstack([rng.normal(0.0, 0.05, (1500, 2)), rng.normal(5.0, 0.05, (1500, 2))])
    local = tgp.fit_local(X, Y, tgp.TGPParams(gamma_x=1.0, gamma_y=1.0, lambda_x=1e-2, lambda_y=1e-2),
                          n_neighbors=100)
    monkeypatch.setattr(config, "LOCAL_CHUNK_ENTRIES", 100 * chunk_rows)
    tgp.predict(local, Xt[:10], method="kl", max_iter=2)  # compile outside the measurement
    tracemalloc.start()
    try:
        pred = tgp.predict(local, Xt, method="kl", max_iter=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.isfinite(pred.y).all()
    return peak, Xt.shape[0] * 100 * 8


def test_local_predict_memory_is_bounded_by_a_chunk(monkeypatch):
    """Before: the (n_test, K) neighbour matrix was built up front (+1 GB at 40 000 points, K = 800).

    Regression test of #19, item 12, on the default share mode; chunks of 500 rows of 3000 stand for the default
    10 485 of more points (28.5 MB at 30 000 points against 24 MB an index array, 97 MB before).  Measured here:
    0.65 index arrays with the chunks, 2.23 with one chunk of every point (the code before the fix), so the
    bound of 1.5 tells the two apart.
    """
    peak, full = _local_predict_peak(500, monkeypatch)
    assert peak < 1.5 * full, (peak, full)
    whole, _ = _local_predict_peak(3000, monkeypatch)
    assert whole > 1.5 * full, (whole, full)


SHARES = ("exact", "none", "cluster")


def test_local_chunks_change_nothing_but_cluster_membership(monkeypatch):
    """Regression test of #19, item 12."""
    from fastsm import config

    X, Xt, Y, _ = datasets.toy1(0, n_train=150, n_test=40)
    ref = {s: tgp.predict(tgp.fit_local(X, Y, n_neighbors=40, share=s, group_size=4), Xt) for s in SHARES}
    monkeypatch.setattr(config, "LOCAL_CHUNK_ENTRIES", 40 * 7)  # chunks of 7 rows
    for s in ("exact", "none"):
        np.testing.assert_array_equal(tgp.predict(tgp.fit_local(X, Y, n_neighbors=40, share=s), Xt).y, ref[s].y)
    # cluster: each chunk of 7 rows is predicted as a call of its own
    local = tgp.fit_local(X, Y, n_neighbors=40, share="cluster", group_size=4)
    got = tgp.predict(local, Xt)
    for s in range(0, 40, 7):
        np.testing.assert_array_equal(got.y[s:s + 7], tgp.predict(local, Xt[s:s + 7]).y)


def test_local_model_built_directly_checks_region_size_and_resolves_scale_widths(manifold300):
    """Before: region_size=0 (the default) looped forever in the median split; "scale" widths stayed strings
    and failed later inside Numba.

    Regression test of #30, item 7.
    """
    X, Xt, Y, _ = manifold300
    with pytest.raises(ValueError, match="region_size"):
        LocalTGPModel(X=X, Y=Y, params=MANIFOLD_PARAMS, n_neighbors=40, sample_weight=None, share="region",
                      group_size=32)
    with pytest.raises(ValueError, match="region_size"):
        regions.partition(X, 0)
    direct = LocalTGPModel(X=X, Y=Y, params=tgp.TGPParams(), n_neighbors=40, sample_weight=None,
                           share="region", group_size=32, region_size=10)
    fitted = tgp.fit_local(X, Y, tgp.TGPParams(), n_neighbors=40, share="region", region_size=10)
    assert direct.params == fitted.params and direct.params.resolved
    np.testing.assert_array_equal(tgp.predict(direct, Xt, method="kl").y, tgp.predict(fitted, Xt, method="kl").y)
