"""Why [CS] §III-D's sparsity counts (KLIEP 180, FWCS 73, AFWCS 18, PFWCS 8) do not reproduce.

Two parts, on the toy of [CS] §III-D (``fastsm.datasets.covariate_shift_toy``: 500 training points
~ N(0.5, 0.5²), 300 test points ~ N(0, 0.3²), every test point a centre), over seeds:

1. **Faithful** -- fastsm's solvers (``estimate_weights``, [CS] Alg. 2-5 with the Armijo search of
   Alg. 3, and Sugiyama's projected gradient ``pg``) at sigma = 0.3 under several stopping rules,
   and the **certified optimum** (each solver polished to a duality gap <= 1e-8, an upper bound on F* - F).
2. **As published** -- NOT the paper's algorithms and not in the library: the departures an
   independent review found in the authors' public MATLAB code (issue #22), transcribed here from
   that description: fixed steps 2/(t+2) (FW) and 1/(t+2) clipped to rho_max (AFW, PFW) instead of
   the Armijo search; a stop at |delta mean log-likelihood| <= 1e-4; an away step that does not
   drop its atom subtracts rho from that atom twice; the pairwise direction d_FW - d_A (= e_s + e_v
   - 2 mu) instead of d_FW + d_A (= e_s - e_v); sigma chosen per solver by the in-sample mean
   log-likelihood over a grid; and the demo's labels, which print AFW's count under "PFWCS" and
   PFW's under "AFWCS".

One table: rule x solver, median [min-max] nonzero coefficients over the seeds, and the share of
seeds with PFW < AFW < FW (the paper's ordering).

    python benchmarks/cs_sparsity.py            # seeds 0-9
    python benchmarks/cs_sparsity.py --quick    # seeds 0-4 (under a minute)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastsm import datasets, shift

SIGMA = 0.3
#: In-sample likelihood search of the as-published variants (the authors pick sigma per solver).
SIGMA_GRID = (0.02, 0.03, 0.04, 0.05, 0.06, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0)
#: How the as-published rows pick sigma: the description fixes FW's (an in-sample search lands at 0.04-0.1),
#: not the others', so each policy is a row.  name -> (search range of FW, of AFW and PFW; None: sigma = 0.3).
POLICIES = {
    "sigma = 0.3": (None, None),
    "in-sample sigma in 0.02-1": ((0.02, 1.0), (0.02, 1.0)),
    "in-sample sigma in 0.02-0.3": ((0.02, 0.3), (0.02, 0.3)),
    "FW in-sample, A/PFW 0.3": ((0.02, 1.0), None),
}
#: Faithful stopping rules: name -> estimate_weights options (every run without polish except the optimum).
RULES = {
    "dF <= 1e-6 |F|": dict(ftol=1e-6, tol=0.0, max_iter=100_000, polish=False),
    "dF <= 1e-9 |F|": dict(ftol=1e-9, tol=0.0, max_iter=100_000, polish=False),
    "gap <= 1": dict(tol=1.0, max_iter=100_000, polish=False),
    "gap <= 1e-2": dict(tol=1e-2, max_iter=100_000, polish=False),
    "100 iterations": dict(tol=0.0, max_iter=100, polish=False),
    "1000 iterations": dict(tol=0.0, max_iter=1000, polish=False),
}
SOLVERS = ("pg", "fw", "afw", "pfw")


# ---------------------------------------------------------------- as published (not the paper's algorithms)

def kliep_matrices(x_tr: np.ndarray, x_te: np.ndarray, sigma: float):
    """``At = A / b`` (test points × centres; simplex coordinates mu = b * alpha), 1-D data, centres = test points."""
    A = np.exp(-((x_te[:, None] - x_te[None, :]) ** 2) / (2.0 * sigma**2))
    b = np.exp(-((x_tr[:, None] - x_te[None, :]) ** 2) / (2.0 * sigma**2)).mean(axis=0)
    return A / b


def as_published(At: np.ndarray, solver: str, *, max_iter: int = 10_000) -> tuple[np.ndarray, float]:
    """The published code's iteration as described in issue #22; returns ``mu`` and the mean log-likelihood.

    Start: the vertex of the largest ``b`` (as fastsm's solvers).  Not [CS] Alg. 2-5: see the module
    docstring for each departure.
    """
    n_te, n_c = At.shape
    b_start = int(np.argmin(At.sum(axis=0)))  # largest b is the smallest column sum of A / b
    mu = np.zeros(n_c)
    mu[b_start] = 1.0
    z = At @ mu
    ll = float(np.mean(np.log(z)))
    for t in range(max_iter):
        g = At.T @ (1.0 / z)                      # gradient of F in mu
        s = int(np.argmax(g))
        if solver == "fw":
            rho = 2.0 / (t + 2.0)
            mu = (1.0 - rho) * mu
            mu[s] += rho
        else:
            active = np.flatnonzero(mu != 0.0)
            v = int(active[np.argmin(g[active])])
            if solver == "afw":
                if g[s] - mu @ g >= mu @ g - g[v]:  # towards step
                    rho = min(1.0 / (t + 2.0), 1.0)
                    mu = (1.0 - rho) * mu
                    mu[s] += rho
                else:                               # away step
                    rho_max = mu[v] / (1.0 - mu[v]) if mu[v] < 1.0 else np.inf
                    rho = max(0.0, min(1.0 / (t + 2.0), rho_max))
                    drop = rho == rho_max
                    mu = (1.0 + rho) * mu
                    mu[v] -= rho
                    if drop:
                        mu[v] = 0.0
                    else:
                        mu[v] -= rho                # the second subtraction
            else:                                   # pfw with d_FW - d_A = e_s + e_v - 2 mu
                rho = max(0.0, min(1.0 / (t + 2.0), mu[v]))
                mu = mu + rho * (-2.0 * mu)
                mu[s] += rho
                mu[v] += rho
        z = At @ mu
        new = float(np.mean(np.log(z))) if np.all(z > 0.0) else -np.inf
        if not np.isfinite(new) or abs(new - ll) <= 1e-4:
            ll = new if np.isfinite(new) else ll
            break
        ll = new
    return mu, ll


def published_runs(d) -> dict[str, dict[float, tuple[int, float]]]:
    """``{solver: {sigma: (nonzeros, in-sample mean log-likelihood)}}`` of the as-published variants."""
    x_tr, x_te = d.X_train[:, 0], d.X_test[:, 0]
    out = {s: {} for s in ("fw", "afw", "pfw")}
    for sigma in SIGMA_GRID:
        At = kliep_matrices(x_tr, x_te, sigma)
        if not np.all(At[:, int(np.argmin(At.sum(axis=0)))] > 0.0):
            continue  # the start vertex has a zero kernel value: the likelihood is -inf
        for solver in out:
            mu, ll = as_published(At, solver)
            out[solver][sigma] = (int(np.count_nonzero(mu)), ll)
    return out


def published_counts(runs, policy: str) -> dict[str, tuple[int, float]]:
    """``{label: (nonzeros, sigma)}`` under a sigma policy, with the demo's labels (AFW's count as "pfw")."""
    picked = {}
    for solver, by_sigma in runs.items():
        rng = POLICIES[policy][0 if solver == "fw" else 1]
        if rng is None:
            picked[solver] = (by_sigma[SIGMA][0], SIGMA)
        else:
            sig = max((s for s in by_sigma if rng[0] <= s <= rng[1]), key=lambda s: by_sigma[s][1])
            picked[solver] = (by_sigma[sig][0], sig)
    return {"fw": picked["fw"], "afw": picked["pfw"], "pfw": picked["afw"]}


# ---------------------------------------------------------------- faithful

def faithful_counts(d) -> dict[str, dict[str, tuple[int, float]]]:
    """``{rule: {solver: (nonzeros, gap)}}`` of fastsm's solvers at sigma = 0.3, and the certified optimum."""
    out = {}
    for rule, opts in RULES.items():
        out[rule] = {}
        for solver in SOLVERS:
            r = shift.estimate_weights(d.X_train, d.X_test, solver=solver, sigma=SIGMA, **opts)
            out[rule][solver] = (r.n_nonzero, r.gap)
    out["optimum: polish, gap <= 1e-8"] = {}
    for solver in SOLVERS:  # the duality gap bounds F* - F: a certified optimum
        r = shift.estimate_weights(d.X_train, d.X_test, solver=solver, sigma=SIGMA, tol=1e-8, polish=True)
        out["optimum: polish, gap <= 1e-8"][solver] = (r.n_nonzero, r.gap)
    return out


