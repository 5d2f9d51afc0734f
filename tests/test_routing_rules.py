"""Routing by need (:mod:`missive.routing.rules`): ``[[routing.rules]]`` send
a request to the model it needs, through the SDK against the app of echo
models in process (no socket); the rule shows in the log line,
``/metrics``, ``missive plugins`` and ``missive models``."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from PIL import Image

from missive.config import Config, ConfigError
from missive.protocol.schema.request import MessagesRequest
from missive.routing.rules import RoutingConfig, RoutingRule, RoutingRules, estimate_prompt_tokens
from missive.testing import InProcessApp, dump_toml, in_process_app, until

VISION = {"input_media": ["image/png", "image/jpeg"]}
MODELS: dict[str, Any] = {
    "main": {"driver": "echo", "aliases": ["claude-*"]},
    "small": {"driver": "echo"},
    "vision": {"driver": "echo", "settings": {"capabilities": VISION}},
    "long": {"driver": "echo"},
    "reasoner": {"driver": "echo", "settings": {"capabilities": {"thinking": True}}},
}
RULES: list[dict[str, Any]] = [
    {"name": "side", "model": ["claude-haiku-*", "claude-3-5-haiku*"], "to": "small"},
    {"name": "eyes", "images": True, "to": "vision"},
    {"name": "big", "min_prompt_tokens": 2000, "to": "long"},
    {"name": "think", "thinking": ["enabled"], "to": "reasoner"},
]
CONFIG = {"models": MODELS, "routing": {"rules": RULES}}


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(server: InProcessApp) -> anthropic.Anthropic:
    return server.sdk(api_key="test")


def png() -> str:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 30, 30)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png()}}


def served(server: InProcessApp) -> dict[tuple[str, str], float]:
    """``missive:routing_rule_total``: {(model, rule): count}."""
    found = {}
    with server.http_client(httpx, timeout=30) as http:
        text = http.get("/metrics").text
    for line in text.splitlines():
        match = re.match(r'^missive:routing_rule_total\{model_name="([^"]*)",rule="([^"]*)"\} (\S+)$', line)
        if match:
            found[(match.group(1), match.group(2))] = float(match.group(3))
    return found


def ask(
    client: anthropic.Anthropic, model: str = "claude-sonnet-4-5", **body: Any
) -> anthropic.types.Message:
    body.setdefault("messages", [{"role": "user", "content": "hello there"}])
    return client.messages.create(model=model, max_tokens=2048, **body)


def test_each_rule_sends_its_requests_to_its_model(server: InProcessApp, client: anthropic.Anthropic) -> None:
    before = served(server)
    assert ask(client).content[0].text == "hello there"  # no rule: the alias's model
    small = ask(client, "claude-haiku-4-5-20251001")
    assert small.model == "claude-haiku-4-5-20251001"  # the id the client sent
    ask(client, messages=[{"role": "user", "content": [IMAGE, {"type": "text", "text": "what is it?"}]}])
    ask(client, messages=[{"role": "user", "content": "many words here " * 3000}])
    ask(client, thinking={"type": "enabled", "budget_tokens": 1024})
    ask(client, thinking={"type": "adaptive"})  # not "enabled": no rule
    after = served(server)
    gained = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    assert {k: v for k, v in gained.items() if v} == {
        ("small", "side"): 1,
        ("vision", "eyes"): 1,
        ("long", "big"): 1,
        ("reasoner", "think"): 1,
    }
    # count_tokens follows the same rules (a text-only model would refuse the image).
    counted = client.messages.count_tokens(
        model="claude-sonnet-4-5",
        messages=[{"role": "user", "content": [IMAGE, {"type": "text", "text": "what is it?"}]}],
    )
    assert counted.input_tokens > 0
    until(
        lambda: "rule=eyes" in server.log() and "model=vision" in server.log(), "the log line naming the rule"
    )


def test_without_the_rule_an_image_is_refused_by_the_text_model() -> None:
    with in_process_app({"models": MODELS}) as plain:
        answer = plain.http_client(httpx).post(
            "/v1/messages",
            timeout=60,
            json={
                "model": "claude-sonnet-4-5",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [IMAGE, {"type": "text", "text": "what is it?"}]}],
            },
        )
    assert answer.status_code == 400 and "input media" in answer.json()["error"]["message"]


def test_rules_are_listed_by_plugins_and_models(tmp_path: Path) -> None:
    config = tmp_path / "missive.toml"
    config.write_text(dump_toml(CONFIG))
    plugins = subprocess.run(
        [sys.executable, "-m", "missive", "plugins", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    listed = json.loads(plugins.stdout)["routing_rules"]
    assert [r["name"] for r in listed] == ["side", "eyes", "big", "think"]
    assert listed[2] == {"name": "big", "to": "long", "when": "prompt >= 2000 tokens (estimated) -> long"}
    models = subprocess.run(
        [sys.executable, "-m", "missive", "models", "--config", str(config)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert "  eyes: images -> vision" in models.stdout
    assert "  side: model claude-haiku-* or claude-3-5-haiku* -> small" in models.stdout


def test_bad_rules_are_configuration_errors() -> None:
    with pytest.raises(ValueError, match="no condition"):
        RoutingRule(name="x", to="main")
    with pytest.raises(ConfigError, match="'nowhere', which is not a served model"):
        RoutingRules(RoutingConfig(rules=[RoutingRule(name="x", images=True, to="nowhere")]), ["main"])
    with pytest.raises(ConfigError, match="two routing rules"):
        RoutingRules(RoutingConfig(rules=[RoutingRule(name="x", images=True, to="main")] * 2), ["main"])
    with pytest.raises(Exception, match="routing.rules.0.imgs"):
        Config.model_validate({"routing": {"rules": [{"name": "x", "imgs": True, "to": "main"}]}})


def test_the_estimate_leaves_image_data_out() -> None:
    words = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 1,
            "system": "s" * 400,
            "messages": [{"role": "user", "content": [IMAGE, {"type": "text", "text": "x" * 800}]}],
        }
    )
    # The text and the block and role names count; the base64 source, none of it.
    assert estimate_prompt_tokens(words) == (400 + 800 + len("user") + len("image") + len("text")) // 4


def test_a_rule_never_sends_a_key_to_a_model_it_may_not_use() -> None:
    """A key limited to ``main`` is not routed to ``vision``: its image
    request stays on the text model (and is refused there); a key that may
    use every model is routed."""
    narrow, wide = "sk-narrow-routing-key", "sk-wide-routing-key"
    keys = {
        "narrow": {"key_sha256": hashlib.sha256(narrow.encode()).hexdigest(), "models": ["main"]},
        "wide": {"key_sha256": hashlib.sha256(wide.encode()).hexdigest()},
    }
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [IMAGE, {"type": "text", "text": "what is it?"}]}],
    }
    with in_process_app({**CONFIG, "keys": keys}) as keyed, keyed.http_client(httpx, timeout=60) as http:
        refused = http.post("/v1/messages", json=body, headers={"x-api-key": narrow})
        routed = http.post("/v1/messages", json=body, headers={"x-api-key": wide})
        until(lambda: "rule=eyes" in keyed.log(), "the wide key's request routed")
    assert refused.status_code == 400 and "input media" in refused.json()["error"]["message"]
    assert routed.status_code == 200, routed.text
