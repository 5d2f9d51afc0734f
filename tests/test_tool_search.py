"""Server-side tool search (``tool_search_tool_regex``/``_bm25``) through the SDK, in process.

The echo driver's script makes the model call the search tool; the server
searches the request's deferred tools, answers with a
``tool_search_tool_result`` of ``tool_reference`` blocks, and the model goes
on in the same message with the tools found offered (``echo-hermes`` parses
its next call only if the tool is offered). Sent back in history, the result
block loads the tools again, renders their definitions (the ``report``
model shows the prompt) and is counted by ``count_tokens``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import anthropic.types as api
import httpx
import pytest

from missive.protocol.schema.request import Tool
from missive.testing import InProcessApp, in_process_app
from missive.tools.tool_search import MAX_RESULTS, ToolSearchError, bm25_search, regex_search
from missive_echo import script

TOOLS_MODES = {"tool_choice": ["auto", "any", "tool", "none"]}
CONFIG: dict[str, Any] = {
    "models": {
        "echo-hermes": {
            "driver": "echo",
            "context_window": 4000,
            "settings": {"tool_parser": "hermes", "capabilities": TOOLS_MODES},
        },
        "echo-report": {
            "driver": "echo",
            "context_window": 4000,
            "settings": {"report": True, "capabilities": TOOLS_MODES},
        },
    }
}


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {arg: {"type": "string", "description": text} for arg, text in properties.items()},
        },
        "defer_loading": True,
    }


WEATHER = _tool("get_weather", "Current weather conditions for a city.", city="The city name.")
FORECAST = _tool("get_forecast", "A five day weather forecast.", city="The city.")
GREP = _tool("grep", "Search file contents with a regular expression.", pattern="The expression.")
EMAIL = _tool("send_email", "Send a message to someone.", recipient="Their email address.")
READ = {
    "name": "read_file",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
BM25 = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
ALL = [READ, WEATHER, FORECAST, GREP, EMAIL]


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk()


def search_call(tool: str, query: str) -> dict[str, Any]:
    return {"tool_call": {"name": tool, "arguments": [json.dumps({"query": query})]}}


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def create(client: anthropic.Anthropic, stream: bool, **kwargs: Any) -> Any:
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()
    return client.messages.create(**kwargs)


def references(block: Any) -> list[str]:
    assert isinstance(block, api.ToolSearchToolResultBlock)
    assert isinstance(block.content, api.ToolSearchToolSearchResultBlock)
    return [r.tool_name for r in block.content.tool_references]


@pytest.mark.parametrize("stream", [False, True])
def test_regex_search_loads_the_tool_and_the_model_calls_it(
    client: anthropic.Anthropic, stream: bool
) -> None:
    then = [{"script": [{"text": hermes_call("get_weather", {"city": "Paris"})}]}]
    content = script(search_call("tool_search_tool_regex", "(?i)weather"), then=then)
    msg = create(
        client,
        stream,
        model="echo-hermes",
        max_tokens=50,
        tools=[*ALL, REGEX],
        messages=[{"role": "user", "content": content}],
    )
    assert [b.type for b in msg.content] == ["server_tool_use", "tool_search_tool_result", "tool_use"]
    call, result, used = msg.content
    assert isinstance(call, api.ServerToolUseBlock)
    assert (call.name, call.input) == ("tool_search_tool_regex", {"query": "(?i)weather"})
    assert call.id.startswith("srvtoolu_") and result.tool_use_id == call.id
    # Both weather tools, in the order of `tools`; not the non-deferred or unrelated ones.
    assert references(result) == ["get_weather", "get_forecast"]
    assert isinstance(used, api.ToolUseBlock) and (used.name, used.input) == (
        "get_weather",
        {"city": "Paris"},
    )
    assert msg.stop_reason == "tool_use"
    usage = msg.usage.server_tool_use  # the SDK's usage has no field for tool searches
    assert usage is not None and (usage.web_search_requests, usage.web_fetch_requests) == (0, 0)


def test_a_tool_not_found_stays_uncallable(client: anthropic.Anthropic) -> None:
    """The Hermes parser of the continued generation knows only the tools
    offered: a call of a deferred tool the search did not load stays text."""
    then = [{"script": [{"text": hermes_call("send_email", {"recipient": "a@b.c"})}]}]
    content = script(search_call("tool_search_tool_regex", "weather"), then=then)
    msg = client.messages.create(
        model="echo-hermes",
        max_tokens=50,
        tools=[*ALL, REGEX],
        messages=[{"role": "user", "content": content}],
    )
    assert [b.type for b in msg.content] == ["server_tool_use", "tool_search_tool_result", "text"]
    assert msg.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
def test_bm25_search_ranks_by_relevance(client: anthropic.Anthropic, stream: bool) -> None:
    content = script(search_call("tool_search_tool_bm25", "weather forecast for the coming days"))
    msg = create(
        client,
        stream,
        model="echo-hermes",
        max_tokens=50,
        tools=[*ALL, BM25],
        messages=[{"role": "user", "content": content}],
    )
    assert [b.type for b in msg.content] == ["server_tool_use", "tool_search_tool_result"]
    assert references(msg.content[1]) == ["get_forecast", "get_weather"]
    assert msg.stop_reason == "end_turn"


def test_argument_descriptions_are_searched(client: anthropic.Anthropic) -> None:
    content = script(search_call("tool_search_tool_bm25", "email address"))
    msg = client.messages.create(
        model="echo-hermes",
        max_tokens=50,
        tools=[*ALL, BM25],
        messages=[{"role": "user", "content": content}],
    )
    assert references(msg.content[1]) == ["send_email"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("get_(weather", "invalid regular expression: missing ), unterminated subpattern at position 4"),
        ("a" * 201, "the pattern is longer than 200 characters"),
        ("", "`query` must be a non-empty string"),
        # Compiled without a syntax error, but refused by the compiler all the same.
        ("a{99999999999}", "invalid regular expression: the repetition number is too large"),
        ("(?u)(?a)a", "invalid regular expression: ASCII and UNICODE flags are incompatible"),
    ],
)
def test_bad_query_is_an_error_result(client: anthropic.Anthropic, query: str, message: str) -> None:
    then = [{"script": [{"text": "No tool then."}]}]
    content = script(search_call("tool_search_tool_regex", query), then=then)
    msg = client.messages.create(
        model="echo-hermes",
        max_tokens=50,
        tools=[*ALL, REGEX],
        messages=[{"role": "user", "content": content}],
    )
    assert [b.type for b in msg.content] == ["server_tool_use", "tool_search_tool_result", "text"]
    error = msg.content[1].content
    assert isinstance(error, api.ToolSearchToolResultErrorObject)
    assert (error.error_code, error.error_message) == ("invalid_tool_input", message)
    assert msg.content[2].text == "No tool then."


def test_catastrophic_pattern_times_out(client: anthropic.Anthropic) -> None:
    """``(a|aa)+$`` backtracks exponentially on ``aaa...ab``: the search is
    stopped at its timeout (``execution_time_exceeded``), the answer goes on."""
    slow = _tool("slow", "a" * 60 + "b")
    then = [{"script": [{"text": "No tool then."}]}]
    content = script(search_call("tool_search_tool_regex", "(a|aa)+$"), then=then)
    msg = client.messages.create(
        model="echo-hermes",
        max_tokens=50,
        tools=[slow, REGEX],
        messages=[{"role": "user", "content": content}],
    )
    error = msg.content[1].content
    assert isinstance(error, api.ToolSearchToolResultErrorObject)
    assert error.error_code == "execution_time_exceeded"
    assert msg.content[2].text == "No tool then."
    with pytest.raises(ToolSearchError) as caught:
        regex_search("(a|aa)+$", [Tool.model_validate(slow)], timeout=0.05)
    assert caught.value.code == "execution_time_exceeded"


def test_searches_return_at_most_max_results() -> None:
    tools = [Tool.model_validate(_tool(f"weather_{i}", "weather")) for i in range(MAX_RESULTS + 3)]
    assert regex_search("weather", tools) == [f"weather_{i}" for i in range(MAX_RESULTS)]
    assert len(bm25_search("weather", tools)) == MAX_RESULTS
    assert bm25_search("nothing alike", tools) == []


def history(app: InProcessApp, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A conversation whose assistant message searched and found ``get_weather``
    (as the server answered it), then a user turn."""
    first = app.sdk().messages.create(
        model="echo-hermes",
        max_tokens=50,
        tools=tools,
        messages=[{"role": "user", "content": script(search_call("tool_search_tool_regex", "get_weather"))}],
    )
    assert references(first.content[1]) == ["get_weather"]
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": "go on"},
    ]


