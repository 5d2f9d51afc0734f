"""``output_config.effort`` sent to a model that does not reason, through the
official SDK (core/missive/thinking/effort.py).

The field sets a reasoning model's depth; for a model whose driver does not
declare thinking it changes nothing, so it is answered and reported
(``missive-ignored``, the log), and refused in strict mode, as every request
part Missive does not act on. ``thinking: enabled`` on that model keeps its
capability 400, whatever the effort.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import InProcessApp, in_process_app
from missive_echo import script

CONFIG: dict[str, Any] = {
    "models": {
        "plain": {"driver": "echo", "context_window": 10_000},
        "reasoner": {
            "driver": "echo",
            "context_window": 10_000,
            "settings": {"capabilities": {"thinking": True}},
        },
    },
}
NOTE = "output_config.effort (model plain does not reason)"


def ask(model: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": 50}
    return {**body, "messages": [{"role": "user", "content": script({"text": "the answer"})}], **extra}


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk(timeout=60)


def test_effort_on_a_model_that_does_not_reason_is_reported(
    client: anthropic.Anthropic, app: InProcessApp
) -> None:
    raw = client.messages.with_raw_response.create(**ask("plain", output_config={"effort": "low"}))
    assert raw.parse().content[0].text == "the answer"  # type: ignore[union-attr]
    assert NOTE in raw.headers["missive-ignored"]
    assert f"ignored: {NOTE}" in app.log()
    with client.messages.stream(**ask("plain", output_config={"effort": "high"})) as stream:
        assert stream.get_final_message().content[0].text == "the answer"  # type: ignore[union-attr]
        assert NOTE in stream.response.headers["missive-ignored"]


def test_effort_on_a_reasoning_model_or_no_effort_is_not_reported(client: anthropic.Anthropic) -> None:
    for model, extra in (("reasoner", {"output_config": {"effort": "low"}}), ("plain", {})):
        raw = client.messages.with_raw_response.create(**ask(model, **extra))
        assert "output_config.effort" not in raw.headers.get("missive-ignored", "")


def test_strict_mode_refuses_it() -> None:
    with in_process_app({**CONFIG, "server": {"strict": True}}) as app:
        client = app.sdk(timeout=60)
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(**ask("plain", output_config={"effort": "medium"}))
        body: Any = caught.value.body
        assert body["error"]["message"] == f"strict mode: this server does not support: {NOTE}"
        assert client.messages.create(**ask("reasoner", output_config={"effort": "medium"})).content
        # thinking enabled keeps the capability 400, checked first
        with pytest.raises(anthropic.BadRequestError) as enabled:
            client.messages.create(
                **ask("plain", output_config={"effort": "medium"}, max_tokens=2048),
                thinking={"type": "enabled", "budget_tokens": 1024},
            )
        body = enabled.value.body
        assert body["error"]["message"].startswith('thinking {"type": "enabled"} is not supported by model')
