"""The figures of docs/shift.md: the toy of [CS] §III-D and the duality gap against iterations.

Run: ``python benchmarks/shift_figures.py`` (needs matplotlib: ``pip install -e ".[docs]"``);
writes ``docs/img/shift_toy.png`` and ``docs/img/shift_gap.png``.
"""

from __future__ import annotations

import pathlib
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fastsm import datasets, shift, tgp  # noqa: E402
from fastsm.cli.shift import SIGMA, TOY_PARAMS  # noqa: E402

OUT = pathlib.Path(__file__).resolve().parents[1] / "docs" / "img"


def _pdf(x, m, s):
    return np.exp(-0.5 * ((x - m) / s) ** 2) / (s * np.sqrt(2 * np.pi))


def toy_figure(seed: int = 0) -> pathlib.Path:
    d = datasets.covariate_shift_toy(seed=seed)
    grid = np.linspace(-1.2, 2.0, 400)[:, None]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    ax[0].plot(grid[:, 0], _pdf(grid[:, 0], 0, 0.3) / _pdf(grid[:, 0], 0.5, 0.5), "k-", label="true ratio")
    styles = {"pfw": ("o", "pfw (+ polish), gap 1e-8"), "pg": ("x", "pg (Sugiyama et al.), own rule")}
    for solver, (marker, label) in styles.items():
        iw = shift.estimate_weights(d.X_train, d.X_test, solver=solver, sigma=SIGMA, polish=solver != "pg")
        ax[0].plot(d.X_train[:, 0], iw.weights, marker, ms=3, alpha=0.6,
                   label=f"{label}: {iw.n_nonzero} nonzero")
    ax[0].set(xlabel="x", ylabel="w(x)", title=f"KLIEP weights at the training points (sigma = {SIGMA})",
              ylim=(-0.1, 4.5))
    ax[0].legend(fontsize=8)
    iw = shift.estimate_weights(d.X_train, d.X_test, sigma=SIGMA)
    m0 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, methods=("kl", "sm"))
    m1 = tgp.fit(d.X_train, d.Y_train, TOY_PARAMS, methods=("kl", "sm"), sample_weight=iw.weights)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # far-out grid points are extrapolated
        y0 = tgp.predict(m0, grid, method="sm").y[:, 0]
        y1 = tgp.predict(m1, grid, method="sm").y[:, 0]
    e0 = np.mean((tgp.predict(m0, d.X_test, method="sm").y - d.Y_test) ** 2)
    e1 = np.mean((tgp.predict(m1, d.X_test, method="sm").y - d.Y_test) ** 2)
    ax[1].plot(d.X_train[:, 0], d.Y_train[:, 0], ".", color="0.7", ms=3, label="training")
    ax[1].plot(d.X_test[:, 0], d.Y_test[:, 0], ".", color="tab:green", ms=3, label="test")
    ax[1].plot(grid[:, 0], -2 * grid[:, 0] ** 3 + 3 * np.sinc(grid[:, 0]) + 1, "k--", lw=1, label="truth")
    ax[1].plot(grid[:, 0], y0, "tab:blue", label=f"SMTGP (test MSE {e0:.4f})")
    ax[1].plot(grid[:, 0], y1, "tab:red", label=f"IW-SMTGP (test MSE {e1:.4f})")
    ax[1].set(xlabel="x", ylabel="y", title="SMTGP with and without the weights", ylim=(-8, 6))
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    path = OUT / "shift_toy.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def gap_figure(seed: int = 0, iters: int = 10_000) -> pathlib.Path:
    d = datasets.covariate_shift_toy(seed=seed)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for solver in ("fw", "afw", "pfw"):
        iw = shift.estimate_weights(d.X_train, d.X_test, solver=solver, sigma=SIGMA, polish=False, tol=1e-8,
                                    max_iter=iters)
        ax.loglog(np.arange(1, iw.gap_history.size + 1), iw.gap_history, label=f"{solver} ({iw.n_nonzero} nonzero)")
    iw = shift.estimate_weights(d.X_train, d.X_test, solver="pfw", sigma=SIGMA, tol=1e-12)
    ax.loglog(np.arange(1, iw.gap_history.size + 1), np.maximum(iw.gap_history, 1e-16), "k.-",
              label=f"pfw + polish ({iw.n_iter} FW it. + {iw.n_polish} rounds)")
    ax.set(xlabel="iteration", ylabel="duality gap <g, d_FW>", title="[CS] §III-D toy, sigma = 0.3")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = OUT / "shift_gap.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    print(toy_figure())
    print(gap_figure())
