"""What a packager checks: the license and changelog shipped, the extras, the version (CI's .ci/package builds
and installs the wheel itself)."""

import fnmatch
import os
import pathlib
import re
import warnings

import pytest

import fastsm
from fastsm import datasets, tgp
from tests.conftest import run_python

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_changelog_has_an_entry_for_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text
    heads = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, flags=re.M)
    assert heads and heads[0][0] == fastsm.__version__, heads[:2]


def test_license_file_matches_the_declared_license_and_ships():
    project = PYPROJECT["project"]
    assert project["license"] == "BSD-3-Clause" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")
    assert (ROOT / "fastsm" / "py.typed").exists()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["fastsm"]


def test_the_asv_extra_installs_no_kliep_peer():
    extras = PYPROJECT["project"]["optional-dependencies"]
    names = {re.split(r"[<>=\[ ;]", r)[0].lower() for r in extras["asv"]}
    assert names == {"asv", "virtualenv"}
    assert not names & {"adapt", "densratio", "tensorflow"}
    assert {"adapt", "densratio"} <= {re.split(r"[<>=\[ ;]", r)[0].lower() for r in extras["peers"]}


def test_readme_use_snippet_runs():
    """Regression test of #6, item 17."""
    text = open(os.path.join(ROOT, "README.md")).read()
    block = text.split("## Use", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        exec(compile(block, "README.md", "exec"), {})


def test_version_and_reprs(toy300):
    """Regression test of #6, item 17."""
    import fastsm

    out = run_python("import runpy, sys; sys.argv = ['fastsm', '--version']; "
                     "runpy.run_module('fastsm', run_name='__main__')")
    assert out.stdout.strip() == f"fastsm {fastsm.__version__}"
    Xtr, Xte, Ytr, _ = toy300
    m = tgp.fit(Xtr, Ytr)
    assert len(repr(m)) < 300 and len(repr(tgp.predict(m, Xte[:3], method="kl"))) < 200
    assert "toy1" in datasets.__all__ and "gmm_manifold" in datasets.__all__


def test_a_numba_below_the_floor_gets_an_import_error_naming_it():
    """#75: Numba 0.59-0.62 (then admitted) failed in fastsm/_cache.py with an AttributeError at the first kernel."""
    floor = re.search(r'"numba>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert fastsm._NUMBA_FLOOR == tuple(int(p) for p in floor.split("."))
    run = run_python("import numba; numba.__version__ = '0.62.1'; import fastsm")
    assert run.returncode != 0
    assert f"ImportError: fastsm needs Numba >= {floor}, and Numba 0.62.1 is installed" in run.stderr


def test_import_leaves_what_the_first_use_needs_for_then():
    """``import fastsm`` imports neither the subpackages a TGP user may never touch (they come on first use, as
    attributes) nor SciPy's KD-tree and k-means (with the local models): ~0.3 s of start-up."""
    run = run_python("""
        import sys
        import fastsm
        later = ("fastsm.shift", "fastsm.gmm", "fastsm.datasets", "scipy.spatial", "scipy.cluster")
        print(sorted(m for m in later if m in sys.modules))
        print(fastsm.shift.estimate_weights.__module__, fastsm.gmm.__name__, fastsm.datasets.toy1.__name__)
        print(sorted({"shift", "gmm", "datasets"} - set(dir(fastsm))))
        try:
            fastsm.no_such_thing
        except AttributeError as err:
            print(err)
    """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[]", "fastsm.shift.weights fastsm.gmm toy1", "[]",
                                       "module 'fastsm' has no attribute 'no_such_thing'"]


def test_the_cuda_extras_hold_cupy_alone_and_the_package_ships_fastsm_cuda():
    """#76: ``fastsm[cuda]`` (CUDA 13) and ``fastsm[cuda12]`` install CuPy and nothing else; no test extra asks
    for a GPU package (CI has none)."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    for name, wheel in (("cuda", "cupy-cuda13x"), ("cuda12", "cupy-cuda12x")):
        assert [re.split(r"[<>=\[ ;]", r)[0].lower() for r in extras[name]] == [wheel]
    assert not any("cupy" in r or "torch" in r for r in extras["test"])
    includes = PYPROJECT["tool"]["setuptools"]["packages"]["find"].get("include", ["*"])
    assert any(fnmatch.fnmatch("fastsm.cuda", pattern) for pattern in includes)
