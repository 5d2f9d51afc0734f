"""The core type-checks: mypy in strict mode over core/missive, with the
configuration in pyproject.toml ([tool.mypy]). The core ships ``py.typed``,
so plugins type-check against these annotations; an error here is a broken
promise to them (or a bug)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def _mypy() -> list[str] | None:
    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    found = shutil.which("mypy")
    return [found] if found else None


def test_the_core_type_checks() -> None:
    command = _mypy()
    if command is None:
        pytest.skip("mypy is not installed (it is in the test extra: scripts/setup installs it)")
    out = subprocess.run(
        [
            *command,
            "--python-executable",
            sys.executable,
        ],  # the packages of the environment running the tests
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout and "core/missive" not in out.stdout
