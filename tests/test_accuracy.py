"""Accuracy against an independent long-double evaluation (docs/accuracy.md).

The yardstick is ``tests/longdouble.py``: the objectives of [SM] Eq. 5, 7 and 16 from Cholesky
factors and substitutions in 80-bit ``np.longdouble`` (NumPy loops, no fastsm kernel).  Every
margin below was measured (docs/accuracy.md quotes the figures) and holds on OpenBLAS's
Nehalem, SandyBridge, Haswell and SkylakeX kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
from longdouble import HAS_LONGDOUBLE, Reference
from scipy.optimize import minimize, minimize_scalar

from fastsm import datasets, tgp

needs_longdouble = pytest.mark.skipif(not HAS_LONGDOUBLE, reason="np.longdouble is float64 on this platform")
LD = np.longdouble


@pytest.fixture(scope="module")
def toy1():
    Xtr, Xte, Ytr, Yte = datasets.toy1(0)
    return Xtr, Xte, Ytr, Yte, tgp.fit(Xtr, Ytr, tgp.TOY1_PARAMS)


@pytest.fixture(scope="module")
def toy1_ld(toy1):
    Xtr, _, Ytr, _, model = toy1
    return Reference(Xtr, Ytr, model.params, LD)


def _ill():
    """The ill-conditioned set: lambda = 1e-5, dy = 3, widths from the data (cond K ~ 1e7)."""
    Xtr, Xte, Ytr, _ = datasets.random_structured(0, n_train=300, n_test=20, dx=4, dy=3)
    p = tgp.TGPParams(gamma_x="scale", gamma_y="scale", lambda_x=1e-5, lambda_y=1e-5, alpha=0.6, beta=1.5)
    model = tgp.fit(Xtr, Ytr, p)
    rng = np.random.default_rng(0)
    Yq = Ytr[rng.integers(0, len(Ytr), len(Xte))] + 0.05 * model.y_spread * rng.standard_normal((len(Xte), 3))
    return model, Xte, Yq


def _rel_errors(model, ref, X, Y, method):
    v = tgp.objective(model, X, Y, method=method)
    out = []
    for i in range(len(X)):
        r = ref.value(X[i], Y[i], method)
        # KLTGP's and IKLTGP's values are sums of O(1) terms that cross zero: measured against the terms
        scale = abs(r) if method == "sm" else ref.terms(X[i], Y[i], method)
        out.append(float(abs(v[i] - r) / scale))
    return np.array(out)


def _decreases(ref, X, Y, spread, dtype=np.float64, **kw) -> np.ndarray:
    """Per point, how much an independent bounded search (SciPy, +-1e-2 of the spread around the
    prediction ``Y[i]``, one output) lowers ``ref``'s SMTGP objective, relative to its value there."""
    d = 1e-2 * spread
    out = np.empty(len(X))
    for i in range(len(X)):
        y0 = Y[i, 0]

        def f(y, i=i):
            return float(ref.value(X[i], np.array([y], dtype=dtype), "sm", **kw))

        f0 = f(y0)
        r = minimize_scalar(f, bounds=(y0 - d, y0 + d), method="bounded", options={"xatol": 1e-12})
        out[i] = (f0 - min(r.fun, f0)) / abs(f0)
    return out


@needs_longdouble
@pytest.mark.parametrize("method", ["sm", "kl", "ikl"])
def test_objectives_on_toy1_match_long_double(toy1, toy1_ld, method):
    """Toy 1 at the paper's lambda = 1e-4: within 1e-9 (measured max 2.5e-11 SM, 1.1e-11 KL, 4.9e-15 IKL
    with the row-loop substitutions; 6.1e-11, 4.6e-11, 7.7e-14 with DTRSM tiles; with explicit inverses
    3.1e-6 SM)."""
    _, Xte, _, Yte, model = toy1
    idx = np.arange(0, 500, 25)
    err = _rel_errors(model, toy1_ld, Xte[idx], Yte[idx] + 0.01, method)
    assert err.max() <= 1e-9, err.max()


