"""The user's install path, from built distributions: the wheels of the core
and of every plugin go into a wheelhouse (scripts/wheelhouse, with the
third-party wheels the extras need), then fresh virtual environments install
``missive-server[llamacpp,default]`` and ``missive-server[vllm]`` from it
with pip alone, ``--no-index`` (no editable install, no index, no source
tree on the path). The first serves a real request through the SDK with the
embedded default model; the second lists the vLLM driver.

Building the wheelhouse asks pip's configured index for the third-party
wheels; llama-cpp-python comes from pip's wheel cache (scripts/setup compiled
it once). About a minute and a half on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import anthropic
import pytest

from missive.testing import free_port, stop_process

ROOT = Path(__file__).parent.parent
PLUGINS = sorted(p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml"))


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without what would let a fresh venv see
    the source tree or another configuration: no PYTHONPATH, no MISSIVE_*,
    no pip settings (``PIP_*``; ``PIP_CONFIG_FILE=/dev/null`` drops pip's
    configured index and find-links), an empty XDG_CONFIG_HOME, its own state
    directory."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MISSIVE", "PIP_", "PYTHON", "VIRTUAL_ENV"))
    }
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PYTHONNOUSERSITE="1",
        XDG_CONFIG_HOME=str(home / "config"),
        MISSIVE_STATE_DIR=str(home / "state"),
    )
    return env


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    before = tree_state()
    done = subprocess.run(
        [str(ROOT / "scripts" / "wheelhouse"), str(out), "llamacpp,default,vllm"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert tree_state() == before, "building the wheelhouse left files in the source tree"
    return out


def tree_state() -> list[str]:
    """What a build in place would add under core/ and plugins/: build/ and
    *.egg-info folders (as ``git status`` lists them, ignored or not)."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "core", "plugins"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "build/" in line or ".egg-info" in line]


def venv(base: Path, wheelhouse: Path, requirement: str) -> Path:
    """A fresh virtual environment with ``requirement`` installed from the
    wheelhouse alone; returns its bin folder."""
    env = clean_env(base)
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, env=env, timeout=300)
    bin_dir = base / "venv" / "bin"
    done = subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            requirement,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return bin_dir


def run(bin_dir: Path, home: Path, *args: str) -> str:
    done = subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        env=clean_env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def llamacpp_venv(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    home = tmp_path_factory.mktemp("llamacpp-venv")
    return venv(home, wheelhouse, "missive-server[llamacpp,default]"), home


def test_the_wheels_carry_what_redistributors_need(wheelhouse: Path) -> None:
    """One wheel per distribution of the repository, each with its LICENSE
    and its README as description; the core's with py.typed."""
    names = {p.name.split("-")[0] for p in wheelhouse.glob("missive_*.whl")}
    assert names == {"missive_server", *("missive_" + name.replace("-", "_") for name in PLUGINS)}
    for wheel in wheelhouse.glob("missive_*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            files = zf.namelist()
            info = next(f for f in files if f.endswith(".dist-info/METADATA"))
            metadata = zf.read(info).decode()
            assert "License-Expression: Apache-2.0" in metadata, wheel.name
            assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files), wheel.name
            assert "Description-Content-Type: text/markdown" in metadata, wheel.name
            if wheel.name.startswith("missive_server-"):
                assert "missive/py.typed" in files and "missive/api.py" in files
                # The web console's page: every file of its folder.
                static = ROOT / "core" / "missive" / "console" / "static"
                assert {f"missive/console/static/{p.name}" for p in static.iterdir()} <= set(files)
            else:
                assert "Requires-Dist: missive-server==0.1.0" in metadata, wheel.name


def test_core_with_llamacpp_serves_the_default_model(llamacpp_venv: tuple[Path, Path]) -> None:
    bin_dir, home = llamacpp_venv
    where = run(
        bin_dir,
        home,
        "python",
        "-c",
        "import missive, importlib.metadata as m; print(missive.__file__); "
        "print(m.version('missive-server'))",
    )
    module, version = where.split()
    assert (
        Path(module).is_relative_to(bin_dir.parent) and version == "0.1.0"
    )  # installed, not the source tree
    port = free_port()
    log_path = home / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(bin_dir / "missive"), "serve", "--port", str(port)],
            cwd=home,
            env=clean_env(home),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log_path)
        client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
        assert "smollm2-135m" in [m.id for m in client.models.list().data]
        reply = client.messages.create(
            model="smollm2-135m",
            max_tokens=12,
            messages=[{"role": "user", "content": "Say hello."}],
            extra_body={"temperature": 0},
        )  # sampled, it may be empty
        assert reply.content and reply.content[0].type == "text" and reply.content[0].text.strip()
        assert reply.usage.input_tokens > 0 and 0 < reply.usage.output_tokens <= 12
        assert reply.stop_reason in ("end_turn", "max_tokens")
        # The web console is served from the installed package's files.
        page = urllib.request.urlopen(f"{url}/console/", timeout=60).read().decode()
        for src in re.findall(r'(?:src|href)="(static/[^"]+)"', page):
            assert urllib.request.urlopen(f"{url}/console/{src}", timeout=60).status == 200, src
    finally:
        stop_process(proc, log_path)
    assert "no configuration file" in log_path.read_text()


def test_core_with_vllm_lists_the_driver(wheelhouse: Path, tmp_path: Path) -> None:
    bin_dir = venv(tmp_path, wheelhouse, "missive-server[vllm]")
    data = json.loads(run(bin_dir, tmp_path, "missive", "plugins", "--json"))
    plugins = {p["name"]: p for p in data["plugins"] if p["source"] == "entry point"}
    assert set(plugins) == {"missive-openai", "missive-vllm"}
    assert all(p["error"] is None and p["version"] == "0.1.0" and p["api"] == ["1"] for p in plugins.values())
    assert {"vllm", "openai"} <= set(data["drivers"]) and "llamacpp" not in data["drivers"]
    assert data["default_models"] == []  # no embedded model in this one


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"missive serve exited with {proc.returncode}:\n{log_path.read_text()}"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"missive serve not healthy after {timeout} s:\n{log_path.read_text()}")
