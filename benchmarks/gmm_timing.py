"""[GMM] Table 9 shape: ms per mixture pair, and the MAXDET solver against cvxpy.

Table 9 part: d = 15, K in {5, 10, 15, 20}, l_max in {30, 60, 100}; random
full-covariance mixtures; a GMM-NPE projection fitted on them (its cost is
training, not timed).  Two timings per measure: one ``divergence`` /
``npe_distance`` call for a single pair (includes Python overhead), and the
per-pair cost inside one ``pairwise`` / ``npe_pairwise`` call over 20×20 pairs.
The paper's numbers (one 2.3 GHz CPU, MATLAB) are printed beside ours.

MAXDET part: ms per problem of our Numba solver and of cvxpy + Clarabel on
random instances (n = d + 1 = 16, 10 neighbours), and the largest weight
difference.

Run: ``python benchmarks/gmm_timing.py``.
"""

from __future__ import annotations

import time

import numpy as np

from fastsm import gmm
from fastsm._kernels.maxdet import maxdet_weights
from fastsm._threads import thread_limits
from fastsm.cli.bench import best_of

PAPER = {"KL_WE": [17.6, 70.5, 159.2, 282.3], "KL_MB": [14.7, 80.1, 187.3, 323.4],
         "KL_VAR": [32.9, 128.0, 297.5, 528.3], "EMD-KL": [49.3, 1987, 15102, 61123],
         "GMM-NPE1": {30: [7.2, 14.7, 22.1, 30.8], 60: [14.4, 29.6, 46.2, 62.1], 100: [23.9, 49.3, 74.8, 101.6]},
         "GMM-NPE2": {30: [7.4, 14.9, 22.3, 31.1], 60: [14.7, 30.2, 46.5, 62.4], 100: [24.2, 49.6, 74.9, 101.9]}}


def rand_mix(rng, K, d):
    A = rng.normal(size=(K, d, d))
    return gmm.GaussianMixture(np.full(K, 1.0 / K), rng.normal(size=(K, d)), A @ A.transpose(0, 2, 1) / d + np.eye(d))


def table9(d=15, Ks=(5, 10, 15, 20), ls=(30, 60, 100)):
    rng = np.random.default_rng(0)
    print(f"Table 9 shape (d = {d}); ms per mixture pair: ours single call / ours in a 20x20 pairwise call "
          "[paper]; 1 thread")
    print(f"{'measure':9} " + " ".join(f"{'K=' + str(K):>24}" for K in Ks))
    with thread_limits(1):
        sets = {K: [rand_mix(rng, K, d) for _ in range(20)] for K in Ks}
        for name, method in (("KL_WE", "we"), ("KL_MB", "mb"), ("KL_VAR", "var")):
            cells = []
            for i, K in enumerate(Ks):
                f, g = sets[K][0], sets[K][1]
                single = best_of(lambda f=f, g=g, m=method: gmm.divergence(f, g, m)) * 1e3
                batch = best_of(lambda K=K, m=method: gmm.pairwise(sets[K], sets[K], m), 1) * 1e3 / 400
                cells.append(f"{single:7.3f}/{batch:7.3f} [{PAPER[name][i]:6.1f}]")
            print(f"{name:9} " + " ".join(f"{c:>24}" for c in cells), flush=True)
        for l in ls:
            embs = {K: gmm.fit_npe(sets[K], l, n_neighbors=10) for K in Ks}
            for name, meas in (("GMM-NPE1", "d1"), ("GMM-NPE2", "d2"), ("GMM-NPE3", "emd")):
                cells = []
                for i, K in enumerate(Ks):
                    f, g, e = sets[K][0], sets[K][1], embs[K]
                    single = best_of(lambda f=f, g=g, e=e, m=meas: gmm.npe_distance(e, f, g, m)) * 1e3
                    batch = best_of(lambda K=K, e=e, m=meas: gmm.npe_pairwise(e, sets[K], sets[K], m), 1) * 1e3 / 400
                    ref = PAPER.get(name, {}).get(l)
                    cells.append(f"{single:7.3f}/{batch:7.3f} [{ref[i] if ref else float('nan'):6.1f}]")
                print(f"{name + ' l=' + str(l):9} " + " ".join(f"{c:>24}" for c in cells), flush=True)


def maxdet_vs_cvxpy(n=16, m=10, problems=10):
    import cvxpy as cp

    rng = np.random.default_rng(1)
    ours_t, cvx_t, diffs = [], [], []
    for _ in range(problems):
        A = rng.normal(size=(n, n))
        Pi = A @ A.T / n + 0.2 * np.eye(n)
        Ps = []
        for _ in range(m):
            B = rng.normal(size=(n, n))
            Ps.append(Pi + 0.5 * rng.random() * (B @ B.T / n + 0.2 * np.eye(n)))
        ev, V = np.linalg.eigh(Pi)
        Pm = V @ np.diag(ev**-0.5) @ V.T
        Q = np.stack([Pm @ P @ Pm for P in Ps])
        c = np.trace(Q, axis1=1, axis2=2) + 0.1
        with thread_limits(1):
            ours_t.append(best_of(lambda Q=Q, c=c: maxdet_weights(Q, c, 1e-9, 200)))
            w = maxdet_weights(Q, c, 1e-9, 200)[0]
        x = cp.Variable(m, nonneg=True)
        G = sum(x[j] * Q[j] for j in range(m))
        prob = cp.Problem(cp.Minimize(c @ x - cp.log_det(G)), [np.eye(n) - G >> 0])
        t0 = time.perf_counter()
        prob.solve(solver=cp.CLARABEL)  # timed with Clarabel's default tolerances
        cvx_t.append(time.perf_counter() - t0)
        prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        diffs.append(np.abs(w - x.value).max())
    print(f"\nMAXDET (n = {n}, {m} neighbours, {problems} problems): ours {np.median(ours_t) * 1e3:.2f} ms, "
          f"cvxpy+Clarabel {np.median(cvx_t) * 1e3:.2f} ms (median per problem; cvxpy includes its "
          f"compilation), speed-up {np.median(cvx_t) / np.median(ours_t):.1f}x, max |w - w_cvx| = {max(diffs):.1e} "
          "(against Clarabel at 1e-12 tolerances)")


if __name__ == "__main__":
    table9()
    maxdet_vs_cvxpy()
