"""[GMM] §5.1's accuracy tables (Tables 1–8) as plots, from fastsm's public API.

Run from the repository root::

    python docs/figures/gmm_figures.py                 # docs/img/gmm_tables.png, about 10 min on 2 cores
    python docs/figures/gmm_figures.py --trials 1      # quicker, noisier

Each cell is ``benchmarks/gmm_npe_synthetic.py``'s ``run_cell`` (``datasets.gmm_manifold``, stratified 90/10
splits, 1-NN under GMM-NPE1/2/3 and KL_WE/MB/VAR; docs/gmm.md gives the protocol).  Seeded: a rerun draws
the same figure.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gmm_npe_synthetic import ROWS, SETTINGS, run_cell  # noqa: E402

STYLE = {"GMM-NPE1": ("C3", "o"), "GMM-NPE2": ("C1", "s"), "GMM-NPE3": ("C5", "^"),
         "KL_WE": ("C0", "x"), "KL_MB": ("C2", "+"), "KL_VAR": ("C4", "d")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dims", type=int, nargs="+", default=[10, 20, 30])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "img" / "gmm_tables.png")
    a = p.parse_args()
    fig, axes = plt.subplots(2, 4, figsize=(15, 7), sharey=True)
    for ax, (tab, (l, t_range, shifted)) in zip(axes.flat, SETTINGS.items(), strict=True):
        for K, ls in ((1, "-"), (5, "--")):
            res = {d: run_cell(l, t_range, shifted, K, d, a.trials, a.seed, "npe")[0] for d in a.dims}
            print(f"Table {tab} K={K}: " + "; ".join(
                f"d={d}: " + " ".join(f"{r}={res[d][r]:.2f}" for r in ROWS) for d in a.dims), flush=True)
            for r in ROWS:
                c, m = STYLE[r]
                ax.plot(a.dims, [res[d][r] for d in a.dims], ls=ls, color=c, marker=m, ms=5,
                        label=f"{r}, K={K}")
        means = "m₂ = 10h" if shifted else "zero means"
        ax.set_title(f"[GMM] Table {tab}: l = {l}, t ∈ [{t_range[0]:g}, {t_range[1]:g}], {means}", fontsize=9)
        ax.set_xticks(a.dims)
        ax.set_xlabel("d")
        ax.set_ylim(0.4, 1.03)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"1-NN accuracy ({a.trials} splits)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=100, metadata={"Software": None})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
