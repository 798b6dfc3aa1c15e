"""``python -m fastsm digits``: TGPs against scikit-learn's regressors on real data shipped with scikit-learn.

Three tasks: reconstruct the central 2×2 and 4×4 pixels of the 8×8 handwritten
digits from the other pixels ([SM] §5.1.3 on USPS, here on
:func:`sklearn.datasets.load_digits`), and the Linnerud data (three exercise
counts → three physiological measurements, 20 men, leave-one-out).  Every
hyperparameter is chosen on training data only:

* TGPs: one :func:`fastsm.tgp.select` (``method="sm", search="coordinate"``,
  exact leave-one-out): kernel widths and regularisers by KLTGP's coordinate
  search over :class:`~fastsm.sklearn.TwinGPRegressorCV`'s grids (widths
  relative to the median squared distance); IKLTGP shares them ([SM] §5.2);
  then SMTGP's alpha at those kernels over [SM] §5.2's grid plus 0.001 … 0.02
  (beta does not change the prediction, [SM] Lemma 4.2; 0.99 is used).
* ``GaussianProcessRegressor``: constant × RBF + white noise, by the
  log-marginal likelihood (``normalize_y=True``).
* ``KernelRidge`` (RBF) and distance-weighted ``KNeighborsRegressor``:
  ``GridSearchCV`` (5 folds; leave-one-out on Linnerud).

The error is [SM] §5.1.3's ``||y_hat - y||`` (Euclidean over the predicted
pixels), averaged over the test points (its std and median beside it); on
Linnerud over outputs z-scored by the training fold.  Fit times include the
hyperparameter search.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from fastsm import datasets, tgp
from fastsm.tgp.prediction import Method
from fastsm.tgp.search import GAMMA_X_GRID, GAMMA_Y_GRID, LAMBDA_GRID

#: [SM] §5.2's alpha grid (0.05 … 0.95) and four smaller values, towards the KLTGP limit alpha -> 0 (docs/math.md §3).
ALPHAS = (0.001, 0.005, 0.01, 0.02, *(round(0.05 * k, 2) for k in range(1, 20)))
#: Kernel ridge's grid: RBF widths (same convention) and ridge penalties.
KRR_WIDTHS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
KRR_ALPHAS = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
TGP_NAMES: dict[Method, str] = {"sm": "SMTGP", "kl": "KLTGP", "ikl": "IKLTGP"}


@dataclass(frozen=True)
class Result:
    """One method on one task."""

    method: str
    error: float          # mean ||y_hat - y|| over the test points
    error_std: float
    fit_seconds: float    # hyperparameter search and fit
    predict_seconds: float
    chosen: str           # the selected hyperparameters, as text
    error_median: float = float("nan")


def euclidean_error(Y: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Per-point ``||y_hat - y||`` ([SM] §5.1.3)."""
    return np.sqrt(((np.asarray(P) - np.asarray(Y)) ** 2).sum(axis=1))


def _median_sq(Z: np.ndarray) -> float:
    from scipy.spatial.distance import pdist

    m = float(np.median(pdist(Z, "sqeuclidean")))
    return m if m > 0 else 1.0


@dataclass(frozen=True)
class TGPFit:
    """What :func:`fit_tgps` chose, and how long its search took."""

    model: tgp.TGPModel        # refit on all training data with the selected kernels and alpha
    selection: tgp.Selection   # the search: kernels by KLTGP, then SMTGP's alpha
    seconds: float
    width_x: float             # selected gamma_x times the median squared distance
    width_y: float


def fit_tgps(X, Y, *, threads=None, cv="loo") -> TGPFit:
    """One :func:`fastsm.tgp.select`: kernels by KLTGP's coordinate search over TwinGPRegressorCV's grids,
    then SMTGP's alpha over :data:`ALPHAS` at those kernels."""
    t0 = time.perf_counter()
    sel = tgp.select(X, Y, method="sm", search="coordinate", gammas_x=GAMMA_X_GRID, gammas_y=GAMMA_Y_GRID,
                     lambdas_x=LAMBDA_GRID, lambdas_y=LAMBDA_GRID, alphas=ALPHAS, betas=(0.99,),
                     scoring="euclidean", cv=cv, threads=threads)
    gx, gy = sel.params.widths()
    return TGPFit(sel.model, sel, time.perf_counter() - t0, gx * _median_sq(X), gy * _median_sq(Y))


