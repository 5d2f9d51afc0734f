"""``missive new-driver NAME`` writes a driver distribution that installs
(``pip install`` of the folder, not editable) and passes the driver contract
out of the box, run by pytest in a subprocess with nothing but the installed
packages: Missive's test kit arrives through its pytest plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from venvs import layered_venv, pip

from missive.cli.main import cli
from missive.scaffold import core_requirement


def test_skeleton_installs_and_passes_the_contract(tmp_path: Path) -> None:
    written = subprocess.run(
        [sys.executable, "-m", "missive", "new-driver", "acme-cloud", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert written.returncode == 0, written.stderr
    folder = tmp_path / "missive-acme-cloud"
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} == {
        "pyproject.toml",
        "README.md",
        "missive_acme_cloud/__init__.py",
        "missive_acme_cloud/plugin.py",
        "missive_acme_cloud/settings.py",
        "missive_acme_cloud/driver.py",
        "tests/test_contract.py",
        "tests/test_settings.py",
    }
    python = layered_venv(tmp_path / "venv")
    pip(python, "install", "--quiet", "--no-deps", str(folder))
    # Run from the parent folder, so the package comes from the installed copy, not the source tree.
    result = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-rA", "missive-acme-cloud/tests"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "8 passed" in result.stdout, result.stdout  # the 6 contract tests and 2 of settings
    assert "missive-acme-cloud 0.1.0" in result.stdout  # found through its installed entry point


def test_names_and_existing_folders_are_refused(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["new-driver", "My Driver", "--output", str(tmp_path)])
    assert bad.exit_code == 1 and "must be lower-case letters and digits" in bad.output
    assert runner.invoke(cli, ["new-driver", "echo2", "--output", str(tmp_path)]).exit_code == 0
    again = runner.invoke(cli, ["new-driver", "echo2", "--output", str(tmp_path)])
    assert again.exit_code == 1 and "exists already; nothing written" in again.output
    shipped = runner.invoke(cli, ["new-driver", "llamacpp", "--output", str(tmp_path)])
    assert shipped.exit_code == 1 and "Missive ships the driver 'llamacpp'" in shipped.output
    assert not (tmp_path / "missive-llamacpp").exists()


@pytest.mark.parametrize(
    ("version", "requirement"),
    [
        ("0.1.0", "missive-server>=0.1,<0.2"),
        ("0.12.3", "missive-server>=0.12,<0.13"),
        ("2.3.0", "missive-server>=2.3,<3"),
    ],
)
def test_the_skeleton_pins_the_releases_that_keep_the_plugin_api(version: str, requirement: str) -> None:
    assert core_requirement(version) == requirement
