"""missive-cpu shipped as a vendor would: the wheels of the core, the
llama.cpp plugin and the distribution, built from this repository into a
wheelhouse, installed into a fresh virtual environment with pip alone
(``pip install --find-links WHEELHOUSE missive-cpu``; every other dependency
from pip's configured index, llama-cpp-python from pip's wheel cache, which
``scripts/setup`` filled), then ``missive serve`` with no configuration
answers through the SDK with the distribution's defaults."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
from venvs import fresh_venv, pip

from missive.testing import serve_process

ROOT = Path(__file__).parent.parent
#: What the wheels are built from, besides the repository's top-level files.
SOURCES = ("core", "plugins/llamacpp", "distributions/missive-cpu")
#: Nothing from the repository on the new environment's path.
CLEAN_ENV = {"PYTHONPATH": ""}


def copy_sources(dest: Path) -> Path:
    """The repository's top-level files and :data:`SOURCES`, without build
    leftovers (a stale ``build/`` would end up in the wheels)."""
    dest.mkdir()
    for item in ROOT.iterdir():
        if item.is_file():
            shutil.copy2(item, dest / item.name)
    ignore = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    for source in SOURCES:
        shutil.copytree(ROOT / source, dest / source, ignore=ignore)
    return dest


def test_missive_cpu_installs_from_wheels_with_pip_alone_and_serves(tmp_path: Path) -> None:
    src = copy_sources(tmp_path / "src")
    wheelhouse = tmp_path / "wheelhouse"
    pip(
        Path(sys.executable),
        "wheel",
        "--quiet",
        "--no-deps",
        "--wheel-dir",
        str(wheelhouse),
        *(str(src / s) for s in ("", *SOURCES[1:])),
        timeout=300,
    )
    assert len(list(wheelhouse.glob("*.whl"))) == 3

    python = fresh_venv(tmp_path / "venv")
    # A CPU build of llama-cpp-python compiles for about 8 minutes: the
    # limit fails the test instead, if pip's wheel cache lacks it.
    out = pip(python, "install", "--find-links", str(wheelhouse), "missive-cpu", timeout=240)
    assert "Building wheel for llama-cpp-python" not in out
    listed = pip(python, "list", "--format=freeze")
    for name in ("missive-server", "missive-llamacpp", "missive-cpu"):
        assert f"{name}==0.1.0" in listed.replace("_", "-"), listed

    env = {**os.environ, **CLEAN_ENV}
    where = subprocess.run(
        [str(python), "-c", "import missive; print(missive.__file__)"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert where.stdout.startswith(str(tmp_path / "venv")), where  # the wheel's copy, not the repository's
    # The core's package data came with its wheel: the driver skeleton.
    written = subprocess.run(
        [str(python.parent / "missive"), "new-driver", "probe", "--output", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "missive-probe" / "missive_probe" / "driver.py").is_file()

    with serve_process(None, env=CLEAN_ENV, python=python, timeout=180) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
        info = client.models.retrieve("smollm2-135m")
        assert info.display_name == "SmolLM2 135M Instruct (Missive for CPU)"  # missive-cpu's default won
        message = client.messages.create(
            model="claude-any-id",
            max_tokens=16,
            messages=[{"role": "user", "content": "Name a colour."}],
            extra_body={"temperature": 0.0},
        )
        assert message.content[0].text.strip() and message.usage.output_tokens > 0
        status = httpx.get(f"{server.url}/v1/status", timeout=10).json()["models"]["smollm2-135m"]
        assert status["driver_status"]["slots"] == 2 and status["queue_depth"] == 16  # its settings