def _describe(f: TGPFit, sm: bool) -> str:
    p = f.model.params
    s = f"gx={f.width_x:.4g}/med gy={f.width_y:.4g}/med lx={p.lambda_x:g} ly={p.lambda_y:g}"
    return s + (f" a={p.alpha:g}" if sm else "")


def baselines(X, Y, *, cv):
    """The [SM] Table 3 baselines, unfitted, with their hyperparameter searches.

    Parameters
    ----------
    X, Y : ndarray
        Training data (the searches' grids are scaled by its median squared distance).
    cv : int or scikit-learn splitter
        Folds of the ``GridSearchCV`` searches (kernel ridge, W-KNN).

    Returns
    -------
    list of (str, estimator, callable)
        Name, estimator, and a function of the fitted estimator that describes
        what was chosen.
    """
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV
    from sklearn.neighbors import KNeighborsRegressor

    mx = _median_sq(X)
    scorer = make_scorer(lambda Yt, Yp: float(euclidean_error(Yt, Yp).mean()), greater_is_better=False)
    gpr = GaussianProcessRegressor(
        ConstantKernel(1.0) * RBF(length_scale=np.sqrt(mx / 2.0), length_scale_bounds=(1e-2, 1e3))
        + WhiteKernel(1e-2, noise_level_bounds=(1e-6, 1e1)), normalize_y=True, random_state=0)
    krr = GridSearchCV(KernelRidge(kernel="rbf"),
                       {"alpha": list(KRR_ALPHAS), "gamma": [w / mx for w in KRR_WIDTHS]},
                       cv=cv, scoring=scorer)
    n_splits = cv if isinstance(cv, int) else cv.get_n_splits(X)
    smallest_fold = len(X) - int(np.ceil(len(X) / n_splits))
    ks = [k for k in (1, 2, 3, 5, 7, 10, 15, 20, 30) if k <= smallest_fold]
    knn = GridSearchCV(KNeighborsRegressor(weights="distance"), {"n_neighbors": ks}, cv=cv, scoring=scorer)
    return [
        ("GPR", gpr, lambda e: str(e.kernel_)),
        ("kernel ridge", krr,
         lambda e: f"alpha={e.best_params_['alpha']:g} gamma={e.best_params_['gamma'] * mx:g}/med"),
        ("W-KNN", knn, lambda e: f"k={e.best_params_['n_neighbors']}"),
    ]


def run_split(X_train, X_test, Y_train, Y_test, *, threads=None, cv=5):
    """All six methods on one train/test split; a list of :class:`Result`, TGPs first.

    The three TGPs share one search (kernels by KLTGP, then SMTGP's alpha): its time is each one's fit time.
    """
    from sklearn.exceptions import ConvergenceWarning

    f = fit_tgps(X_train, Y_train, threads=threads)
    results = []
    for method in ("sm", "kl", "ikl"):
        t0 = time.perf_counter()
        pred = tgp.predict(f.model, X_test, method=method, threads=threads)
        dt = time.perf_counter() - t0
        err = euclidean_error(Y_test, pred.y)
        results.append(Result(TGP_NAMES[method], float(err.mean()), float(err.std()), f.seconds, dt,
                              _describe(f, method == "sm"), float(np.median(err))))
    for name, est, describe in baselines(X_train, Y_train, cv=cv):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # GPR's L-BFGS-B may stop at an iteration limit or a bound of the length scale (Linnerud); the
            # fitted kernel is printed, so a bound that was hit shows.
            warnings.simplefilter("ignore", ConvergenceWarning)
            est.fit(X_train, Y_train)
        t1 = time.perf_counter()
        P = est.predict(X_test)
        dt = time.perf_counter() - t1
        err = euclidean_error(Y_test, P)
        results.append(Result(name, float(err.mean()), float(err.std()), t1 - t0, dt, describe(est),
                              float(np.median(err))))
    return results


