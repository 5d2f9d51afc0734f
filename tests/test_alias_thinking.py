"""Thinking a model cannot do, asked through a ``claude-*`` alias, through
the official SDK (core/missive/thinking/through_alias.py).

A request written for Claude (its ``model`` matched an alias) with
``thinking: {"type": "enabled"}`` for a model that does not reason is
answered without thinking and reported (``missive-ignored``, the log); the
same request naming the model's id keeps the capability 400, and so does
one through an alias of a model set to ``alias_thinking = "refuse"``.
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
        # Earlier models' patterns win: claude-opus-* is refused, claude-haiku-* reasons.
        "refusing": {
            "driver": "echo",
            "context_window": 10_000,
            "aliases": ["claude-opus-*"],
            "alias_thinking": "refuse",
        },
        "reasoner": {
            "driver": "echo",
            "context_window": 10_000,
            "aliases": ["claude-haiku-*"],
            "settings": {"capabilities": {"thinking": True}},
        },
        "local": {"driver": "echo", "context_window": 10_000, "aliases": ["claude-*"]},
    },
}
ENABLED = {"type": "enabled", "budget_tokens": 1024}
#: The model reasons, then answers: its reasoning shows only when thinking is on.
STEPS = script({"thinking": "let me think", "tokens": 3}, {"text": "the answer"})
#: Today's 400, word for word (missive.messages.capabilities.check_request).
NOT_SUPPORTED = (
    "thinking {\"type\": \"enabled\"} is not supported by model '%s' (driver 'echo'); "
    'supported: thinking "disabled", "adaptive" or "between_tools" (no reasoning)'
)


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk(timeout=60)


def ask(model: str, **extra: Any) -> dict[str, Any]:
    return dict(
        model=model,
        max_tokens=2048,
        thinking=ENABLED,
        messages=[{"role": "user", "content": STEPS}],
        **extra,
    )


def test_enabled_thinking_through_an_alias_is_answered_without_thinking(
    client: anthropic.Anthropic, app: InProcessApp
) -> None:
    raw = client.messages.with_raw_response.create(**ask("claude-sonnet-4-5"))
    message = raw.parse()
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "the answer"  # type: ignore[union-attr]
    assert message.model == "claude-sonnet-4-5"
    ignored = raw.headers["missive-ignored"]
    assert 'thinking (type "enabled": model local does not reason; asked as "claude-sonnet-4-5"' in ignored
    assert "answered without thinking" in ignored
    assert 'ignored: thinking (type "enabled": model local does not reason' in app.log()


def test_streamed_too(client: anthropic.Anthropic) -> None:
    stream = client.messages.create(**ask("claude-sonnet-4-5"), stream=True)
    with stream:
        events = list(stream)
        headers = stream.response.headers
    blocks = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert blocks == ["text"]
    assert "the answer" in "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert 'thinking (type "enabled": model local does not reason' in headers["missive-ignored"]


def test_effort_and_adaptive_through_an_alias_never_fail(client: anthropic.Anthropic) -> None:
    """What Claude Code sends with the newer ids: adaptive, with an effort level."""
    for thinking, effort in ((ENABLED, "max"), ({"type": "adaptive"}, "xhigh")):
        message = client.messages.create(
            **{**ask("claude-sonnet-4-5"), "thinking": thinking}, output_config={"effort": effort}
        )
        assert message.content[-1].text == "the answer"  # type: ignore[union-attr]


def test_count_tokens_through_an_alias(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(
        model="claude-sonnet-4-5", thinking=ENABLED, messages=[{"role": "user", "content": "two words"}]
    )
    assert counted.input_tokens > 0


def refusal(error: anthropic.BadRequestError) -> str:
    assert error.status_code == 400
    body: Any = error.body
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["message"])


def test_the_model_id_keeps_the_400(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**ask("local"))
    assert refusal(caught.value) == NOT_SUPPORTED % "local"
    with pytest.raises(anthropic.BadRequestError) as streamed:
        client.messages.create(**ask("local"), stream=True)
    assert refusal(streamed.value) == NOT_SUPPORTED % "local"


def test_refuse_keeps_the_400_through_an_alias(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**ask("claude-opus-4-1"))
    assert refusal(caught.value) == NOT_SUPPORTED % "refusing"
    with pytest.raises(anthropic.BadRequestError) as streamed:
        client.messages.create(**ask("claude-opus-4-1"), stream=True)
    assert refusal(streamed.value) == NOT_SUPPORTED % "refusing"


def test_a_model_that_reasons_keeps_its_thinking(client: anthropic.Anthropic) -> None:
    raw = client.messages.with_raw_response.create(**ask("claude-haiku-4-5"))
    message = raw.parse()
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert "thinking" not in raw.headers.get("missive-ignored", "")


def test_strict_mode_refuses_what_it_would_drop() -> None:
    with in_process_app({**CONFIG, "server": {"strict": True}}) as app:
        with pytest.raises(anthropic.BadRequestError) as caught:
            app.sdk().messages.create(**ask("claude-sonnet-4-5"))
    assert refusal(caught.value).startswith("strict mode: this server does not support: thinking")
