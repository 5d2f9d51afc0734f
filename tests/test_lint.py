"""The repository lints clean: ruff with the rules of pyproject.toml
([tool.ruff]: pycodestyle errors, pyflakes, import order, pyupgrade and
bugbear, lines of at most 110 characters). A finding here is a real one:
an unused import, a loop variable a closure reads late, a ``zip`` that
silently drops the tail of the longer input, or a line too long to read.
Where a rule is wrong for a line, the line says so (``# noqa: RULE -
why``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent

#: What is checked, relative to the repository root. The remaining core
#: packages (driver, config, context, messages, tools, thinking, kernel,
#: server, api.py, __init__.py) join when their restructuring lands; then
#: this is the whole repository (``ruff check .``).
PATHS = (
    "conftest.py",
    "tests",
    "plugins",
    "examples",
    "benchmarks",
    "scripts",
    *(
        f"core/missive/{name}"
        for name in (
            "engine",
            "remote",
            "routing",
            "models",
            "media",
            "reasoning",
            "sampling",
            "protocol",
            "console",
            "cli",
            "default_plugins",
            "scaffold",
            "testing",
            "batches",
            "keys",
            "threads",
            "asgi.py",
            "__main__.py",
            "pytest_plugin.py",
        )
    ),
)


def test_the_repository_lints_clean() -> None:
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed (it is in the test extra: scripts/setup installs it)")
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
