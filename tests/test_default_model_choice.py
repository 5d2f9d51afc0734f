"""Which default model is served when several plugins offer one: the one
``server.default_model`` names, else the highest priority, else the smallest
id (missive.models.defaults, docs/configuration.md "Default models")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import pytest

from missive.config import ConfigError, ModelEntry
from missive.kernel.specs import DefaultModel
from missive.models.defaults import choose_default_model
from missive.testing import serve_process

TESTS = Path(__file__).parent


def offer(*models: tuple[str, int]) -> dict[str, DefaultModel]:
    return {i: DefaultModel(id=i, entry=ModelEntry(driver="echo"), priority=p) for i, p in models}


def test_the_rule() -> None:
    assert choose_default_model({}, None) is None
    assert choose_default_model(offer(("smollm2-135m", 0)), None).id == "smollm2-135m"
    # the highest priority, whatever the order plugins registered in
    for order in ([("smollm2-135m", 0), ("vendor", 10)], [("vendor", 10), ("smollm2-135m", 0)]):
        assert choose_default_model(offer(*order), None).id == "vendor"
    # equal priorities: the smallest id, whatever the order
    for order in ([("b", 0), ("a", 0)], [("a", 0), ("b", 0)]):
        assert choose_default_model(offer(*order), None).id == "a"
    assert choose_default_model(offer(("low", -5), ("zero", 0)), None).id == "zero"
    # an explicit setting wins over any priority
    assert (
        choose_default_model(offer(("smollm2-135m", 0), ("vendor", 10)), "smollm2-135m").id == "smollm2-135m"
    )


def test_an_unknown_choice_names_what_is_offered() -> None:
    with pytest.raises(
        ConfigError, match=r"'nope', which no plugin offers \(offered: vendor, smollm2-135m\)"
    ):
        choose_default_model(offer(("smollm2-135m", 0), ("vendor", 10)), "nope")
    with pytest.raises(ConfigError, match="none installed"):
        choose_default_model({}, "nope")


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path, "MISSIVE_PLUGINS": "plugins.vendor_defaults", **extra}


def test_missive_plugins_shows_the_ranking_and_the_choice(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}

    def plugins(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "missive", "plugins", "--config", os.devnull, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**base, **_env(**env)},
        )

    data = json.loads(plugins("--json").stdout)
    assert data["default_models"][:2] == ["vendor-tuned", "a-generic"]  # then smollm2-135m, when installed
    assert data["default_model"] == "vendor-tuned" and list(data["models"]) == ["vendor-tuned"]
    data = json.loads(plugins("--json", MISSIVE__SERVER__DEFAULT_MODEL="a-generic").stdout)
    assert data["default_model"] == "a-generic" and list(data["models"]) == ["a-generic"]
    text = plugins(MISSIVE__SERVER__DEFAULT_MODEL="nope").stdout
    assert "served: FAILED: server.default_model is 'nope', which no plugin offers" in text


def test_serve_serves_only_the_chosen_default() -> None:
    with serve_process(None, env=_env()) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="unused")
        assert [m.id for m in client.models.list().data] == ["vendor-tuned"]
        reply = client.messages.create(
            model="vendor-tuned",
            max_tokens=5,
            messages=[{"role": "user", "content": "tuned for this machine"}],
        )
        assert reply.content[0].text == "tuned for this machine"


def test_no_model_with_the_default_plugin_blocked_says_it_is_blocked() -> None:
    """With no [models] and the plugin that offers the default model blocked,
    the error names the block, not an install line that would change nothing."""
    from missive.config import Config
    from missive.kernel.plugins import Kernel
    from missive.models.table import ModelTable

    with pytest.raises(ConfigError) as blocked:
        ModelTable(Config(), Kernel(block=["missive-llamacpp"]))
    assert "missive-llamacpp are blocked" in str(blocked.value)
    assert "pip install" not in str(blocked.value)
    with pytest.raises(ConfigError) as none:
        ModelTable(Config(), Kernel(load_entry_points=False))
    assert "pip install 'missive-server[default]'" in str(none.value)
