"""fastsm against its plain NumPy/SciPy twin, and across thread counts (acceptance 4)."""

import numpy as np
import pytest

from fastsm import datasets, reference, tgp
from tests.conftest import problem

METHODS = ["kl", "ikl", "sm"]


@pytest.mark.parametrize("method", METHODS + ["sm_cubic"])
@pytest.mark.parametrize("dy", [1, 16])
def test_objectives_agree_with_reference(method, dy):
    # lambda = 1e-2: eta's rounding error grows like cond(K) eps / eta; at lambda = 1e-3 the
    # normwise agreement measured 7e-10 (SM, dy = 1) -- conditioning, not a kernel difference
    Xtr, Xte, Ytr, Yte, p = problem(dy, n_train=80 if method != "sm_cubic" else 30, n_test=12, lam=1e-2)
    m = tgp.fit(Xtr, Ytr, p)
    mr = reference.tgp.fit(Xtr, Ytr, p)
    Y = Yte + 0.1 * m.y_spread * np.random.default_rng(0).standard_normal(Yte.shape)
    # the kernels against the NumPy twin on the same fitted model
    v, g = tgp.objective(m, Xte, Y, method=method, return_gradient=True)
    vr, gr = reference.tgp.objective(m, Xte, Y, method=method, return_gradient=True)
    # normwise over the batch: single values can sit near 0 while the summands
    # (entries of K^-1 ~ 1/lambda) cancel, so elementwise relative error is meaningless there
    assert np.abs(v - vr).max() <= 1e-10 * np.abs(vr).max()
    assert np.abs(g - gr).max() <= 1e-8 * np.abs(gr).max()
    # log phi is a near-cancelling sum of logs of size ~|log lambda|: absolute tolerance
    lc, lcr = tgp.certainty(m, Xte, Y), reference.tgp.certainty(m, Xte, Y)
    assert np.abs(lc - lcr).max() <= 1e-8
    # the two fits (LAPACK potri vs numpy.linalg.inv) agree to the inverses' conditioning
    for a, b in ((m.Kx_inv, mr.Kx_inv), (m.Ky_inv, mr.Ky_inv), (m.Kxy_inv, mr.Kxy_inv)):
        cond = np.linalg.cond(b)
        assert np.abs(a - b).max() <= 1e-14 * cond * np.abs(b).max()
    vr2 = reference.tgp.objective(mr, Xte, Y, method=method)
    np.testing.assert_allclose(v, vr2, rtol=1e-7, atol=1e-9)


def _toy(name, lam):
    ds = {"toy1": datasets.toy1, "toy2": datasets.toy2}[name]
    Xtr, Xte, Ytr, Yte = ds(0, n_train=200, n_test=60)
    a, b = (0.9, 1.5) if name == "toy1" else (0.6, 0.99)
    return Xtr, Xte, Ytr, tgp.TGPParams(lambda_x=lam, lambda_y=lam, alpha=a, beta=b)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", ["toy1", "toy2", "dy16"])
def test_predictions_agree_with_reference(method, case):
    """What rounding determines, with measured margins.

    Even at lambda = 1e-2 the SMTGP minima are flat: the two optimisers stop at points whose
    objectives agree to 3e-10 relative while y differs by up to 2.7e-6 (measured on toy1 and
    dy16 with 1 and 2 threads).  So the objective is compared tightly (neither side may be
    better than the other by more than 1e-8 relative, 30x the measured spread) and y loosely
    (3e-5, 11x the measured spread).  At the papers' lambda = 1e-4 the minimisers are only
    determined to ~1e-3 (docs/accuracy.md).
    """
    if case == "dy16":
        Xtr, Xte, Ytr, _, p = problem(16, n_train=150, n_test=20, lam=3e-2, alpha=0.5)
    else:
        Xtr, Xte, Ytr, p = _toy(case, 1e-2)
    m = tgp.fit(Xtr, Ytr, p)
    Y0 = tgp.predict(m, Xte, method="kl", max_iter=500, tol=1e-12).y
    kw = dict(init=Y0, max_iter=1000, tol=1e-10, trust_radius=0.02)
    ours = tgp.predict(m, Xte, method=method, **kw)
    # the same fitted model: the twin of predict is compared, not numpy.linalg.inv against potri
    ref = reference.tgp.predict(m, Xte, method=method, **kw)
    f_ours = ours.criterion
    f_ref = reference.tgp.objective(m, Xte, ref.y, method=method) if method != "sm" else ref.criterion
    scale = np.abs(f_ref).max()
    assert np.all(np.abs(f_ours - f_ref) <= 1e-8 * scale)
    np.testing.assert_allclose(ours.y, ref.y, atol=3e-5)
    # a point may stop at max_iter while wandering in rounding noise at the minimum (issue 7)
    assert ours.converged.mean() >= 0.9


@pytest.mark.determinism
@pytest.mark.parametrize("method", METHODS)
def test_one_and_two_threads_agree(method):
    Xtr, Xte, Ytr, Yte = datasets.toy1(0, n_train=300, n_test=300)
    m = tgp.fit(Xtr, Ytr, tgp.TGPParams(alpha=0.9, beta=1.5))
    p1 = tgp.predict(m, Xte, method=method, threads=1)
    p2 = tgp.predict(m, Xte, method=method, threads=2)
    np.testing.assert_allclose(p1.y, p2.y, rtol=0, atol=1e-12)
    np.testing.assert_allclose(p1.objective, p2.objective, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(p1.n_eval, p2.n_eval)


def test_threads_are_restored():
    import numba

    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=50, n_test=5)
    m = tgp.fit(Xtr, Ytr)
    before = numba.get_num_threads()
    tgp.predict(m, Xte, method="kl", threads=1)
    assert numba.get_num_threads() == before