def run_linnerud(*, threads=None):
    """Leave-one-out over the 20 Linnerud men, every method re-selected on each 19-point training fold."""
    from sklearn.model_selection import LeaveOneOut

    X, Y = datasets.linnerud()
    n = len(X)
    names = [*TGP_NAMES.values(), "GPR", "kernel ridge", "W-KNN", "training mean"]
    errs = {k: np.empty(n) for k in names}
    fit_s = dict.fromkeys(names, 0.0)
    pred_s = dict.fromkeys(names, 0.0)
    chosen = {k: [] for k in names}
    for i in range(n):
        tr = np.arange(n) != i
        xm, xs = X[tr].mean(0), X[tr].std(0)
        ym, ys = Y[tr].mean(0), Y[tr].std(0)
        Xtr, Xte = (X[tr] - xm) / xs, (X[~tr] - xm) / xs
        Ytr, Yte = (Y[tr] - ym) / ys, (Y[~tr] - ym) / ys
        for r in run_split(Xtr, Xte, Ytr, Yte, threads=threads, cv=LeaveOneOut()):
            errs[r.method][i] = r.error
            fit_s[r.method] += r.fit_seconds
            pred_s[r.method] += r.predict_seconds
            chosen[r.method].append(r.chosen)
        errs["training mean"][i] = float(euclidean_error(Yte, np.zeros_like(Yte))[0])
        chosen["training mean"].append("-")
    out = []
    for k in names:
        common = max(set(chosen[k]), key=chosen[k].count)
        out.append(Result(k, float(errs[k].mean()), float(errs[k].std()), fit_s[k], pred_s[k],
                          f"{common} ({chosen[k].count(common)}/{n} folds)", float(np.median(errs[k]))))
    return out


def warm_up(threads=None) -> None:
    """Compile (or load from the cache) every kernel the TGP fits and predictions use, outside the timings."""
    Xtr, Xte, Ytr, _ = datasets.digits_reconstruction(2, 0)
    model = fit_tgps(Xtr[:30], Ytr[:30], threads=threads).model
    for method in TGP_NAMES:
        tgp.predict(model, Xte[:4], method=method, threads=threads)


def run(*, threads=None, seed: int = 0, linnerud: bool = True, log=None) -> dict[str, list[Result]]:
    """The three tasks; ``{"digits 2x2": [...], "digits 4x4": [...], "linnerud": [...]}``.

    Times exclude JIT compilation (:func:`warm_up` runs first).
    """
    warm_up(threads)
    tables = {}
    for c in (2, 4):
        if log is not None:
            log(f"digits {c}x{c} ...")
        Xtr, Xte, Ytr, Yte = datasets.digits_reconstruction(c, seed)
        tables[f"digits {c}x{c}"] = run_split(Xtr, Xte, Ytr, Yte, threads=threads)
    if linnerud:
        if log is not None:
            log("linnerud ...")
        tables["linnerud"] = run_linnerud(threads=threads)
    return tables


def format_table(results: list[Result]) -> str:
    """The results as text; ``*`` after the lowest mean error."""
    head = (f"{'method':14} {'error':>7}  {'(std)':>7} {'median':>7} {'fit [s]':>8} {'predict [s]':>11}  "
            f"chosen on training data")
    lines = [head, "-" * (len(head) + 20)]
    best = min(r.error for r in results)
    for r in results:
        mark = "*" if r.error == best else " "
        lines.append(f"{r.method:14} {r.error:7.4f}{mark} {r.error_std:7.4f} {r.error_median:7.4f} "
                     f"{r.fit_seconds:8.2f} {r.predict_seconds:11.3f}  {r.chosen}")
    return "\n".join(lines)


def verdict(name: str, results: list[Result]) -> str:
    """One sentence: where SMTGP stands on this task, with the numbers."""
    by = {r.method: r for r in results}
    sm = by["SMTGP"]
    best = min(results, key=lambda r: r.error)
    if best.method == "SMTGP":
        second = min((r for r in results if r.method != "SMTGP"), key=lambda r: r.error)
        return (f"{name}: SMTGP is best ({sm.error:.4f}); next {second.method} {second.error:.4f} "
                f"({100 * (second.error - sm.error) / second.error:.1f}% higher).")
    return (f"{name}: SMTGP is NOT best: {best.method} {best.error:.4f} vs SMTGP {sm.error:.4f} "
            f"({100 * (sm.error - best.error) / best.error:.1f}% higher).")


def main(*, threads=None, seed: int = 0, linnerud: bool = True) -> int:
    print("fastsm digits: TGPs vs scikit-learn on data shipped with scikit-learn (hyperparameters chosen on")
    print("training data only; error = mean ||y_hat - y|| over test points, [SM] §5.1.3; * = lowest)")
    print("  digits: 1797 8x8 images scaled to [-1, 1], half train / half test, predict the central pixels")
    print("  linnerud: 20 men, 3 exercises -> 3 body measurements (z-scored), leave-one-out")
    tables = run(threads=threads, seed=seed, linnerud=linnerud, log=lambda s: print(s, flush=True))
    for name, results in tables.items():
        print(f"\n{name}")
        print(format_table(results))
    print()
    for name, results in tables.items():
        print(verdict(name, results))
    return 0
