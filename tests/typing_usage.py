"""Type-checked by CI's "types" step (mypy; never run by pytest): the public API as a user calls it.

A public signature that stops accepting these calls, or whose results stop having these types,
fails the type check.
"""

from __future__ import annotations

import numpy as np

import fastsm
from fastsm import divergences, gmm, shift, tgp
from fastsm.sklearn import KLIEPWeights, TwinGPRegressor, TwinGPRegressorCV


def usage() -> None:
    Xtr, Xte, Ytr, Yte = fastsm.datasets.toy1(0, n_train=40, n_test=5)
    model: tgp.TGPModel = tgp.fit(Xtr, Ytr, tgp.TGPParams(alpha=0.5), threads=1)
    pred: tgp.Prediction = tgp.predict(model, Xte, method="kl", init="linear", max_iter=100)
    y: np.ndarray = pred.y
    loo: tgp.Prediction = tgp.loo_predict(model, method="sm")
    bigger: tgp.TGPModel = tgp.partial_fit(model, Xte, Yte)
    smaller: tgp.TGPModel = tgp.remove(bigger, [0, 1])
    sel: tgp.Selection = tgp.select(Xtr, Ytr, alphas=[0.5], betas=[1.5], cv=3, method="auto")
    local: tgp.LocalTGPModel = tgp.fit_local(Xtr, Ytr, n_neighbors=20)
    f = tgp.objective(model, Xte, y)
    phi: np.ndarray = tgp.certainty(model, Xte, y)
    d = divergences.sm(np.zeros(2), np.eye(2), np.ones(2), 2.0 * np.eye(2), 0.5, 1.5)
    iw: shift.ImportanceWeights = shift.estimate_weights(Xtr, Xte, solver="pfw", sigma=0.3)
    w: np.ndarray = shift.weights_at(iw, Xte)
    g = gmm.GaussianMixture(np.array([1.0]), np.zeros((1, 2)), np.eye(2)[None])
    D: np.ndarray = gmm.pairwise([g, g], method="var")
    est = TwinGPRegressor(method="kl").fit(Xtr, Ytr)
    cv = TwinGPRegressorCV(cv=3).fit(Xtr, Ytr)
    kw = KLIEPWeights(sigma=0.3).fit(Xtr, Xte)
    print(loo, smaller, sel, local, f, phi, d, w, D, est.predict(Xte), cv.predict(Xte), kw.weights_, y)