@needs_longdouble
@pytest.mark.parametrize("method", ["sm", "kl", "ikl"])
def test_objectives_on_an_ill_conditioned_set_match_long_double(method):
    """lambda = 1e-5, dy = 3: within 1e-9 (measured max 1.5e-10 SM, 2.2e-10 KL, 8.2e-11 IKL)."""
    model, X, Y = _ill()
    ref = Reference(model.X, model.Y, model.params, LD)
    err = _rel_errors(model, ref, X, Y, method)
    assert err.max() <= 1e-9, err.max()


@needs_longdouble
@pytest.mark.parametrize("method", ["sm", "kl", "ikl"])
def test_gradients_match_long_double_differences(toy1, toy1_ld, method):
    """Gradients against central differences of the long-double objective, normwise over the points
    (the SM gradient is a difference of terms of size ~1/lambda): measured 7.3e-9 SM, 1.9e-10 KL, 3.6e-10
    IKL (explicit inverses: 4.8e-6 SM, 3.0e-6 IKL)."""
    _, Xte, _, Yte, model = toy1
    idx = np.arange(0, 500, 50)
    Y = Yte[idx] + 0.01
    _, g = tgp.objective(model, Xte[idx], Y, method=method, return_gradient=True)
    h = LD(1e-6)
    fd = np.array([float((toy1_ld.value(Xte[i], Y[k].astype(LD) + h, method)
                          - toy1_ld.value(Xte[i], Y[k].astype(LD) - h, method)) / (2 * h))
                   for k, i in enumerate(idx)])
    assert np.abs(g[:, 0] - fd).max() <= 1e-7 * np.abs(fd).max()


def test_toy1_predictions_are_local_minima(toy1):
    """Every Toy 1 SMTGP prediction (all 500) is a local minimum at 1e-8 relative under an independent
    bounded search (SciPy) on the float64 Cholesky objective; with explicit inverses 153 were not, all
    reported converged.  Measured: 0 of 500, the largest decrease from a converged point 3.0e-11."""
    Xtr, Xte, Ytr, _, model = toy1
    pred = tgp.predict(model, Xte, method="sm")
    decrease = _decreases(Reference(Xtr, Ytr, model.params), Xte, pred.y, model.y_spread)
    assert np.mean(decrease <= 1e-8) >= 0.99
    assert decrease[pred.converged].max() <= 1e-8


@needs_longdouble
@pytest.mark.parametrize("method", ["sm", "kl"])
def test_the_cholesky_form_of_local_models_matches_long_double(toy1, toy1_ld, method):
    """Local models in Cholesky form (substitutions with L, no inverse formed) on both sets: within 1e-9.
    Measured max (inverse form in brackets): Toy 1 SM 4.4e-11 (9.6e-11), KL 9.4e-12 (5.5e-11); the
    ill-conditioned set SM 2.5e-11 (2.4e-10), KL 2.0e-11 (1.8e-10)."""
    from fastsm.tgp.local_model import local_model

    _, Xte, _, Yte, model = toy1
    chol = local_model(model.X, model.Y, model.params, ("kl", "sm"))
    assert chol.factor_form == "cholesky"
    idx = np.arange(0, 500, 25)
    assert _rel_errors(chol, toy1_ld, Xte[idx], Yte[idx] + 0.01, method).max() <= 1e-9
    ill, X, Y = _ill()
    chol = local_model(ill.X, ill.Y, ill.params, ("kl", "sm"))
    ref = Reference(ill.X, ill.Y, ill.params, LD)
    assert _rel_errors(chol, ref, X, Y, method).max() <= 1e-9


def _near_duplicates(lam):
    """Toy 1 (200 rows) plus 100 of its rows repeated 1e-7 apart in x and y, kernel noise ``lam``
    (issue #55's ill-conditioned set), and 50 test inputs."""
    Xtr, Xte, Ytr, _ = datasets.toy1(0, n_train=200, n_test=500)
    i = np.random.default_rng(0).choice(200, 100, replace=False)
    X, Y = np.vstack([Xtr, Xtr[i] + 1e-7]), np.vstack([Ytr, Ytr[i] + 1e-7])
    p = tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=lam, lambda_y=lam, alpha=0.9, beta=1.5)
    return X, Y, Xte[::10], p


