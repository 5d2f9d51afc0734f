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

ROOT = Path(__file__).parent.parent

#: What is checked, relative to the repository root: all of it (ruff
#: leaves out what .gitignore lists, virtual environments included).
PATHS = (".",)


def test_the_repository_lints_clean() -> None:
    assert importlib.util.find_spec("ruff") is not None, "ruff is in the test extra: ./scripts/setup --test"
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
