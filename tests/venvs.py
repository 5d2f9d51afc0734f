"""Virtual environments for tests that install distributions the way users
do (``pip install`` of a folder or a wheel, never editable)."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

__all__ = ["layered_venv", "fresh_venv", "pip"]


def layered_venv(path: Path) -> Path:
    """A virtual environment at ``path`` that also sees the packages of the
    running one (a ``.pth`` file adds its site-packages, their own ``.pth``
    files included, so editable installs too), without pip of its own: a
    test installs one distribution into it (``pip(python, "install",
    "--no-deps", folder)``, pip from the running environment) and leaves the
    running environment untouched. Returns its ``python``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    lines = [f"import site; site.addsitedir({parent!r})" for parent in site.getsitepackages()]
    (Path(purelib) / "_parent_environment.pth").write_text("\n".join(lines) + "\n")
    return python


def fresh_venv(path: Path) -> Path:
    """A new virtual environment at ``path`` with its own pip and nothing
    else (no system or parent packages). Returns its ``python``."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin" / "python"


def pip(python: Path, *args: str, timeout: float = 600) -> str:
    """Run ``python -m pip ARGS`` and return its output.

    Raises:
        AssertionError: pip failed; the message holds its output.
    """
    env = {k: v for k, v in os.environ.items() if k != "PIP_REQUIRE_VIRTUALENV"}
    result = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert result.returncode == 0, f"pip {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout
