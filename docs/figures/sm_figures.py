"""[SM]'s figures from fastsm's public API: Figs. 3–8 (toys), Fig. 1 (log phi vs error), reconstructed digits.

Run from the repository root (needs ``pip install -e ".[docs]"``)::

    python docs/figures/sm_figures.py            # all three figures into docs/img/, tables to stdout
    python docs/figures/sm_figures.py --only toys

Writes ``docs/img/sm_toys.png`` ([SM] Figs. 3–8: the toys' training data and the KLTGP and SMTGP
predictions, with Table 1's kernels and alpha/beta), ``docs/img/sm_certainty.png`` ([SM] Fig. 1:
log phi_alpha against the test error, alpha = 0.8, beta = 0.5 as in the paper, on the 4×4 digits
task instead of USPS) and ``docs/img/digits_reconstruction.png``.  It also prints the toys'
GPR / W-KNN errors beside [SM] Table 3.  Everything is seeded and fastsm's predictions do not
depend on the thread count, so a rerun writes the same figures.
"""

from __future__ import annotations

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fastsm import datasets, tgp  # noqa: E402
from fastsm.cli.demo import PAPER  # noqa: E402
from fastsm.cli.digits import baselines, euclidean_error, fit_tgps  # noqa: E402

IMG = pathlib.Path(__file__).resolve().parent.parent / "img"
#: [SM] Table 3 (GPR, W-KNN; mean absolute error on the toys).
PAPER_TABLE3 = {"toy1": {"GPR": 0.17603, "W-KNN": 0.15152}, "toy2": {"GPR": 0.19011, "W-KNN": 0.16986}}
META = {"Software": None}  # no version string in the PNG: reruns give the same bytes across matplotlib patches


def _toy_params(name: str) -> tgp.TGPParams:
    cfg = PAPER[name]
    return tgp.TGPParams(gamma_x=0.2, gamma_y=20.0, lambda_x=1e-4, lambda_y=1e-4, alpha=cfg["alpha"], beta=cfg["beta"])


def toys(out: pathlib.Path) -> None:
    fig, axes = plt.subplots(2, 3, figsize=(12, 7), sharey="row")
    figs = {"toy1": (3, 5, 6), "toy2": (4, 7, 8)}
    for row, (name, make) in enumerate((("toy1", datasets.toy1), ("toy2", datasets.toy2))):
        Xtr, Xte, Ytr, Yte = make(0)
        model = tgp.fit(Xtr, Ytr, _toy_params(name))
        f_data, f_kl, f_sm = figs[name]
        ax = axes[row, 0]
        ax.scatter(Xtr[:, 0], Ytr[:, 0], s=4, c="0.3")
        ax.set_title(f"[SM] Fig. {f_data}: {name} training data (N = {len(Xtr)})", fontsize=9)
        for col, method, fno in ((1, "kl", f_kl), (2, "sm", f_sm)):
            pred = tgp.predict(model, Xte, method=method)
            err = np.abs(pred.y - Yte).mean(axis=1)
            ax = axes[row, col]
            ax.scatter(Xte[:, 0], Yte[:, 0], s=3, c="0.75", label="test truth")
            ax.scatter(Xte[:, 0], pred.y[:, 0], s=3, c="C3" if method == "sm" else "C0", label="prediction")
            label = {"kl": "KLTGP", "sm": f"SMTGP (α={model.params.alpha:g}, β={model.params.beta:g})"}[method]
            ax.set_title(f"[SM] Fig. {fno}: {label}\nerror {err.mean():.4f} (±{err.std():.3f}); "
                         f"paper {PAPER[name][method]:.4g}", fontsize=9)
            ax.legend(fontsize=7, markerscale=3, loc="upper left")
    for ax in axes.flat:
        ax.set_xlabel("x")
    axes[0, 0].set_ylabel("y")
    axes[1, 0].set_ylabel("y")
    fig.tight_layout()
    fig.savefig(out / "sm_toys.png", dpi=110, metadata=META)
    plt.close(fig)


def toy_baselines() -> None:
    """GPR and W-KNN on the toys beside [SM] Table 3 (hyperparameters on training data only)."""
    print("[SM] Table 3 on the toys (mean absolute error over the test points; paper beside ours)")
    print(f"{'data':5} {'method':6} {'ours':>7} {'paper':>8}  chosen")
    for name, make in (("toy1", datasets.toy1), ("toy2", datasets.toy2)):
        Xtr, Xte, Ytr, Yte = make(0)
        for label, est, describe in baselines(Xtr, Ytr, cv=5):
            if label == "kernel ridge":
                continue
            est.fit(Xtr, Ytr)
            err = np.abs(est.predict(Xte).reshape(Yte.shape) - Yte).mean()
            print(f"{name:5} {label:6} {err:7.4f} {PAPER_TABLE3[name][label]:8.5f}  {describe(est)}")


