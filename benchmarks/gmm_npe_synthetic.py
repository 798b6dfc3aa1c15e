"""[GMM] §5.1 synthetic experiments: accuracy tables in the shape of Tables 1–8.

For each setting (manifold dimension l, range of t, zero or shifted means)
and each K in {1, 5} and d: generate ``datasets.gmm_manifold`` (200 mixtures,
two classes), hold out 10 % (stratified, ``--trials`` random splits), fit
GMM-NPE on the training mixtures' components (``n_components = l``), and
classify every held-out mixture by its nearest training mixture (1-NN) under
GMM-NPE1/2/3 (D1, D2, EMD) and the baselines KL_WE, KL_MB, KL_VAR.  The row
``l_hat`` is the number of paper-form eigenvalues above 1e-3 of the largest.

Run: ``python benchmarks/gmm_npe_synthetic.py --tables 1 2 --dims 10 20 30``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fastsm import datasets, gmm

#: table -> (l, t_range, shifted means)
SETTINGS = {1: (1, (-3.0, 5.0), False), 2: (1, (0.0, 5.0), False), 3: (1, (-3.0, 5.0), True),
            4: (1, (0.0, 5.0), True), 5: (2, (-3.0, 5.0), False), 6: (2, (0.0, 5.0), False),
            7: (2, (-3.0, 5.0), True), 8: (2, (0.0, 5.0), True)}
ROWS = ["GMM-NPE1", "GMM-NPE2", "GMM-NPE3", "KL_WE", "KL_MB", "KL_VAR"]


def run_cell(l, t_range, shifted, K, d, trials, seed, projection):
    mixtures, y = datasets.gmm_manifold(d, K, l=l, t_range=t_range, shifted_means=shifted, seed=seed)
    rng = np.random.default_rng(seed + 1)
    acc = {r: [] for r in ROWS}
    lhat = []
    for _ in range(trials):
        test = np.concatenate([rng.choice(np.flatnonzero(y == c), 10, replace=False) for c in (0, 1)])
        train = np.setdiff1d(np.arange(len(y)), test)
        tr, te = [mixtures[i] for i in train], [mixtures[i] for i in test]
        emb = gmm.fit_npe(tr, l, n_neighbors=10, projection=projection)
        lhat.append(emb.estimated_dim)
        dists = {
            "GMM-NPE1": gmm.npe_pairwise(emb, te, tr, "d1"),
            "GMM-NPE2": gmm.npe_pairwise(emb, te, tr, "d2"),
            "GMM-NPE3": gmm.npe_pairwise(emb, te, tr, "emd"),
            "KL_WE": gmm.pairwise(te, tr, "we"),
            "KL_MB": gmm.pairwise(te, tr, "mb"),
            "KL_VAR": gmm.pairwise(te, tr, "var"),
        }
        for r, D in dists.items():
            acc[r].append(np.mean(y[train][np.argmin(D, axis=1)] == y[test]))
    return {r: float(np.mean(v)) for r, v in acc.items()}, int(np.median(lhat))


def main(tables, dims, Ks=(1, 5), trials=1, seed=0, projection="npe"):
    for tab in tables:
        l, t_range, shifted = SETTINGS[tab]
        print(f"\nTable {tab}: l = {l}, t in {list(t_range)}, means {'m1 = 0, m2 = 10h' if shifted else '0'}; "
              f"N = 800, M = 200, 1-NN, {trials} random 90/10 split(s), projection={projection}", flush=True)
        cols = [(K, d) for K in Ks for d in dims]
        print(f"{'':9}" + "".join(f"  K={K},d={d:<3}" for K, d in cols), flush=True)
        res = {}
        t0 = time.perf_counter()
        for K, d in cols:
            res[(K, d)] = run_cell(l, t_range, shifted, K, d, trials, seed, projection)
        for r in ROWS:
            print(f"{r:9}" + "".join(f"  {res[c][0][r]:9.2f}" for c in cols), flush=True)
        print(f"{'l_hat':9}" + "".join(f"  {res[c][1]:9d}" for c in cols), flush=True)
        print(f"({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--tables", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dims", type=int, nargs="+", default=[10, 20])
    p.add_argument("--K", type=int, nargs="+", default=[1, 5])
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--projection", default="npe", choices=["npe", "paper"])
    a = p.parse_args()
    main(a.tables, a.dims, a.K, a.trials, a.seed, a.projection)
