"""fastsm.cli: the command line (``python -m fastsm ...``); ``digits``' pipeline on a small subset."""

import re

import numpy as np
import pytest

from fastsm import datasets
from fastsm.cli import main
from fastsm.cli.digits import Result, euclidean_error, format_table, run_split, verdict


def test_compile_runs_every_kernel_family_with_a_progress_line_each(capsys):
    """#54 item 6: ``python -m fastsm compile`` warms every kernel family (a container image's build step)."""
    from fastsm.cli.compile import _steps

    names = [name for name, _ in _steps(1)]
    assert len(set(names)) == len(names) >= 10
    assert main(["compile", "--threads", "1", "--jobs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "in this process" in out[0]
    lines = [ln for ln in out if ln.startswith("[")]
    assert len(lines) == len(names)
    for k, (line, name) in enumerate(zip(lines, names, strict=True), 1):
        assert re.fullmatch(rf"\[ ?{k}/{len(names)}\] {re.escape(name)} \.\.\. \d+\.\d s", line), line
    assert re.fullmatch(r"kernels ready in \d+\.\d s", out[-1])


def test_compile_runs_its_steps_in_processes_side_by_side(capsys):
    """#75: ``compile``'s steps are self-contained and run in ``--jobs`` processes, each reported once.  The
    workers start no first-run helpers, and the caller's environment is left as it was (before, ``main`` set
    ``FASTSM_COMPILE_HELPER=0`` in it: every later process of the test suite started without helpers)."""
    import os

    from fastsm._prefetch import ENV
    from fastsm.cli.compile import GROUPS, _steps

    names = [name for name, _ in _steps(1)]
    assert sorted(k for group in GROUPS for k in group) == list(range(len(names)))  # every step, once
    before = os.environ.get(ENV)
    assert main(["compile", "--threads", "1", "--jobs", "2"]) == 0
    assert os.environ.get(ENV) == before
    out = capsys.readouterr().out.splitlines()
    assert "in 2 processes" in out[0]
    done = {}
    for line in out[1:-1]:
        m = re.fullmatch(r"\[ ?(\d+)/(\d+)\] (.+) \.\.\. \d+\.\d s", line)
        assert m and int(m.group(2)) == len(names), line
        done[int(m.group(1))] = m.group(3)
    assert done == {k: name for k, name in enumerate(names, 1)}
    with pytest.raises(SystemExit):
        main(["compile", "--jobs", "0"])


def test_euclidean_error_is_the_row_norm():
    rng = np.random.default_rng(0)
    Y, P = rng.normal(size=(7, 4)), rng.normal(size=(7, 4))
    np.testing.assert_allclose(euclidean_error(Y, P), np.linalg.norm(Y - P, axis=1), rtol=1e-15)


def test_pipeline_on_a_subset_selects_on_training_data_and_beats_the_training_mean():
    pytest.importorskip("sklearn")
    Xtr, Xte, Ytr, Yte = datasets.digits_reconstruction(2, seed=0)
    Xtr, Ytr, Xte, Yte = Xtr[:150], Ytr[:150], Xte[:60], Yte[:60]
    results = run_split(Xtr, Xte, Ytr, Yte, cv=3)
    assert [r.method for r in results] == ["SMTGP", "KLTGP", "IKLTGP", "GPR", "kernel ridge", "W-KNN"]
    mean = euclidean_error(Yte, np.full_like(Yte, Ytr.mean(0))).mean()
    for r in results:
        assert np.isfinite(r.error) and r.fit_seconds > 0 and r.predict_seconds > 0
        # every method learns something: below predicting the training mean of the centre pixels
        # (measured: mean predictor 1.456; methods 0.748 (SMTGP) ... 0.982 (IKLTGP))
        assert r.error < mean, (r.method, r.error, mean)
    assert "a=" in results[0].chosen and "a=" not in results[1].chosen
    text = format_table(results)
    best = min(results, key=lambda r: r.error)
    starred = [line for line in text.splitlines() if f"{best.error:7.4f}*" in line]
    assert len(starred) == 1 and starred[0].startswith(best.method)


def test_verdict_names_the_best_method_with_numbers():
    rs = [Result("SMTGP", 0.5, 0.1, 1.0, 0.1, ""), Result("KLTGP", 0.4, 0.1, 1.0, 0.1, ""),
          Result("GPR", 0.6, 0.1, 1.0, 0.1, "")]
    assert verdict("t", rs) == "t: SMTGP is NOT best: KLTGP 0.4000 vs SMTGP 0.5000 (25.0% higher)."
    rs[0] = Result("SMTGP", 0.3, 0.1, 1.0, 0.1, "")
    assert verdict("t", rs) == "t: SMTGP is best (0.3000); next KLTGP 0.4000 (25.0% higher)."
