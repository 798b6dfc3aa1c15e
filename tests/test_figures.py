"""The documentation's figure scripts (docs/figures/) run from the public API and reproduce their figures."""

import hashlib
import importlib.util
import json
import pathlib
import sys

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("sklearn")

FIGURES = pathlib.Path(__file__).resolve().parents[1] / "docs" / "figures"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_fig_{name}", FIGURES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_toy_figure_is_reproduced_bit_for_bit(tmp_path):
    sm = _load("sm_figures")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sm.toys(a)
    sm.toys(b)
    assert (a / "sm_toys.png").stat().st_size > 10_000
    assert _digest(a / "sm_toys.png") == _digest(b / "sm_toys.png")


def test_asv_history_reads_asv_publish_output(tmp_path, monkeypatch):
    bench = "tgp.Predict.time_predict_sm_256_points"
    html = tmp_path / "html"
    graph = html / "graphs" / "arch-x86_64" / "machine-vm"
    graph.mkdir(parents=True)
    (html / "index.json").write_text(json.dumps({
        "benchmarks": {bench: {"params": [["250", "1000"]], "param_names": ["N"], "unit": "seconds"}},
        "revision_to_hash": {"3": "a" * 40, "7": "b" * 40}}))
    (graph / f"{bench}.json").write_text(json.dumps([[3, [0.1, 1.0]], [7, [0.08, None]]]))
    out = tmp_path / "h.png"
    monkeypatch.setattr(sys, "argv", ["asv_history.py", "--html", str(html), "--out", str(out)])
    _load("asv_history").main()
    assert out.stat().st_size > 5_000
    monkeypatch.setattr(sys, "argv", ["asv_history.py", "--html", str(tmp_path / "none"), "--out", str(out)])
    with pytest.raises(SystemExit, match="asv publish"):
        _load("asv_history").main()
