"""``capabilities`` and ``lifecycle`` in ``GET /v1/models``
(core/missive/models/capabilities.py): parsed by the official SDK's
``client.models.list()`` with every key its ``ModelCapabilities`` lists,
derived from each model's driver capabilities and configuration overrides;
and llm-anthropic, which reads them to decide what to send, working with
``-o thinking 0`` against a model that cannot reason.

The SDK's tests run on the app in process (no socket); llm-anthropic is a
program of its own, so its test starts a live server (once llm is installed).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from venvs import fresh_venv, pip

from missive.testing import InProcessApp, in_process_app, live_server

TOOLS4 = ["auto", "any", "tool", "none"]
CONFIG: dict[str, Any] = {
    "models": {
        "claude-plain": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": TOOLS4}},
        },
        "thinker": {
            "driver": "echo",
            "context_window": 1000,
            "max_output_tokens": 500,
            "settings": {
                "capabilities": {"thinking": True, "structured_output": True, "input_media": ["image/png"]}
            },
        },
        "bare": {
            "driver": "echo",
            "context_window": 1000,
            "lifecycle": "deprecated",
            "deprecated_at": "2026-01-02T03:04:05Z",
            "capabilities": {"pdf_input": False, "batch": False},
        },
    },
}


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk(timeout=60)


def supported(tree: Any, *path: str) -> bool:
    node = tree
    for key in path:
        node = getattr(node, key)
    return bool(node.supported)


def test_sdk_parses_every_capability_key(client: anthropic.Anthropic) -> None:
    models = {m.id: m for m in client.models.list()}
    assert set(models) >= {"claude-plain", "thinker", "bare"}
    for model in models.values():
        caps = model.capabilities
        assert caps is not None
        sent = caps.model_dump(exclude_unset=True)
        # Every key the SDK's model lists is there (the API: "keys are always present").
        for name in type(caps).model_fields:
            assert name in sent, (model.id, name)
        assert model.lifecycle in ("active", "deprecated")
    beta = {m.id: m for m in client.beta.models.list()}
    assert beta["thinker"].allowed_fallback_models == ["claude-plain", "bare"]
    assert beta["thinker"].capabilities is not None and beta["thinker"].capabilities.compaction is not None


def test_capabilities_follow_each_model(client: anthropic.Anthropic) -> None:
    plain = client.models.retrieve("claude-plain").capabilities
    thinker = client.models.retrieve("thinker").capabilities
    bare = client.models.retrieve("bare")
    assert plain is not None and thinker is not None and bare.capabilities is not None
    # A model that cannot reason: enabled/adaptive no, disabled yes, between_tools (it calls tools) yes.
    types = plain.thinking.types
    assert (
        types.enabled.supported,
        types.adaptive.supported,
        types.disabled.supported,
        types.between_tools.supported,
    ) == (
        False,
        False,
        True,
        True,
    )
    assert plain.thinking.supported and not plain.effort.supported and not plain.image_input.supported
    assert supported(thinker, "thinking", "types", "enabled") and supported(thinker, "effort")
    assert supported(thinker, "image_input") and supported(thinker, "structured_outputs")
    assert not supported(thinker, "thinking", "types", "between_tools")  # no tools
    assert supported(plain, "context_management", "clear_tool_uses_20250919")
    assert plain.pdf_input.supported and plain.batch.supported
    # Overrides from the configuration, and the lifecycle.
    assert not bare.capabilities.pdf_input.supported and not bare.capabilities.batch.supported
    assert (
        bare.lifecycle == "deprecated" and bare.deprecated_at is not None and bare.deprecated_at.year == 2026
    )
    assert client.models.retrieve("thinker").max_tokens == 500


def test_unknown_override_is_a_config_error(tmp_path: Path) -> None:
    from missive.config import ConfigError, load_config

    path = tmp_path / "missive.toml"
    path.write_text('[models.m]\ndriver = "echo"\n[models.m.capabilities]\n"thinking.color" = true\n')
    with pytest.raises(ConfigError, match="unknown capability thinking.color"):
        load_config(path)


# -- llm-anthropic --------------------------------------------------------

#: Pinned (``pip index versions llm-anthropic`` when bumping); the venv is per version.
LLM_PACKAGES = ("llm==0.36", "llm-anthropic==0.30")


def llm_venv() -> Path:
    """``llm`` with the llm-anthropic plugin in a virtual environment of its
    own under ``~/.cache/missive-tests`` (it pins an older ``anthropic``),
    made once; skip when they cannot be installed (no registry)."""
    root = Path(os.environ.get("MISSIVE_TEST_PY_CACHE", Path.home() / ".cache" / "missive-tests" / "python"))
    root.mkdir(parents=True, exist_ok=True)
    venv = root / ("llm-anthropic-" + LLM_PACKAGES[1].split("==")[1])
    llm = venv / "bin" / "llm"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not llm.exists():
            try:
                python = fresh_venv(venv)
                pip(python, "install", "--quiet", *LLM_PACKAGES, timeout=900)
            except (AssertionError, subprocess.SubprocessError, OSError) as exc:
                pytest.skip(f"llm and llm-anthropic could not be installed: {exc}"[:500])
    return llm


def test_llm_anthropic_thinking_off_on_a_model_that_cannot_reason(tmp_path: Path) -> None:
    llm = llm_venv()  # before the server: a run that cannot install llm skips without one
    capture = tmp_path / "capture"
    with live_server({**CONFIG, "server": {"capture_dir": str(capture)}}) as url:
        env = {
            **os.environ,
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "unused",
            "LLM_USER_PATH": str(tmp_path),
        }
        refresh = subprocess.run(
            [str(llm), "anthropic", "refresh"], env=env, capture_output=True, text=True, timeout=120
        )
        assert refresh.returncode == 0, refresh.stderr
        for request in capture.glob("*.json"):
            request.unlink()
        answer = subprocess.run(
            [str(llm), "-m", "claude-plain", "-o", "thinking", "0", "--no-stream", "hello from llm"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip() == "hello from llm"
        bodies = [json.loads(p.read_text()) for p in sorted(capture.glob("*.json"))]
    sent = [b.get("body", b) for b in bodies]
    messages = [b for b in sent if isinstance(b, dict) and "messages" in b]
    assert messages and messages[-1].get("thinking") == {"type": "disabled"}, messages