def test_result_sent_back_renders_the_loaded_tool(app: InProcessApp) -> None:
    tools = [*ALL, REGEX]
    messages = history(app, tools)
    http = app.http_client(httpx)
    body = {"model": "echo-report", "max_tokens": 5, "tools": tools, "messages": messages}
    response = http.post("/v1/messages", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert "missive-ignored" not in response.headers
    report = json.loads(response.json()["content"][0]["text"])
    blocks = [b for t in report["turns"] for b in t["blocks"]]
    call = next(b for b in blocks if b["type"] == "tool_use")
    assert (call["name"], call["input"]) == ("tool_search_tool_regex", {"query": "get_weather"})
    result = next(b for b in blocks if b["type"] == "tool_result")
    text = result["content"][0]["text"]
    definition = json.loads(text.removeprefix("<tools>\n").removesuffix("\n</tools>"))
    assert definition["function"]["name"] == "get_weather"
    assert definition["function"]["parameters"] == WEATHER["input_schema"]
    counted = http.post(
        "/v1/messages/count_tokens", json={k: v for k, v in body.items() if k != "max_tokens"}
    )
    assert counted.json()["input_tokens"] == response.json()["usage"]["input_tokens"]
    # Without a reference the model reads that nothing was found.
    messages[1]["content"][1]["content"]["tool_references"] = []
    response = http.post("/v1/messages", json=body, timeout=30)
    report = json.loads(response.json()["content"][0]["text"])
    result = next(b for t in report["turns"] for b in t["blocks"] if b["type"] == "tool_result")
    assert result["content"] == "No tools matched the search."


def test_tool_loaded_in_history_can_be_forced(app: InProcessApp) -> None:
    tools = [*ALL, REGEX]
    messages = history(app, tools)
    messages[2]["content"] = script({"tool_call": {"name": "get_weather", "arguments": ['{"city": "Oslo"}']}})
    msg = app.sdk().messages.create(
        model="echo-hermes",
        max_tokens=50,
        tools=tools,
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=messages,
    )
    assert [(b.type, getattr(b, "name", None)) for b in msg.content] == [("tool_use", "get_weather")]
    # Not loaded: forcing it is the 400 of a tool that is not offered.
    messages[1]["content"][1]["content"]["tool_references"] = []
    with pytest.raises(anthropic.BadRequestError) as caught:
        app.sdk().messages.create(
            model="echo-hermes",
            max_tokens=50,
            tools=tools,
            tool_choice={"type": "tool", "name": "get_weather"},
            messages=messages,
        )
    assert caught.value.body["error"]["message"] == (  # why it is not offered (found by a newcomer)
        "tool_choice.name: tool 'get_weather' has `defer_loading: true` "
        "and no tool_reference has loaded it yet"
    )


def test_reference_to_an_unknown_tool_in_history_is_a_400(app: InProcessApp) -> None:
    tools = [*ALL, REGEX]
    messages = history(app, tools)
    messages[1]["content"][1]["content"]["tool_references"] = [
        {"type": "tool_reference", "tool_name": "nope"}
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        app.sdk().messages.create(model="echo-hermes", max_tokens=5, tools=tools, messages=messages)
    assert caught.value.body["error"]["message"].startswith(
        "messages.1.content.1.content.tool_references.0: tool_reference names the tool 'nope'"
    )
