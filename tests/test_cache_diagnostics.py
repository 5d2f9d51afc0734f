"""Cache diagnostics (``diagnostics.previous_message_id`` → ``cache_miss_reason``)
through the official SDK, one test per reason, streaming and not.

The echo driver reads nothing from a prefix cache unless scripted, so
``cache_missed_input_tokens`` is the previous request's whole prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from sdk_turns import as_param, prompt

from missive.testing import in_process_app

CAPS = {"tool_choice": ["auto", "any", "tool", "none"], "thinking": True}
TOOL = {"name": "lookup", "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}
OTHER_TOOL = {"name": "other", "input_schema": {"type": "object"}}
SYSTEM = "Answer briefly."
FIRST = [{"role": "user", "content": "one two three"}]


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    models = {
        "echo": {
            "driver": "echo",
            "context_window": 5000,
            "aliases": ["claude-*"],
            "settings": {"capabilities": CAPS},
        },
        "echo-b": {"driver": "echo", "context_window": 5000, "settings": {"capabilities": CAPS}},
    }
    with in_process_app({"models": models}) as app:
        yield app.sdk(timeout=60)


def ask(client: anthropic.Anthropic, previous: str | None, *, stream: bool = False, **changes: Any) -> Any:
    kwargs: dict[str, Any] = {
        "model": "echo",
        "max_tokens": 20,
        "system": SYSTEM,
        "tools": [TOOL],
        "messages": FIRST,
        "diagnostics": {"previous_message_id": previous},
        **changes,
    }
    if stream:
        with client.beta.messages.stream(**kwargs) as events:
            return events.get_final_message()
    return client.beta.messages.create(**kwargs)


@pytest.fixture
def first(client: anthropic.Anthropic) -> Any:
    """A first turn that opted in (``previous_message_id: null``): no diagnosis."""
    message = ask(client, None)
    assert message.diagnostics is None
    return message


@pytest.mark.parametrize("stream", [False, True])
def test_appended_messages_are_no_divergence(client: anthropic.Anthropic, first: Any, stream: bool) -> None:
    more = [*FIRST, as_param(first), {"role": "user", "content": "more"}]
    later = ask(client, first.id, stream=stream, messages=more)
    assert later.diagnostics is None
    # A system message after the first turn stays where it stands: appended, it keeps the prefix.
    noted = ask(
        client, first.id, stream=stream, messages=[*FIRST, {"role": "system", "content": "Now in French."}]
    )
    assert noted.diagnostics is None
    # An alias of the same configured model shares its cache: no model change.
    assert ask(client, first.id, model="claude-anything").diagnostics is None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "change, reason",
    [
        ({"model": "echo-b"}, "model_changed"),
        ({"tools": [TOOL, OTHER_TOOL]}, "tools_changed"),
        ({"tools": []}, "tools_changed"),
        ({"system": "Answer at length."}, "system_changed"),
        # A system message before the first turn is folded into Missive's system prompt: it changes its head.
        ({"messages": [{"role": "system", "content": "Now in French."}, *FIRST]}, "system_changed"),
        ({"messages": [{"role": "user", "content": "one two four"}]}, "messages_changed"),
    ],
)
def test_each_changed_part_is_named(
    client: anthropic.Anthropic,
    first: Any,
    stream: bool,
    change: dict[str, Any],
    reason: str,
) -> None:
    later = ask(client, first.id, stream=stream, **change)
    assert later.diagnostics.cache_miss_reason.type == reason
    assert later.diagnostics.cache_miss_reason.cache_missed_input_tokens == prompt(first)


def test_model_is_checked_before_tools_and_system(client: anthropic.Anthropic, first: Any) -> None:
    later = ask(client, first.id, model="echo-b", system="other", tools=[])
    assert later.diagnostics.cache_miss_reason.type == "model_changed"
    assert (
        ask(client, first.id, system="other", tools=[]).diagnostics.cache_miss_reason.type == "tools_changed"
    )


@pytest.mark.parametrize(
    "change",
    [
        {"tool_choice": {"type": "any"}},
        {"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2000},
    ],
)
def test_other_prompt_parameters_are_unavailable(
    client: anthropic.Anthropic,
    first: Any,
    change: dict[str, Any],
) -> None:
    later = ask(client, first.id, **change)
    assert later.diagnostics.cache_miss_reason.type == "unavailable"
    assert later.diagnostics.cache_miss_reason.to_dict() == {"type": "unavailable"}


def test_unknown_previous_messages_are_not_found(client: anthropic.Anthropic) -> None:
    assert (
        ask(client, "msg_never_answered").diagnostics.cache_miss_reason.type == "previous_message_not_found"
    )
    # A request without diagnostics keeps nothing to compare with.
    plain = client.messages.create(model="echo", max_tokens=5, messages=FIRST)
    assert "diagnostics" not in plain.to_dict()
    later = ask(client, plain.id)
    assert later.diagnostics.cache_miss_reason.to_dict() == {"type": "previous_message_not_found"}


def test_the_non_beta_client_reads_diagnostics_too(client: anthropic.Anthropic, first: Any) -> None:
    later = client.messages.create(
        model="echo-b",
        max_tokens=20,
        system=SYSTEM,
        tools=[TOOL],
        messages=FIRST,
        diagnostics={"previous_message_id": first.id},
    )
    assert later.diagnostics.cache_miss_reason.type == "model_changed"
    raw = client.messages.with_raw_response.create(
        model="echo", max_tokens=5, messages=FIRST, diagnostics={"previous_message_id": None}
    )
    assert "missive-ignored" not in raw.headers