def _cell(values) -> str:
    v = np.asarray(values)
    return f"{int(np.median(v)):>4d} [{v.min()}-{v.max()}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="seeds 0-4")
    args = ap.parse_args(argv)
    seeds = range(5 if args.quick else 10)
    t0 = time.perf_counter()
    shift.estimate_weights(*datasets.covariate_shift_toy(seed=0)[:2], sigma=SIGMA)  # compile outside the loop
    rows: dict[str, dict[str, list]] = {}
    gaps: dict[str, dict[str, list]] = {}
    sigmas: dict[str, dict[str, list]] = {}
    for seed in seeds:
        d = datasets.covariate_shift_toy(seed=seed)
        for rule, res in faithful_counts(d).items():
            for solver, (nz, gap) in res.items():
                rows.setdefault(rule, {}).setdefault(solver, []).append(nz)
                gaps.setdefault(rule, {}).setdefault(solver, []).append(gap)
        runs = published_runs(d)
        for label, (nz, _) in published_counts(runs, "sigma = 0.3").items():
            true = {"fw": "fw", "afw": "pfw", "pfw": "afw"}[label]
            rows.setdefault("PUBLISHED sigma 0.3, own labels", {}).setdefault(true, []).append(nz)
        for policy in POLICIES:
            for label, (nz, sigma) in published_counts(runs, policy).items():
                rows.setdefault(f"PUBLISHED {policy}", {}).setdefault(label, []).append(nz)
                sigmas.setdefault(policy, {}).setdefault(label, []).append(sigma)
    head = (f"{'rule':36} {'pg':>12} {'fw':>12} {'afw':>12} {'pfw':>12}  {'PFW<AFW<FW':>10}  "
            f"{'median gap fw / afw / pfw':>27}")
    print(f"[CS] §III-D toy, seeds {seeds.start}-{seeds.stop - 1}: nonzero coefficients, median [min-max]; "
          f"paper: KLIEP 180, FWCS 73, AFWCS 18, PFWCS 8")
    print(head)
    print("-" * len(head))
    for rule, by in rows.items():
        order = np.mean([p < a < f for f, a, p in zip(by["fw"], by["afw"], by["pfw"], strict=True)])
        cells = " ".join(f"{_cell(by[s]):>12}" if s in by else f"{'-':>12}" for s in SOLVERS)
        g = gaps.get(rule)
        gap = " / ".join(f"{np.median(g[s]):.1e}" for s in ("fw", "afw", "pfw")) if g else "-"
        print(f"{rule:36} {cells}  {order:10.0%}  {gap:>27}")
    print()
    print("faithful: fastsm's solvers at sigma = 0.3, polish=False but on the optimum row (polish=True)")
    print("PUBLISHED: the departures of the authors' code (module docstring), NOT [CS] Alg. 2-5, with the demo's")
    print("labels (AFW's count in the pfw column, PFW's in the afw column) except the 'own labels' row; sigma chosen:")
    for policy, by in sigmas.items():
        print(f"  {policy:28} " + "  ".join(f"{lab}: {np.median(v):.3g} [{min(v):.3g}-{max(v):.3g}]"
                                             for lab, v in by.items()))
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