def test_local_form_predictions_on_toy1_are_local_minima(toy1):
    """#55: the local models' path (their own Cholesky factors, one-row substitutions, the fused kernel:
    ``local_model``, as KNN-local and region models build it) on Toy 1's 500 training points: no SMTGP
    prediction reports ``converged`` where an independent bounded search (SciPy) on the float64
    Cholesky objective still lowers it by more than 1e-8 relative.  Measured (100 points): 100
    converged, the largest decrease left 2.7e-11."""
    from fastsm.tgp.local_model import local_model

    Xtr, Xte, Ytr, _, model = toy1
    loc = local_model(Xtr, Ytr, model.params, ("kl", "sm"))
    X = Xte[::5]
    pred = tgp.predict(loc, X, method="sm")
    decrease = _decreases(Reference(Xtr, Ytr, model.params), X, pred.y, model.y_spread)
    assert pred.converged.mean() >= 0.95, pred.converged.mean()
    assert decrease[pred.converged].max() <= 1e-8, decrease[pred.converged].max()


@needs_longdouble
@pytest.mark.parametrize("lam", [1e-6, 1e-8])
def test_converged_means_a_minimum_of_the_long_double_objective(lam):
    """#55: no SMTGP prediction on the near-duplicate set reports ``converged`` where a bounded search on
    the long-double objective still lowers it by more than 5e-7 relative, and most converge.

    Before #55 the approximate Wolfe test tolerated a rise of 1e-10 |f| only, below the values' noise
    here: searches found no decrease, and a stop below ``0.1 xtol`` counted as converged (100 of 100
    converged at lambda = 1e-8, one of them 9.3e-7 above a lower point, 13 above 1e-8).  Measured with
    DTRSM tiles (100 points): converged 98 (1e-6) and 82 (1e-8), none lowerable by more than 1e-8, the
    largest decrease left at any point 9.5e-13 and 3.0e-7; with the row-loop substitutions (these 50
    points): converged 49 and 49, the largest decrease left 9.2e-13 and 1.1e-10.
    """
    X, Y, Xt, p = _near_duplicates(lam)
    model = tgp.fit(X, Y, p)
    pred = tgp.predict(model, Xt, method="sm")
    decrease = _decreases(Reference(X, Y, p, LD), Xt, pred.y, model.y_spread, LD, beta=1.0)
    assert decrease[pred.converged].max(initial=0.0) <= 5e-7, decrease[pred.converged].max()
    assert pred.converged.mean() >= 0.6, pred.converged.mean()


@needs_longdouble
@pytest.mark.parametrize("lam", [1e-6, 1e-8])
def test_global_objectives_near_a_float64_substitution_on_near_duplicates(lam):
    """#55: a global model (Cholesky form, substitutions by row loops) evaluates the objectives on the
    near-duplicate set within 3x of SciPy's float64 substitutions' error (``tests/longdouble.py`` in
    float64), both against long double.  Measured, fastsm / SciPy (max over 10 points, Haswell kernels):
    lambda = 1e-6 SM 1.3e-9 / 6.6e-10, KL 9.8e-10 / 6.8e-10, IKL 1.2e-11 / 6.5e-12; lambda = 1e-8 SM
    8.9e-8 / 8.8e-8, KL 7.2e-8 / 1.1e-7, IKL 2.3e-9 / 2.6e-9.  The largest ratio under the Nehalem,
    SandyBridge, Haswell and SkylakeX kernels: 2.07 (IKL at 1e-6, SkylakeX; the factor ``L`` and SciPy's
    solves change with the kernels, fastsm's row loops do not).  With explicit inverse factors (before
    #55) SM was 3.5e-8 (1e-6) and 1.9e-5 (1e-8); with DTRSM tiles KL was 9.3x SciPy's error
    (docs/accuracy.md)."""
    X, Y, Xt, p = _near_duplicates(lam)
    Xt = Xt[::5]
    model = tgp.fit(X, Y, p)
    assert model.factor_form == "cholesky"
    ld, f64 = Reference(X, Y, p, LD), Reference(X, Y, p)
    rng = np.random.default_rng(0)
    Yq = Y[rng.integers(0, len(Y), len(Xt))] + 0.05 * model.y_spread * rng.standard_normal((len(Xt), 1))
    for method in ("sm", "kl", "ikl"):
        ours = _rel_errors(model, ld, Xt, Yq, method)
        scipy = []
        for i in range(len(Xt)):
            r = ld.value(Xt[i], Yq[i].astype(LD), method)
            scale = abs(r) if method == "sm" else ld.terms(Xt[i], Yq[i].astype(LD), method)
            scipy.append(float(abs(f64.value(Xt[i], Yq[i], method) - r) / scale))
        assert ours.max() <= 3 * max(scipy), (method, ours.max(), max(scipy))


