"""Real clients (the Claude Code CLI, opencode, Codex) against a live Missive.

The clients are npm packages installed once per machine, pinned, into a cache
outside the repository (``$MISSIVE_TEST_NODE_CACHE``, default
``~/.cache/missive-tests/node``); later runs find them there and install
nothing. Tests skip only when ``node`` or ``npm`` is missing; a failed install
(no registry) is an error, not a skip.

Each test starts its own Missive with the echo driver reading
``settings.script_file`` and ``server.capture_dir`` under the test's tmp dir,
so what the client sent is kept there (and printed when a test fails).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from missive.testing import live_server

#: Pinned client versions (``npm view <pkg> version`` when bumping).
CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.332")
OPENCODE = ("opencode-ai", "1.18.33")
#: The Codex CLI (a native binary in a platform package), on the Responses API (test_codex.py).
CODEX = ("@openai/codex", "0.171.0")
#: The TypeScript SDK, for its tool runner (test_ts_tool_runner.py).
TS_SDK = ("@anthropic-ai/sdk", "1.16.0")

NPM_TIMEOUT = 600
CLIENT_TIMEOUT = 120


def node_cache() -> Path:
    return Path(os.environ.get("MISSIVE_TEST_NODE_CACHE", Path.home() / ".cache" / "missive-tests" / "node"))


def _installed_version(prefix: Path, package: str) -> str | None:
    try:
        return json.loads((prefix / "node_modules" / package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def npm_install(package: str, version: str, binary: str) -> Path:
    """Install ``package@version`` under the node cache unless already there.

    Returns the path of its ``binary`` in ``node_modules/.bin``. An exclusive
    lock on the cache keeps concurrent test sessions on one machine from
    installing over each other.

    Raises:
        pytest.skip.Exception: ``node`` or ``npm`` is not on PATH.
        RuntimeError: npm failed (the registry unreachable, a bad version).
    """
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to run real clients (Claude Code, opencode); not found on PATH")
    prefix = node_cache()
    prefix.mkdir(parents=True, exist_ok=True)
    binary_path = prefix / "node_modules" / ".bin" / binary
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _installed_version(prefix, package) != version or not binary_path.exists():
            started = time.monotonic()
            proc = subprocess.run(
                [
                    "npm",
                    "install",
                    "--prefix",
                    str(prefix),
                    "--no-audit",
                    "--no-fund",
                    "--loglevel=error",
                    f"{package}@{version}",
                ],
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT,
            )
            if proc.returncode != 0 or not binary_path.exists():
                raise RuntimeError(
                    f"npm install {package}@{version} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
                )
            print(f"installed {package}@{version} in {time.monotonic() - started:.1f}s into {prefix}")
    return binary_path


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    """The pinned Claude Code CLI, installed once per machine."""
    path = npm_install(*CLAUDE_CODE, binary="claude")
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith(CLAUDE_CODE[1]), out.stdout + out.stderr
    return path


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    """The pinned opencode CLI, installed once per machine."""
    path = npm_install(*OPENCODE, binary="opencode")
    out = subprocess.run(
        [str(path), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")},
    )
    assert out.stdout.strip() == OPENCODE[1], out.stdout + out.stderr
    return path


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The pinned Codex CLI, installed once per machine."""
    path = npm_install(*CODEX, binary="codex")
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"codex-cli {CODEX[1]}", out.stdout + out.stderr
    return path


@pytest.fixture(scope="session")
def ts_sdk() -> Path:
    """The pinned TypeScript SDK's package folder, installed once per machine."""
    npm_install(*TS_SDK, binary="anthropic-ai-sdk")
    folder = node_cache() / "node_modules" / TS_SDK[0]
    version = json.loads((folder / "package.json").read_text())["version"]
    assert version == TS_SDK[1], version
    return folder


