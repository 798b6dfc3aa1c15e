"""fastsm.dask on a LocalCluster of 2 worker processes: equal to in-process, survives a killed worker."""

import os
import signal

import numpy as np
import pytest

pytest.importorskip("distributed")

import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

from fastsm import dask as fdask  # noqa: E402
from fastsm import datasets, gmm, tgp  # noqa: E402

PARAMS = tgp.TGPParams(gamma_x=0.5, gamma_y=2.0, lambda_x=1e-2, lambda_y=1e-2, alpha=0.6, beta=1.5)


def _mixtures():
    return datasets.gmm_manifold(d=3, K=2, n_gaussians=40, n_mixtures=12, seed=0)[0]


@pytest.fixture(scope="module")
def setup():
    X, Xt, Y, _ = datasets.random_structured(0, n_train=120, n_test=300, dx=2, dy=3)
    model = tgp.fit(X, Y, PARAMS)
    # compile (and cache) every kernel the tests use before the workers load them
    ref = tgp.predict(model, Xt)
    tgp.predict(model, Xt[:4], method="kl")
    gmm.pairwise(_mixtures(), method="var")
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    yield model, Xt, ref, client
    client.close()
    cluster.close()


@pytest.mark.determinism
def test_numpy_and_dask_arrays_equal_in_process(setup):
    model, Xt, ref, client = setup
    got = fdask.predict(model, Xt, client=client, block_size=64)
    for name in ("y", "log_certainty", "objective", "n_eval", "converged"):
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), rtol=1e-12, atol=0)
    got2 = fdask.predict(model, da.from_array(Xt, chunks=(70, 1)), client=client, method="kl")
    np.testing.assert_allclose(got2.y, tgp.predict(model, Xt, method="kl").y, rtol=1e-12, atol=0)


@pytest.mark.determinism
def test_local_model_and_gmm_pairwise(setup):
    model, Xt, _, client = setup
    local = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=40)
    np.testing.assert_allclose(fdask.predict(local, Xt[:50], client=client).y, tgp.predict(local, Xt[:50]).y,
                               rtol=1e-12, atol=0)
    mixtures = _mixtures()
    np.testing.assert_allclose(fdask.gmm_pairwise(mixtures, method="var", client=client, block_rows=5),
                               gmm.pairwise(mixtures, method="var"), rtol=1e-12, atol=0)


@pytest.mark.determinism
def test_a_killed_worker_loses_no_rows(setup):
    model, Xt, ref, client = setup
    pids = list(client.run(os.getpid).values())
    killed = []

    def kill_one(done, total):
        if not killed and done < total:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])

    got = fdask.predict(model, Xt, client=client, block_size=10, progress=kill_one)
    assert killed
    np.testing.assert_allclose(got.y, ref.y, rtol=1e-12, atol=0)
    assert got.y.shape == ref.y.shape


def test_dask_rejects_bad_input(setup):
    model, Xt, _, client = setup
    with pytest.raises(TypeError, match="TGPModel"):
        fdask.predict("model", Xt, client=client)
    with pytest.raises(ValueError, match="columns"):
        fdask.predict(model, np.zeros((4, 5)), client=client)
    with pytest.raises(TypeError, match="client"):
        fdask.predict(model, Xt, client="tcp://nowhere")
    with pytest.raises(ValueError, match="block_size"):
        fdask.predict(model, Xt, client=client, block_size=0)


@pytest.mark.determinism
def test_cluster_shared_local_model_equals_in_process_for_any_block(setup):
    """#19 item 7.  Before: up to 0.53 off in-process, and dependent on block_size (clusters formed per block)."""
    model, Xt, _, client = setup
    local = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=40, share="cluster", group_size=16)
    ref = tgp.predict(local, Xt)
    for got in (fdask.predict(local, Xt, client=client, block_size=37),
                fdask.predict(local, Xt, client=client, block_size=128),
                fdask.predict(local, da.from_array(Xt, chunks=(50, 1)), client=client)):
        np.testing.assert_array_equal(got.y, ref.y)
        np.testing.assert_array_equal(got.log_certainty, ref.log_certainty)


@pytest.mark.determinism
def test_region_shared_local_model_equals_in_process(setup):
    """#21: test points grouped by region; bitwise the in-process prediction for any block."""
    model, Xt, _, client = setup
    local = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=40, share="region", region_size=10)
    ref = tgp.predict(local, Xt)
    for kw in ({"block_size": 37}, {"block_size": 1000}, {}):
        got = fdask.predict(local, Xt, client=client, **kw)
        for name in ("y", "log_certainty", "n_eval", "extrapolated"):
            np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    got = fdask.predict(local, da.from_array(Xt, chunks=(50, 2)), client=client, method="kl")
    np.testing.assert_array_equal(got.y, tgp.predict(local, Xt, method="kl").y)


