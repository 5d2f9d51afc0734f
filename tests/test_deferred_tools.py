"""Deferred tools (``defer_loading: true``) and ``tool_reference`` blocks, through the SDK.

On the default model (SmolLM2, rendered by Missive with its chat template):
a deferred tool costs no prompt token until a ``tool_reference`` loads it;
loaded, its definition stands where the reference is, so the prompt before
it (the tool list at the top included) is the one the previous turn had and
is read from the cache; ``count_tokens`` agrees with ``usage``. On the echo
driver: a loaded tool can be called, references to unknown tools are a 400,
and neither field is reported as ignored.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from missive_echo import script

READ = {
    "name": "read_file",
    "description": "Read a file of the project.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
SEARCH = {
    "name": "tool_search",
    "description": "Find tools by keyword; returns references to them.",
    "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
}
GREP = {
    "name": "grep",
    "description": (
        "Search file contents with a regular expression and report every matching line with its path."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "The regular expression."},
            "path": {"type": "string", "description": "Directory to search in."},
            "ignore_case": {"type": "boolean"},
        },
        "required": ["pattern"],
    },
}
DEFERRED_GREP = {**GREP, "defer_loading": True}
QUESTION = {"role": "user", "content": "Where is the word tide used in this project?"}
SEARCHED = {
    "role": "assistant",
    "content": [
        {"type": "tool_use", "id": "toolu_search1", "name": "tool_search", "input": {"query": "grep"}}
    ],
}
LOADED = {
    "role": "user",
    "content": [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_search1",
            "content": [{"type": "tool_reference", "tool_name": "grep"}],
        }
    ],
}


def test_deferred_tool_costs_nothing_until_loaded(smol: anthropic.Anthropic) -> None:
    eager = smol.messages.count_tokens(model="smollm2-135m", tools=[READ, SEARCH, GREP], messages=[QUESTION])
    deferred = smol.messages.count_tokens(
        model="smollm2-135m", tools=[READ, SEARCH, DEFERRED_GREP], messages=[QUESTION]
    )
    without = smol.messages.count_tokens(model="smollm2-135m", tools=[READ, SEARCH], messages=[QUESTION])
    assert deferred.input_tokens == without.input_tokens < eager.input_tokens


def test_loading_a_tool_keeps_the_cached_prefix(smol: anthropic.Anthropic) -> None:
    """The turn that loads a tool reads every token of the turn before from
    the cache: the tool list at the top did not change. Had the loaded tool
    joined that list (as a tool sent without ``defer_loading`` would), the
    prompt would differ from that tool's place in the list on, and only the
    part before it could be reused."""
    tools = [READ, SEARCH, DEFERRED_GREP]
    greedy: dict[str, Any] = {"model": "smollm2-135m", "extra_body": {"temperature": 0.0}}
    first = smol.messages.create(**greedy, max_tokens=0, tools=tools, messages=[QUESTION])  # warm-up
    first_prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    history = [QUESTION, SEARCHED, LOADED]
    second = smol.messages.create(**greedy, max_tokens=1, tools=tools, messages=history)
    assert second.usage.cache_read_input_tokens >= first_prompt - 1
    counted = smol.messages.count_tokens(model="smollm2-135m", tools=tools, messages=history).input_tokens
    assert counted == second.usage.input_tokens + second.usage.cache_read_input_tokens
    # The same turn with the tool joining the top list: the cache stops at the list.
    smol.messages.create(**greedy, max_tokens=0, tools=tools, messages=[QUESTION])
    moved = smol.messages.create(**greedy, max_tokens=1, tools=[READ, SEARCH, GREP], messages=history)
    assert moved.usage.cache_read_input_tokens < first_prompt - 1 <= second.usage.cache_read_input_tokens


def test_loaded_tool_is_offered_and_called(echo: anthropic.Anthropic) -> None:
    call = '<tool_call>\n{"name": "grep", "arguments": {"pattern": "tide"}}\n</tool_call>'
    history = [
        QUESTION,
        SEARCHED,
        {"role": "user", "content": [*LOADED["content"], {"type": "text", "text": script({"text": call})}]},
    ]
    raw = echo.messages.with_raw_response.create(
        model="echo-hermes", max_tokens=50, tools=[READ, SEARCH, DEFERRED_GREP], messages=history
    )
    msg = raw.parse()
    assert [(b.type, getattr(b, "name", None)) for b in msg.content] == [("tool_use", "grep")]
    assert msg.content[0].input == {"pattern": "tide"} and msg.stop_reason == "tool_use"
    ignored = raw.headers.get("missive-ignored", "")
    assert "defer_loading" not in ignored and "tool_reference" not in ignored


def test_reference_to_an_unknown_tool_is_a_400(echo: anthropic.Anthropic) -> None:
    bad = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_search1",
                "content": [{"type": "tool_reference", "tool_name": "nope"}],
            }
        ],
    }
    with pytest.raises(anthropic.BadRequestError) as caught:
        echo.messages.create(
            model="echo-tools", max_tokens=5, tools=[SEARCH], messages=[QUESTION, SEARCHED, bad]
        )
    message = caught.value.body["error"]["message"]
    assert message.startswith("messages.2.content.0.content.0: tool_reference names the tool 'nope'")


def test_reference_renders_the_definition_where_it_stands() -> None:
    """The echo driver's report shows the tool result as the model gets it:
    the loaded tool's definition, in the JSON function form of a tool list."""
    from missive.testing import in_process_app

    config = {
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 4000,
                "settings": {
                    "report": True,
                    "capabilities": {"tool_choice": ["auto", "any", "tool", "none"]},
                },
            }
        }
    }
    with in_process_app(config) as app:
        response = app.http_client(httpx).post(
            "/v1/messages",
            json={
                "model": "echo",
                "max_tokens": 5,
                "tools": [READ, SEARCH, DEFERRED_GREP],
                "messages": [
                    QUESTION,
                    SEARCHED,
                    {"role": "user", "content": [*LOADED["content"], {"type": "text", "text": "go on"}]},
                ],
            },
            timeout=30,
        )
    assert response.status_code == 200, response.text
    report = json.loads(response.json()["content"][0]["text"])
    result = next(b for t in report["turns"] for b in t["blocks"] if b["type"] == "tool_result")
    text = result["content"][0]["text"]
    assert text.startswith("<tools>\n") and text.endswith("\n</tools>")
    definition = json.loads(text.removeprefix("<tools>\n").removesuffix("\n</tools>"))
    assert definition == {
        "type": "function",
        "function": {"name": "grep", "description": GREP["description"], "parameters": GREP["input_schema"]},
    }
