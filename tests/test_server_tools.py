"""Server tools (web_search, web_fetch) through the official SDK, on the scripted echo driver.

Every call is answered with the API's ``unavailable`` tool-result error and
the model goes on after it in the same message (the echo script's ``then``
plays that continuation). ``echo-tools`` yields native tool call events,
``echo-hermes`` writes calls as text parsed by the Hermes parser.
"""

from __future__ import annotations

from typing import Any

import anthropic
import anthropic.types as api
import httpx
import pytest
from server_tool_defs import WEATHER, WEB_FETCH, WEB_SEARCH

from missive.testing import in_process_app
from missive.tools.server import MAX_SERVER_CALLS
from missive_echo import script

SEARCH_CALL = {"tool_call": {"name": "web_search", "arguments": ['{"query":', ' "tide times"}']}}
AFTER = [{"script": [{"text": "I could not search."}]}]
ASK = script({"text": "Let me look."}, SEARCH_CALL, then=AFTER)


def blocks_without_ids(message: Any) -> list[dict[str, Any]]:
    dumped = [b.model_dump(exclude_none=True) for b in message.content]
    for block in dumped:
        block.pop("id", None)
        block.pop("tool_use_id", None)
    return dumped


def test_call_is_answered_unavailable_and_the_turn_goes_on(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(
        model="echo-tools", max_tokens=50, tools=[WEB_SEARCH], messages=[{"role": "user", "content": ASK}]
    )
    assert [b.type for b in msg.content] == ["text", "server_tool_use", "web_search_tool_result", "text"]
    text, call, result, answer = msg.content
    assert isinstance(call, api.ServerToolUseBlock) and isinstance(result, api.WebSearchToolResultBlock)
    assert (
        call.id.startswith("srvtoolu_")
        and call.name == "web_search"
        and call.input == {"query": "tide times"}
    )
    assert result.tool_use_id == call.id
    assert (
        isinstance(result.content, api.WebSearchToolResultErrorObject)
        and result.content.error_code == "unavailable"
    )
    assert text.text == "Let me look." and answer.text == "I could not search."
    assert msg.stop_reason == "end_turn"
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_search_requests == 0
    assert msg.usage.output_tokens == 3  # both rounds: text + call, then the answer


def test_stream_and_non_stream_give_the_same_blocks(echo: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = dict(
        model="echo-tools", max_tokens=50, tools=[WEB_SEARCH], messages=[{"role": "user", "content": ASK}]
    )
    plain = echo.messages.create(**kwargs)
    events = []
    with echo.messages.stream(**kwargs) as stream:
        for event in stream:
            events.append(event)
        final = stream.get_final_message()
    assert blocks_without_ids(final) == blocks_without_ids(plain)
    assert final.content[2].tool_use_id == final.content[1].id
    assert (final.stop_reason, final.usage.output_tokens) == (plain.stop_reason, plain.usage.output_tokens)
    assert final.usage.input_tokens == plain.usage.input_tokens  # cumulative over both rounds
    # The call streams its input like tool_use; the result arrives whole, with no delta.
    deltas = {e.index: e.delta.type for e in events if e.type == "content_block_delta"}
    assert deltas == {0: "text_delta", 1: "input_json_delta", 3: "text_delta"}
    start = next(e for e in events if e.type == "content_block_start" and e.index == 2)
    assert start.content_block.content.error_code == "unavailable"
    starts = [e.index for e in events if e.type == "content_block_start"]
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert starts == stops == [0, 1, 2, 3]


def test_web_fetch_and_a_parsed_call(echo: anthropic.Anthropic) -> None:
    call = '<tool_call>\n{"name": "web_fetch", "arguments": {"url": "https://example.org"}}\n</tool_call>'
    content = script({"text": call}, then=[{"script": [{"text": "The page could not be fetched."}]}])
    for stream in (False, True):
        kwargs: dict[str, Any] = dict(
            model="echo-hermes",
            max_tokens=50,
            tools=[WEATHER, WEB_FETCH],
            messages=[{"role": "user", "content": content}],
        )
        if stream:
            with echo.messages.stream(**kwargs) as s:
                msg = s.get_final_message()
        else:
            msg = echo.messages.create(**kwargs)
        assert [b.type for b in msg.content] == ["server_tool_use", "web_fetch_tool_result", "text"]
        assert msg.content[0].input == {"url": "https://example.org"}
        assert isinstance(msg.content[1], api.WebFetchToolResultBlock)
        assert isinstance(msg.content[1].content, api.WebFetchToolResultErrorBlock)
        assert msg.content[1].content.error_code == "unavailable"
        assert msg.content[2].text == "The page could not be fetched." and msg.stop_reason == "end_turn"


def test_history_round_trip(echo_url: str, echo: anthropic.Anthropic) -> None:
    """The blocks sent back in the assistant turn are accepted, rendered (not
    reported as ignored) and counted like the message itself."""
    first = echo.messages.create(
        model="echo-tools", max_tokens=50, tools=[WEB_SEARCH], messages=[{"role": "user", "content": ASK}]
    )
    messages = [
        {"role": "user", "content": ASK},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "thanks anyway"},
    ]
    body = {"model": "echo-tools", "max_tokens": 50, "tools": [WEB_SEARCH], "messages": messages}
    resp = httpx.post(f"{echo_url}/v1/messages", json=body)
    assert resp.status_code == 200, resp.text
    assert "missive-ignored" not in resp.headers
    assert resp.json()["content"] == [{"type": "text", "text": "thanks anyway"}]
    counted = httpx.post(
        f"{echo_url}/v1/messages/count_tokens", json={k: v for k, v in body.items() if k != "max_tokens"}
    )
    assert counted.json()["input_tokens"] == resp.json()["usage"]["input_tokens"]


def test_paused_turn_resumes_after_the_last_result(echo: anthropic.Anthropic) -> None:
    """A model that keeps calling: after MAX_SERVER_CALLS answers the turn
    pauses; sent back as is, it goes on where it stopped."""
    loop = script(SEARCH_CALL, then=[{"script": [SEARCH_CALL]}] * (MAX_SERVER_CALLS - 1) + AFTER)
    user = {"role": "user", "content": loop}
    paused = echo.messages.create(model="echo-tools", max_tokens=50, tools=[WEB_SEARCH], messages=[user])
    assert paused.stop_reason == "pause_turn"
    assert [b.type for b in paused.content] == [
        "server_tool_use",
        "web_search_tool_result",
    ] * MAX_SERVER_CALLS
    codes = [b.content.error_code for b in paused.content if b.type == "web_search_tool_result"]
    assert codes == ["unavailable"] * 5 + ["max_uses_exceeded"] * (MAX_SERVER_CALLS - 5)  # max_uses: 5
    resumed = echo.messages.create(
        model="echo-tools",
        max_tokens=50,
        tools=[WEB_SEARCH],
        messages=[
            user,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in paused.content]},
        ],
    )
    assert [b.type for b in resumed.content] == ["text"] and resumed.content[0].text == "I could not search."
    assert resumed.stop_reason == "end_turn"