def test_each_region_model_is_built_once_over_the_cluster(setup):
    """With no cache (``cache_bytes=0``) every block builds each of its regions: once per region in all.

    Workers in this process share the model object, so its counter sees every worker's factorisations.
    """
    model, Xt, _, _ = setup
    local = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=40, share="region", region_size=10, cache_bytes=0)
    used = np.unique(local.regions_of(Xt)).size
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        fdask.predict(local, Xt, client=client, block_size=37)
        assert local.n_factorized == used
        fdask.predict(local, da.from_array(Xt, chunks=(23, 2)), client=client, block_size=50)
        assert local.n_factorized == 2 * used


def test_region_blocks_are_cut_between_regions():
    labels = np.array([0, 0, 1, 1, 1, 2, 5, 5, 5, 5, 7])
    spans = fdask._region_spans(labels, 3)
    assert spans == [(0, 5), (5, 10), (10, 11)]
    assert all(labels[a - 1] != labels[a] for a, _ in spans[1:])


@pytest.fixture(scope="module")
def threaded():
    cluster = LocalCluster(n_workers=1, threads_per_worker=4, processes=False, dashboard_address=None)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_one_extrapolation_warning_per_call_on_a_threaded_cluster(setup, threaded):
    """#30 item 12.  Before: one warning per block (8 in one call) on a threaded cluster, none with processes."""
    import warnings

    from fastsm import ExtrapolationWarning

    model, Xt, _, client = setup
    far = Xt.copy()
    far[::10] += 1e3
    for c in (threaded, client):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            got = fdask.predict(model, far, client=c, block_size=32, method="kl")
        ours = [w for w in record if issubclass(w.category, ExtrapolationWarning)]
        assert len(ours) == 1 and f"{got.extrapolated.sum()} of {len(far)}" in str(ours[0].message)
        assert ours[0].filename == __file__


def test_region_model_with_an_empty_chunk_and_unknown_chunk_sizes(setup, threaded):
    """#30 items 13 and 14.  Before: an empty Dask chunk gave "X must not be empty" for a region model, and a
    Dask array with unknown chunk sizes (boolean masking) "X must have at least one row"."""
    model, Xt, _, _ = setup
    region = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=40, share="region", region_size=20)
    X = Xt[:60]
    ref = tgp.predict(region, X, method="kl").y
    empty = da.from_array(X, chunks=((25, 0, 35), (2,)))
    assert 0 in empty.chunks[0]
    np.testing.assert_array_equal(fdask.predict(region, empty, client=threaded, method="kl").y, ref)
    keep = np.arange(len(X)) % 3 != 1
    masked = da.from_array(X, chunks=(20, 2))[da.from_array(keep, chunks=20)]
    assert any(np.isnan(c) for c in masked.chunks[0])
    for m in (region, model):
        np.testing.assert_array_equal(fdask.predict(m, masked, client=threaded, method="kl").y,
                                      tgp.predict(m, X[keep], method="kl").y)


_SOURCE_CALLS: list = []


def _counted_source(block, block_info=None):
    _SOURCE_CALLS.append(block_info[0]["chunk-location"])  # list.append is atomic: threads may share it
    return block


def test_a_dask_array_is_computed_once(setup, threaded):
    """#32 item 4.  Before: a region model computed each block of X twice (regions, then the sorted blocks),
    three times with unknown chunk sizes; every model computed it once more than needed with unknown sizes."""
    model, Xt, _, _ = setup
    region = tgp.fit_local(model.X, model.Y, PARAMS, n_neighbors=40, share="region", region_size=20)
    X = Xt[:90]
    keep = np.arange(len(X)) % 4 != 1
    for m in (region, model):
        for masked in (False, True):
            _SOURCE_CALLS.clear()
            arr = da.from_array(X, chunks=(30, 2)).map_blocks(_counted_source, dtype=X.dtype)
            want = X
            if masked:
                arr, want = arr[da.from_array(keep, chunks=30)], X[keep]
            got = fdask.predict(m, arr, client=threaded, method="kl")
            np.testing.assert_array_equal(got.y, tgp.predict(m, want, method="kl").y)
            assert sorted(_SOURCE_CALLS) == [(0, 0), (1, 0), (2, 0)], (m, masked, _SOURCE_CALLS)


def test_the_large_benchmark_on_a_cluster_equals_in_process():
    """``local_large.py --share none --dask 2`` (#32 item 4): the per-point job predicted again on a
    ``LocalCluster`` of two worker processes, bitwise the in-process prediction."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    from local_large import run_per_point

    r = run_per_point(3_000, 200, 50, None, dask_workers=2)
    assert r["dask"]["bitwise"] and r["dask"]["max_diff"] == 0.0 and r["dask"]["workers"] == 2