def test_leave_one_out_on_toy1_equals_a_refit():
    """#55: SMTGP leave-one-out on Toy 1 (``TOY1_PARAMS``) predicts what a refit without the row predicts,
    to 5e-9 of the output spread where both converge.  The projection now starts from the full kernel
    row (``project_out``): measured max 2.0e-9 over these 50 rows, 2.75e-9 over all 500 (median 1.6e-10);
    in Cholesky form (session 35) 2.21e-9 over all 500 (median 4.2e-11);
    before, with the left-out entry zeroed, 3.8e-6 over these rows (32 of 48 above 5e-9)."""
    Xtr, _, Ytr, _ = datasets.toy1(0)
    model = tgp.fit(Xtr, Ytr, tgp.TOY1_PARAMS)
    rows = np.arange(0, 500, 10)
    loo = tgp.loo_predict(model, method="sm", rows=rows)
    diff = []
    for k, h in enumerate(rows):
        keep = np.delete(np.arange(500), h)
        refit = tgp.predict(tgp.fit(Xtr[keep], Ytr[keep], tgp.TOY1_PARAMS), Xtr[h:h + 1], method="sm")
        if refit.converged[0] and loo.converged[k]:
            diff.append(abs(refit.y[0, 0] - loo.y[k, 0]) / model.y_spread)
    assert len(diff) >= 45 and max(diff) <= 5e-9, (len(diff), max(diff))


@needs_longdouble
def test_leave_one_out_on_near_duplicates_reaches_the_refits_objective():
    """#55: on the near-duplicate set at lambda = 1e-8, the long-double objective of the refit model at the
    leave-one-out prediction is within 1e-7 relative of its value at the refit's own prediction (measured
    at most 6.9e-11 over 10 rows, duplicates and originals)."""
    X, Y, _, p = _near_duplicates(1e-8)
    model = tgp.fit(X, Y, p)
    rows = np.array([203, 249, 274, 61, 165])
    loo = tgp.loo_predict(model, method="sm", rows=rows)
    for k, h in enumerate(rows):
        keep = np.delete(np.arange(len(X)), h)
        refit = tgp.predict(tgp.fit(X[keep], Y[keep], p), X[h:h + 1], method="sm")
        ref = Reference(X[keep], Y[keep], p, LD)
        f_refit = ref.value(X[h], refit.y[0].astype(LD), "sm", beta=1.0)
        f_loo = ref.value(X[h], loo.y[k].astype(LD), "sm", beta=1.0)
        assert abs(float((f_loo - f_refit) / f_refit)) <= 1e-7, h


def _lowered(ref, ref_ld, x, y0, spread):
    """How much an independent search lowers SMTGP's criterion from ``y0``, relative, on the long-double
    objective: SciPy's L-BFGS-B within ±0.01 × the spread on the float64 reference (its analytic
    gradient), both ends then evaluated in long double."""
    d = 1e-2 * spread
    r = minimize(lambda y: ref.sm_criterion_grad(x, y), y0, jac=True, method="L-BFGS-B",
                 bounds=[(v - d, v + d) for v in y0], options={"ftol": 1e-15, "gtol": 1e-13, "maxiter": 500})
    f0 = ref_ld.value(x, y0.astype(LD), "sm", beta=1.0)
    f1 = ref_ld.value(x, r.x.astype(LD), "sm", beta=1.0)
    return float(max(f0 - f1, 0) / abs(f0))