@dataclass
class Missive:
    """A live Missive for one test: its URL, the echo script file and the captures."""

    url: str
    script_file: Path
    capture_dir: Path

    def script(self, *entries: dict[str, Any]) -> None:
        """Write the echo script list (see :mod:`missive_echo.driver`)."""
        self.script_file.write_text(json.dumps(list(entries)))

    def captures(self, path: str | None = "/v1/messages") -> list[dict[str, Any]]:
        """The captured requests in arrival order (``path``: only those; None: all)."""
        records = [json.loads(p.read_text()) for p in sorted(self.capture_dir.glob("*.json"))]
        return [r for r in records if path is None or r["path"] == path]

    def summary(self) -> str:
        lines = []
        for r in self.captures(None):
            if r["path"] == "/health":
                continue
            body = r["body"] if isinstance(r["body"], dict) else {}
            lines.append(
                f"{r['method']} {r['path']}?{r['query']} -> {r['status']} keys={sorted(body)} "
                f"ignored={r['ignored']}"
            )
        return "\n".join(lines)


TOOL_CHOICES = {"tool_choice": ["auto", "any", "tool", "none"], "thinking": True}


@contextmanager
def scripted_missive(
    tmp_path: Path, *, reasons: bool = True, extra_models: dict[str, Any] | None = None, **tables: Any
) -> Iterator[Missive]:
    """Missive with echo models scripted by ``tmp_path/script.json``:
    ``echo`` (200k words of context, ``claude-*`` alias), ``echo-100k`` and
    ``echo-small`` (1000 words: Claude Code's prompt does not fit); ``tables``:
    more configuration tables (``server_tools=...``, ``routing=...``).
    ``reasons``: whether the models declare the ``thinking`` capability;
    ``extra_models``: more ``[models]`` entries."""
    script_file = tmp_path / "script.json"
    script_file.write_text("[]")
    capture_dir = tmp_path / "captures"
    capabilities = TOOL_CHOICES if reasons else {**TOOL_CHOICES, "thinking": False}
    settings = {"script_file": str(script_file), "capabilities": capabilities}
    config = {
        "server": {"capture_dir": str(capture_dir)},
        **tables,
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 200_000,
                "aliases": ["claude-*"],
                "settings": settings,
            },
            "echo-100k": {"driver": "echo", "context_window": 100_000, "settings": settings},
            "echo-small": {"driver": "echo", "context_window": 1000, "settings": settings},
            **(extra_models or {}),
        },
    }
    with live_server(config) as url:
        server = Missive(url=url, script_file=script_file, capture_dir=capture_dir)
        try:
            yield server
        finally:
            print(f"requests captured in {capture_dir}:\n{server.summary()}")


@pytest.fixture
def missive(tmp_path: Path) -> Iterator[Missive]:
    """:func:`scripted_missive` for one test."""
    with scripted_missive(tmp_path) as server:
        yield server


@dataclass
class ClientRun:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)


