"""``cache_control`` TTLs along the prompt, through the official SDK: the API
requires them non-increasing in the order it processes blocks (``tools``,
``system``, ``messages``): a ``ttl: "1h"`` breakpoint after a ``5m`` one (or
one without ``ttl``, 5m by default) is its 400 (Anthropic docs, "Prompt
caching", "Mixing different TTLs"; the API's wording as clients quote it:
cnighswonger/claude-code-cache-fix#44, headroomlabs-ai/headroom#2939)."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

#: A model of the echo server that takes tools (conftest.ECHO_CONFIG).
MODEL = "echo-hermes"
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE_MIN = {"type": "ephemeral", "ttl": "5m"}
DEFAULT = {"type": "ephemeral"}
TOOL = {"name": "lookup", "input_schema": {"type": "object", "properties": {}}}
ORDER = "Note that blocks are processed in the following order: `tools`, `system`, `messages`."


def text(value: str, control: dict[str, Any] | None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if control is not None:
        block["cache_control"] = control
    return block


def body(
    tool: dict[str, Any] | None = None,
    system: list[dict[str, Any] | None] | None = None,
    user: list[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """A request whose tool, system blocks and user blocks carry these breakpoints."""
    fields: dict[str, Any] = {
        "tools": [{**TOOL, "cache_control": tool} if tool else TOOL],
        "messages": [
            {"role": "user", "content": [text(f"u{i}", c) for i, c in enumerate(user or [None])]},
        ],
    }
    if system is not None:
        fields["system"] = [text(f"s{i}", c) for i, c in enumerate(system)]
    return fields


@pytest.mark.parametrize(
    ("fields", "path", "earlier"),
    [
        (body(system=[FIVE_MIN, ONE_HOUR]), "system.1", "system.0"),
        (body(system=[DEFAULT], user=[ONE_HOUR]), "messages.0.content.0", "system.0"),
        (body(tool=FIVE_MIN, system=[ONE_HOUR]), "system.0", "tools.0"),
        (body(tool=DEFAULT, user=[None, ONE_HOUR]), "messages.0.content.1", "tools.0"),
    ],
    ids=["system-after-system", "message-after-default", "system-after-tool", "message-after-tool"],
)
def test_a_1h_breakpoint_after_a_5m_one_is_the_api_400(
    echo_in_process: anthropic.Anthropic, fields: dict[str, Any], path: str, earlier: str
) -> None:
    client = echo_in_process
    for call in (
        lambda: client.messages.create(model=MODEL, max_tokens=5, **fields),
        lambda: client.messages.count_tokens(model=MODEL, **fields),
    ):
        with pytest.raises(anthropic.BadRequestError) as info:
            call()
        assert info.value.status_code == 400
        error = info.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error"
        message = error["message"]
        assert message.startswith(
            f"{path}.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' "
            f"cache_control block. {ORDER}"
        ), message
        assert f"The earlier one: {earlier}.cache_control" in message


@pytest.mark.parametrize(
    "fields",
    [
        body(tool=ONE_HOUR, system=[ONE_HOUR, FIVE_MIN], user=[DEFAULT]),  # non-increasing
        body(tool=ONE_HOUR, system=[ONE_HOUR], user=[ONE_HOUR]),
        body(tool=DEFAULT, system=[FIVE_MIN], user=[DEFAULT]),
        body(system=[None, ONE_HOUR], user=[FIVE_MIN]),  # blocks without a breakpoint do not count
    ],
    ids=["1h-then-5m", "all-1h", "all-5m", "unmarked-first"],
)
def test_non_increasing_ttls_are_served(echo_in_process: anthropic.Anthropic, fields: dict[str, Any]) -> None:
    answer = echo_in_process.messages.create(model=MODEL, max_tokens=5, **fields)
    assert answer.stop_reason in ("end_turn", "max_tokens")