def test_no_budget_left_after_the_call_ends_with_max_tokens(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(
        model="echo-tools", max_tokens=2, tools=[WEB_SEARCH], messages=[{"role": "user", "content": ASK}]
    )
    assert [b.type for b in msg.content] == ["text", "server_tool_use", "web_search_tool_result"]
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 2


def test_tool_choice_naming_the_server_tool(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(
        model="echo-tools",
        max_tokens=50,
        tools=[WEATHER, WEB_SEARCH],
        tool_choice={"type": "tool", "name": "web_search", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": script(SEARCH_CALL, then=AFTER)}],
    )
    assert [b.type for b in msg.content] == ["server_tool_use", "web_search_tool_result", "text"]
    assert msg.stop_reason == "end_turn"


def test_client_call_after_the_result_ends_with_tool_use(echo: anthropic.Anthropic) -> None:
    """Mixed with a custom tool, disable_parallel_tool_use: the model reads the
    error, then calls the client's tool once; the turn ends with tool_use."""
    weather = {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Brest"}']}}
    content = script(SEARCH_CALL, then=[{"script": [weather, weather]}])
    msg = echo.messages.create(
        model="echo-tools",
        max_tokens=50,
        tools=[WEATHER, WEB_SEARCH],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=[{"role": "user", "content": content}],
    )
    assert [b.type for b in msg.content] == ["server_tool_use", "web_search_tool_result", "tool_use"]
    assert msg.content[2].id.startswith("toolu_") and msg.stop_reason == "tool_use"


def test_server_call_beside_a_client_call_is_left_unanswered(echo: anthropic.Anthropic) -> None:
    """As the API: a server call made together with a client call gets no
    result and the turn ends with tool_use; sent back with the client's
    result, the history is accepted and the model goes on."""
    weather = {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Brest"}']}}
    user = {"role": "user", "content": script(weather, SEARCH_CALL, then=AFTER)}
    msg = echo.messages.create(
        model="echo-tools", max_tokens=50, tools=[WEATHER, WEB_SEARCH], messages=[user]
    )
    assert [b.type for b in msg.content] == ["tool_use", "server_tool_use"] and msg.stop_reason == "tool_use"
    following = echo.messages.create(
        model="echo-tools",
        max_tokens=50,
        tools=[WEATHER, WEB_SEARCH],
        messages=[
            user,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": msg.content[0].id, "content": "rain"}],
            },
        ],
    )
    assert following.content[0].text == "I could not search."


def test_model_without_tool_use(echo_url: str, echo: anthropic.Anthropic) -> None:
    """Not offered (reported as ignored), history blocks left out and
    reported; forcing the tool is the capability 400 any forced tool gets."""
    body = {
        "model": "echo",
        "max_tokens": 5,
        "tools": [WEB_SEARCH],
        "messages": [
            {"role": "user", "content": "search"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_1",
                        "name": "web_search",
                        "input": {"query": "q"},
                    }
                ],
            },
            {"role": "user", "content": "again"},
        ],
    }
    resp = httpx.post(f"{echo_url}/v1/messages", json=body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["missive-ignored"] == (
        'tools.0 (tool type "web_search_20250305": this model cannot call tools), '
        'messages.1.content.0 (block type "server_tool_use": this model cannot call tools)'
    )
    assert resp.json()["content"][0]["text"] == "again"
    with pytest.raises(anthropic.BadRequestError) as info:
        echo.messages.create(
            model="echo",
            max_tokens=5,
            tools=[WEB_SEARCH],
            tool_choice={"type": "tool", "name": "web_search"},
            messages=[{"role": "user", "content": "x"}],
        )
    assert info.value.body["error"]["message"] == (
        "tools with tool_choice \"tool\" is not supported by model 'echo' (driver 'echo'); supported: no "
        "tool use"
    )


def test_strict_mode_accepts_server_tools(echo_config: dict) -> None:
    config = {**echo_config, "server": {"strict": True}}
    with in_process_app(config) as app:
        client = app.sdk()
        msg = client.messages.create(
            model="echo-tools",
            max_tokens=50,
            tools=[WEB_SEARCH, WEB_FETCH],
            messages=[{"role": "user", "content": ASK}],
        )
        assert msg.content[2].type == "web_search_tool_result" and msg.stop_reason == "end_turn"
