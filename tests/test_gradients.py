"""Finite-difference checks of every objective's gradient (acceptance 1)."""

import numpy as np
import pytest

from fastsm import tgp
from tests.conftest import problem
from tests.naive import fd_gradient

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