@dataclass
class ClaudeCode:
    """Runs ``claude -p PROMPT`` in ``work`` against ``missive``; HOME and
    CLAUDE_CONFIG_DIR are fresh temp dirs, so nothing of the machine's own
    setup is read or written."""

    binary: Path
    missive: Missive
    work: Path
    home: Path

    def __call__(
        self,
        prompt: str,
        *,
        model: str = "echo",
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        timeout: float = CLIENT_TIMEOUT,
    ) -> ClientRun:
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "CLAUDE_CONFIG_DIR": str(self.home / ".claude"),
            "ANTHROPIC_BASE_URL": self.missive.url,
            "ANTHROPIC_API_KEY": "sk-test",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            **(env or {}),
        }
        cmd = [
            str(self.binary),
            "-p",
            prompt,
            "--model",
            model,
            "--allowedTools",
            "Bash,Write",
            "--output-format",
            "json",
            *args,
        ]
        proc = subprocess.run(
            cmd,
            cwd=self.work,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        print(
            f"$ claude -p {prompt!r} (exit {proc.returncode})\nstdout: {proc.stdout[-3000:]}\nstderr: "
            f"{proc.stderr[-3000:]}"
        )
        return ClientRun(proc.returncode, proc.stdout, proc.stderr)


def claude_code_for(binary: Path, missive: Missive, tmp_path: Path) -> ClaudeCode:
    """Claude Code pointed at ``missive``, working in ``tmp_path/work``."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    return ClaudeCode(binary=binary, missive=missive, work=work, home=home)


@pytest.fixture
def claude(claude_bin: Path, missive: Missive, tmp_path: Path) -> ClaudeCode:
    """Claude Code pointed at this test's Missive, working in ``tmp_path/work``."""
    return claude_code_for(claude_bin, missive, tmp_path)


# -- Claude Code against real local models (no script) ---------------------------


@contextmanager
def model_missive(tmp: Path, models: dict[str, Any]) -> Iterator[Missive]:
    """A live Missive serving ``models`` (a ``[models]`` table), capturing
    every request under ``tmp/captures``."""
    capture_dir = tmp / "captures"
    with live_server({"server": {"capture_dir": str(capture_dir)}, "models": models}) as url:
        yield Missive(url=url, script_file=tmp / "unused.json", capture_dir=capture_dir)


def assert_ended(runs: list[ClientRun]) -> None:
    """Each run completed, or ended with Claude Code's max_output_tokens error:
    a 135M model may not finish within a capped ``max_output_tokens``, and
    Claude Code then asks it to go on (more requests in the same session)."""
    for run in runs:
        result = run.json()
        assert result["terminal_reason"] == "completed" or result.get("api_error") == "max_output_tokens", (
            run.stdout
        )


def prompt_size(missive: Missive, model: str, body: dict[str, Any]) -> int:
    """``count_tokens`` of a captured request body."""
    import anthropic

    client = anthropic.Anthropic(base_url=missive.url, api_key="unused", max_retries=0)
    return client.messages.count_tokens(
        model=model, messages=body["messages"], system=body["system"], tools=body["tools"]
    ).input_tokens


def assert_billed_as_counted_and_cached(runs: list[ClientRun], sizes: list[int]) -> None:
    """What Claude Code was billed over ``runs`` is what ``count_tokens`` says
    of the requests it sent (``sizes``, in order), and every request after
    the first read at least the whole previous prompt from the KV cache."""
    usage = [run.json()["usage"] for run in runs]
    assert sum(u["input_tokens"] + u["cache_read_input_tokens"] for u in usage) == sum(sizes)
    assert sum(u["cache_read_input_tokens"] for u in usage) >= sum(sizes[:-1]), (sizes, usage)


@dataclass
class Opencode:
    """Runs ``opencode run --format json PROMPT`` in ``work`` with Missive as
    its ``anthropic`` provider (``work/opencode.json``); HOME and the XDG
    folders are fresh temp dirs. ``--title`` skips the title-generation call."""

    binary: Path
    missive: Missive
    work: Path
    home: Path

    def configure(self, model: str = "echo") -> None:
        config = {
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": False,
            "share": "disabled",
            "provider": {
                "anthropic": {
                    "options": {"baseURL": f"{self.missive.url}/v1", "apiKey": "sk-test"},
                    "models": {
                        model: {
                            "name": model,
                            "tool_call": True,
                            "limit": {"context": 200_000, "output": 4096},
                        }
                    },
                }
            },
        }
        (self.work / "opencode.json").write_text(json.dumps(config))

    def __call__(self, prompt: str, *, model: str = "echo") -> tuple[ClientRun, list[dict[str, Any]]]:
        self.configure(model)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_DATA_HOME": str(self.home / ".local" / "share"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
        }
        cmd = [
            str(self.binary),
            "run",
            "--pure",
            "--title",
            "test",
            "--format",
            "json",
            "--model",
            f"anthropic/{model}",
            prompt,
        ]
        proc = subprocess.run(
            cmd,
            cwd=self.work,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        print(
            f"$ opencode run {prompt!r} (exit {proc.returncode})\nstdout: {proc.stdout[-3000:]}\nstderr: "
            f"{proc.stderr[-3000:]}"
        )
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        return ClientRun(proc.returncode, proc.stdout, proc.stderr), events


@pytest.fixture
def opencode(opencode_bin: Path, missive: Missive, tmp_path: Path) -> Opencode:
    """opencode pointed at this test's Missive, working in ``tmp_path/work``."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    return Opencode(binary=opencode_bin, missive=missive, work=work, home=home)