def digits(out: pathlib.Path, which: set[str]) -> None:
    Xtr, Xte, Ytr, Yte = datasets.digits_reconstruction(4, 0)
    f = fit_tgps(Xtr, Ytr)
    mask = datasets.center_mask(4)
    if "certainty" in which:
        # [SM] Fig. 1's setting: SMTGP with alpha = 0.8, beta = 0.5, the selected kernels
        model = tgp.with_alpha(f.model, 0.8, 0.5)
        pred = tgp.predict(model, Xte, method="sm")
        err = euclidean_error(Yte, pred.y)
        r = float(np.corrcoef(pred.log_certainty, err)[0, 1])
        print(f"Fig. 1 (digits 4x4, alpha 0.8, beta 0.5): corr(log phi, error) = {r:.3f}, "
              f"n = {len(err)}, error {err.mean():.4f}")
        sel = tgp.predict(f.model, Xte, method="sm")
        err_s = euclidean_error(Yte, sel.y)
        r_s = float(np.corrcoef(sel.log_certainty, err_s)[0, 1])
        print(f"   selected alpha {f.model.params.alpha:g}: corr(log phi, error) = {r_s:.3f}")
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for ax, p, e, rr, title in ((axes[0], pred, err, r, "α = 0.8, β = 0.5 ([SM] Fig. 1's setting)"),
                                    (axes[1], sel, err_s, r_s, f"selected α = {f.model.params.alpha:g}")):
            ax.scatter(p.log_certainty, e, s=4, alpha=0.5)
            ax.set_xlabel("log φ_α(x, ŷ)")
            ax.set_ylabel("test error ‖ŷ − y‖")
            ax.set_title(f"SMTGP, digits 4×4 centre: {title}\ncorrelation {rr:.3f} (n = {len(e)})", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "sm_certainty.png", dpi=110, metadata=META)
        plt.close(fig)
    if "digits" in which:
        preds = {"SMTGP": tgp.predict(f.model, Xte, method="sm").y,
                 "KLTGP": tgp.predict(f.model, Xte, method="kl").y,
                 "IKLTGP": tgp.predict(f.model, Xte, method="ikl").y}
        for label, est, _ in baselines(Xtr, Ytr, cv=5):
            preds[label] = est.fit(Xtr, Ytr).predict(Xte)
        show = np.arange(0, len(Xte), len(Xte) // 10)[:10]
        rows = ["truth", "input", *preds]
        fig, axes = plt.subplots(len(rows), len(show), figsize=(1.1 * len(show), 1.2 * len(rows)))
        for j, i in enumerate(show):
            for k, label in enumerate(rows):
                img = np.zeros((8, 8))
                img[~mask] = Xte[i]
                if label == "truth":
                    img[mask] = Yte[i]
                elif label == "input":
                    img[mask] = np.nan
                else:
                    img[mask] = preds[label][i]
                ax = axes[k, j]
                ax.imshow(img, cmap="gray_r", vmin=-1, vmax=1)
                ax.set_xticks([])
                ax.set_yticks([])
                if j == 0:
                    ax.set_ylabel(label, fontsize=7, rotation=0, ha="right", va="center")
                if label not in ("truth", "input"):
                    ax.set_title(f"{euclidean_error(Yte[i:i + 1], preds[label][i:i + 1])[0]:.2f}", fontsize=6,
                                 pad=1)
        fig.suptitle("Central 4×4 pixels of held-out digits reconstructed from the other 48 (error ‖ŷ − y‖ above "
                     "each)", fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "digits_reconstruction.png", dpi=110, metadata=META)
        plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", choices=["toys", "baselines", "certainty", "digits"],
                   default=["toys", "baselines", "certainty", "digits"])
    p.add_argument("--out", type=pathlib.Path, default=IMG)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    which = set(a.only)
    if "toys" in which:
        toys(a.out)
    if "baselines" in which:
        toy_baselines()
    if which & {"certainty", "digits"}:
        digits(a.out, which)


if __name__ == "__main__":
    main()