@needs_longdouble
def test_dy16_predictions_are_minima_of_the_long_double_objective():
    """#55: at dy = 16 no SMTGP prediction — global, leave-one-out or KNN-local — reports ``converged``
    where an independent search lowers the long-double objective by more than 1e-8 relative.
    Measured (random_structured, N = 300, dy = 16, lambda = 1e-3): all 40 global, 10 leave-one-out
    and 20 local (K = 60) predictions converged; the largest decrease found 9.1e-13, 5.6e-13 and
    4.8e-13 (float64 search)."""
    from scipy.spatial import cKDTree

    X, Xt, Y, _ = datasets.random_structured(0, n_train=300, n_test=40, dx=4, dy=16)
    p = tgp.TGPParams(gamma_x="scale", gamma_y="scale", lambda_x=1e-3, lambda_y=1e-3, alpha=0.9, beta=1.5)
    model = tgp.fit(X, Y, p)
    pp = model.params
    pred = tgp.predict(model, Xt, method="sm")
    ref, ref_ld = Reference(X, Y, pp), Reference(X, Y, pp, LD)
    found = [_lowered(ref, ref_ld, Xt[k], pred.y[k], model.y_spread) for k in np.flatnonzero(pred.converged)]
    assert pred.converged.mean() >= 0.9 and max(found) <= 1e-8, (pred.converged.mean(), max(found))
    rows = np.arange(0, 300, 30)
    loo = tgp.loo_predict(model, method="sm", rows=rows)
    assert loo.converged.mean() >= 0.9
    for j in np.flatnonzero(loo.converged):
        keep = np.delete(np.arange(300), rows[j])
        spread = tgp.fit(X[keep], Y[keep], pp).y_spread
        found = _lowered(Reference(X[keep], Y[keep], pp), Reference(X[keep], Y[keep], pp, LD), X[rows[j]],
                         loo.y[j], spread)
        assert found <= 1e-8, (rows[j], found)
    K = 60
    local = tgp.predict(tgp.fit_local(X, Y, pp, n_neighbors=K), Xt[:20], method="sm")
    assert local.converged.mean() >= 0.9
    _, nb = cKDTree(X).query(Xt[:20], K)
    for k in np.flatnonzero(local.converged):
        idx = np.sort(nb[k])
        spread = tgp.fit(X[idx], Y[idx], pp).y_spread
        found = _lowered(Reference(X[idx], Y[idx], pp), Reference(X[idx], Y[idx], pp, LD), Xt[k], local.y[k],
                         spread)
        assert found <= 1e-8, (k, found)


@needs_longdouble
def test_leave_one_out_objective_is_as_accurate_as_a_refits():
    """#55: the leave-one-out SMTGP objective (substitutions with ``L``, projections with columns of ``W``)
    against long double of the refit ``N-1``-point model, on the near-duplicate set at lambda = 1e-8, within
    3x of the refit's own error (measured 4.3e-8 vs 4.1e-8, ``python benchmarks/loo_accuracy.py``; with
    products by the explicit ``W`` before, 5.0e-6: 120x)."""
    from fastsm.tgp import prediction, views

    X, Y, _, p = _near_duplicates(1e-8)
    model = tgp.fit(X, Y, p)
    lv = views.leave_one_out(model)
    rng = np.random.default_rng(1)
    ours, refits = [], []
    for h in (203, 249, 61):
        keep = np.delete(np.arange(len(X)), h)
        ref, refit = Reference(X[keep], Y[keep], p, LD), tgp.fit(X[keep], Y[keep], p)
        Yq = Y[h:h + 1] + 0.05 * model.y_spread * rng.standard_normal((4, 1))
        Xq = np.repeat(X[h:h + 1], 4, axis=0)
        for m, held, err in ((model, np.full(4, h), ours), (refit, None, refits)):
            loo = lv if held is not None else None
            F, eta_x, _, _ = prediction.prepare_points(m, Xq, "sm", held, loo)
            v = np.empty(4)
            prediction.evaluate(m, "sm", F, eta_x, Yq, v, np.empty((4, 1)), beta=1.0, held=held, loo=loo)
            for k in range(4):
                r = ref.value(X[h], Yq[k].astype(LD), "sm", beta=1.0)
                err.append(float(abs((v[k] - r) / r)))
    assert max(ours) <= 3 * max(refits), (max(ours), max(refits))
