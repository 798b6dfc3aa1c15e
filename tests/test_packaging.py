"""What a packager checks: the license and changelog shipped, the extras, the version (CI's .ci/package builds
and installs the wheel itself)."""

import pathlib
import re

import pytest

import fastsm

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
