"""The asv history graph of ``docs/performance.md``, drawn from ``asv publish``'s output.

Run from the repository root after ``asv run`` and ``asv publish`` (docs/performance.md gives the
commands)::

    python docs/figures/asv_history.py [--bench tgp.Predict.time_predict_sm_256_points]

Reads ``asv_bench/html/index.json`` and the benchmark's graph JSON (every machine and environment
``asv publish`` wrote) and writes ``docs/img/asv_history.png``: one line per parameter value, commits
in history order, labelled with their short hashes.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bench", default="tgp.Predict.time_predict_sm_256_points")
    p.add_argument("--html", type=pathlib.Path, default=ROOT / "asv_bench" / "html")
    p.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "img" / "asv_history.png")
    a = p.parse_args()
    if not (a.html / "index.json").is_file():
        raise SystemExit(f"no {a.html / 'index.json'}: run asv run and asv publish first")
    index = json.loads((a.html / "index.json").read_text())
    params = index["benchmarks"][a.bench]["params"]
    names = index["benchmarks"][a.bench]["param_names"]
    unit = index["benchmarks"][a.bench].get("unit", "")
    files = [f for f in (a.html / "graphs").rglob(f"{a.bench}.json") if "summary" not in f.parts]
    if not files:
        raise SystemExit(f"no graph for {a.bench} under {a.html}: run asv run and asv publish first")
    fig, ax = plt.subplots(figsize=(8, 4))
    for f in sorted(files):
        series = json.loads(f.read_text())
        revs = [r for r, _ in series]
        for k, value in enumerate(params[0] if params else [None]):
            ys = [v[k] if isinstance(v, list) else v for _, v in series]
            label = f"{names[0]} = {value}" if params else a.bench
            ax.plot(range(len(revs)), ys, marker="o", label=label)
        ax.set_xticks(range(len(revs)))
        ax.set_xticklabels([index["revision_to_hash"][str(r)][:7] for r in revs], rotation=30, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"{a.bench.split('.')[-1]} [{unit or 's'}]")
    ax.set_xlabel("commit (oldest → newest)")
    ax.set_title(f"asv: {a.bench}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, dpi=100, metadata={"Software": None})
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
