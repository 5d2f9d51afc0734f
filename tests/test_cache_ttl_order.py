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


#: A tool loop's history: the call, then its result (whose content may carry breakpoints).
CALL = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}],
}


def result(inner: dict[str, Any] | None, own: dict[str, Any] | None) -> dict[str, Any]:
    """A user turn answering CALL: a tool_result whose text block carries
    ``inner`` and the tool_result itself ``own``, then a text block."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [text("r", inner)]}
    if own is not None:
        block["cache_control"] = own
    return {"role": "user", "content": [block, text("next", None)]}


def loop(inner: dict[str, Any] | None, own: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    return {
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "q"}, CALL, result(inner, own)],
        **fields,
    }


TOOLSET = {"type": "mcp_toolset", "mcp_server_name": "docs", "cache_control": FIVE_MIN}
SERVER = {"type": "url", "url": "https://mcp.example.com/mcp", "name": "docs"}


@pytest.mark.parametrize(
    ("fields", "field", "earlier"),
    [
        (body(system=[FIVE_MIN]) | {"cache_control": ONE_HOUR}, "cache_control.ttl", "system.0"),
        (body(user=[DEFAULT]) | {"cache_control": ONE_HOUR}, "cache_control.ttl", "messages.0.content.0"),
        (
            loop(FIVE_MIN, ONE_HOUR),
            "messages.2.content.0.cache_control.ttl",
            "messages.2.content.0.content.0",
        ),
        (
            loop(FIVE_MIN, None, system=[text("s", ONE_HOUR)]) | {"cache_control": ONE_HOUR},
            "cache_control.ttl",
            "messages.2.content.0.content.0",
        ),
        (
            {
                "tools": [TOOLSET, {**TOOL, "cache_control": ONE_HOUR}],
                "extra_body": {"mcp_servers": [SERVER]},  # not a field of the non-beta SDK call
                "messages": [{"role": "user", "content": "q"}],
            },
            "tools.1.cache_control.ttl",
            "tools.0",
        ),
    ],
    ids=[
        "top-level-after-system",
        "top-level-after-message",
        "result-after-its-content",
        "nested-then-top",
        "mcp",
    ],
)
def test_every_breakpoint_the_api_reads_is_in_the_order(
    echo_in_process: anthropic.Anthropic, fields: dict[str, Any], field: str, earlier: str
) -> None:
    """The top-level ``cache_control`` (it marks the last block), the blocks
    inside a ``tool_result`` (before the result's own marker) and
    ``mcp_toolset`` entries at their place in ``tools`` are breakpoints
    too (:mod:`missive.protocol.schema.breakpoints`)."""
    client = echo_in_process
    for call in (
        lambda: client.messages.create(model=MODEL, max_tokens=5, **fields),
        lambda: client.messages.count_tokens(model=MODEL, **fields),
    ):
        with pytest.raises(anthropic.BadRequestError) as info:
            call()
        message = info.value.body["error"]["message"]  # type: ignore[index]
        assert message.startswith(
            f"{field}: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. "
            f"{ORDER}"
        ), message
        assert f"The earlier one: {earlier}.cache_control" in message


@pytest.mark.parametrize(
    "fields",
    [
        body(system=[ONE_HOUR], user=[ONE_HOUR]) | {"cache_control": FIVE_MIN},
        body(system=[ONE_HOUR]) | {"cache_control": ONE_HOUR},
        loop(ONE_HOUR, FIVE_MIN),  # the content's marker comes first
        loop(None, None) | {"cache_control": DEFAULT},
    ],
    ids=["5m-top-level-last", "1h-top-level-after-1h", "1h-content-then-5m-result", "plain"],
)
def test_top_level_and_nested_breakpoints_in_order_are_served(
    echo_in_process: anthropic.Anthropic, fields: dict[str, Any]
) -> None:
    answer = echo_in_process.messages.create(model=MODEL, max_tokens=5, **fields)
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_breakpoints_inside_a_tool_result_count_among_the_four(echo_in_process: anthropic.Anthropic) -> None:
    fields = loop(FIVE_MIN, FIVE_MIN, system=[text("a", FIVE_MIN), text("b", FIVE_MIN), text("c", FIVE_MIN)])
    with pytest.raises(anthropic.BadRequestError) as info:
        echo_in_process.messages.count_tokens(model=MODEL, **fields)
    assert info.value.body["error"]["message"] == (  # type: ignore[index]
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )
