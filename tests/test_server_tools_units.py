"""Server tools (web_search, web_fetch) without a server: definitions, block
schemas, the ignored-field report, history rendering and the continuation
prompt (:mod:`missive.tools.server`)."""

from __future__ import annotations

import re
from typing import Any

import anthropic.types as api
import pytest
from server_tool_defs import WEATHER, WEB_FETCH, WEB_SEARCH

from missive.driver.capabilities import Capabilities
from missive.messages.conversation import build_conversation, continue_after
from missive.protocol.ids import server_tool_use_id
from missive.protocol.schema.blocks import (
    ServerToolBlock,
    ServerToolUseBlock,
    ToolResultBlock,
    ToolUseBlock,
    WebFetchToolResultBlock,
    WebSearchToolResultBlock,
)
from missive.protocol.schema.ignored import collect_ignored
from missive.protocol.schema.request import MessagesRequest
from missive.tools.definitions import ToolChoice, choice_after_server_call, offered_tools
from missive.tools.render import hermes_messages, native_messages
from missive.tools.server import SERVER_TOOLS, answer_blocks, error_result, server_block_paths

CALL = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "news"}}
RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"},
}
ERROR_TEXT = "the web_search tool returned an error: unavailable"


def request(messages: list[dict[str, Any]], **fields: Any) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 10, "messages": messages, **fields})


def test_error_results_have_the_api_shapes_and_parse_in_the_sdk() -> None:
    search = error_result(SERVER_TOOLS["web_search_"], "srvtoolu_1")
    fetch = error_result(SERVER_TOOLS["web_fetch_"], "srvtoolu_2", "max_uses_exceeded")
    assert search == RESULT
    assert fetch == {
        "type": "web_fetch_tool_result",
        "tool_use_id": "srvtoolu_2",
        "content": {"type": "web_fetch_tool_result_error", "error_code": "max_uses_exceeded"},
    }
    parsed = api.WebSearchToolResultBlock.model_validate(search)
    assert (
        isinstance(parsed.content, api.WebSearchToolResultErrorObject)
        and parsed.content.error_code == "unavailable"
    )
    fetched = api.WebFetchToolResultBlock.model_validate(fetch)
    assert isinstance(fetched.content, api.WebFetchToolResultErrorBlock)
    assert re.fullmatch(r"srvtoolu_[0-9A-Za-z]{24}", server_tool_use_id())


def test_server_tools_are_offered_with_synthesized_schemas() -> None:
    described = {**WEB_FETCH, "description": "Read a page."}
    tools, skipped = offered_tools(
        request([{"role": "user", "content": "x"}], tools=[WEB_SEARCH, described, WEATHER])
    )
    assert skipped == []
    search, fetch, weather = tools
    assert (search.name, search.server.result_type) == ("web_search", "web_search_tool_result")
    assert (
        search.input_schema["required"] == ["query"]
        and search.input_schema["properties"]["query"]["type"] == "string"
    )
    assert fetch.input_schema["required"] == ["url"] and fetch.description == "Read a page."
    assert weather.server is None and weather.input_schema == WEATHER["input_schema"]


def test_server_tools_not_offered_to_a_model_that_cannot_call_tools() -> None:
    body = request(
        [{"role": "user", "content": "x"}],
        tools=[WEB_SEARCH, {"type": "code_execution_20250825", "name": "c"}],
    )
    tools, skipped = offered_tools(body, server_tools=False)
    assert tools == ()
    assert skipped == [
        'tools.0 (tool type "web_search_20250305": this model cannot call tools)',
        'tools.1 (tool type "code_execution_20250825": not available on this server)',
    ]
    assert [t.name for t in offered_tools(body)[0]] == ["web_search"]  # code execution is never offered


def test_limit_fields_of_server_tools_are_honoured_not_reported() -> None:
    body = request(
        [{"role": "user", "content": "x"}],
        tools=[
            {
                **WEB_SEARCH,
                "allowed_domains": ["a.org"],
                "user_location": {"type": "approximate"},
                "defer_loading": True,
            },
            {**WEB_FETCH, "max_content_tokens": 100, "citations": {"enabled": True}},
            {**WEATHER, "max_uses": 3},  # meaningless on a custom tool: reported
        ],
    )
    assert collect_ignored(body) == ["tools.2.max_uses"]  # defer_loading is honoured (missive.tools.deferred)


def test_history_blocks_validate_as_typed_blocks() -> None:
    code = {"type": "server_tool_use", "id": "srvtoolu_c", "name": "code_execution", "input": {}}
    body = request(
        [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": [CALL, RESULT, code, {**RESULT, "type": "web_fetch_tool_result"}],
            },
            {"role": "user", "content": [CALL]},
        ]
    )
    blocks = body.messages[1].content
    assert [type(b) for b in blocks] == [
        ServerToolUseBlock,
        WebSearchToolResultBlock,
        ServerToolBlock,
        WebFetchToolResultBlock,
    ]
    # Rendered where they belong (assistant); a code execution call and one in a user message are not.
    assert collect_ignored(body) == [
        'messages.1.content.2 (block type "server_tool_use")',
        'messages.2.content.0 (block type "server_tool_use")',
    ]


def test_history_renders_the_call_and_its_result() -> None:
    body = request(
        [
            {"role": "user", "content": "news?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Searching."},
                    CALL,
                    RESULT,
                    {"type": "text", "text": "No luck."},
                ],
            },
            {"role": "user", "content": "ok"},
        ]
    )
    conv = build_conversation(body)
    assert [t.role for t in conv.turns] == ["user", "assistant", "user", "assistant", "user"]
    call, result = conv.turns[1].blocks[1], conv.turns[2].blocks[0]
    assert isinstance(call, ToolUseBlock) and (call.id, call.name, call.input) == (
        "srvtoolu_1",
        "web_search",
        {"query": "news"},
    )
    assert isinstance(result, ToolResultBlock) and result.tool_use_id == "srvtoolu_1"
    assert result.content == ERROR_TEXT and result.is_error
    assert conv.turns[1].text() == "Searching." and conv.turns[3].text() == "No luck."
    assert conv.prefill is None and conv.has_tool_blocks()


def test_paused_turn_goes_on_after_the_result_and_text_after_it_is_a_prefill() -> None:
    paused = build_conversation(
        request([{"role": "user", "content": "news?"}, {"role": "assistant", "content": [CALL, RESULT]}])
    )
    assert [t.role for t in paused.turns] == ["user", "assistant", "user"] and paused.prefill is None
    started = build_conversation(
        request(
            [
                {"role": "user", "content": "news?"},
                {"role": "assistant", "content": [CALL, RESULT, {"type": "text", "text": "Sorry,"}]},
            ]
        )
    )
    assert [t.role for t in started.turns] == ["user", "assistant", "user"] and started.prefill == "Sorry,"


def test_unanswered_call_is_rendered_unavailable() -> None:
    """The API leaves a server call unanswered when the model also called a client tool."""
    client_call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}
    body = request(
        [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [CALL, client_call]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
            },
        ]
    )
    conv = build_conversation(body)
    assert [t.role for t in conv.turns] == ["user", "assistant", "user", "assistant", "user"]
    assert conv.turns[2].blocks[0].content == ERROR_TEXT
    assert conv.turns[3].blocks[0].id == "toolu_1" and conv.turns[4].blocks[0].content == "sunny"


@pytest.mark.parametrize(
    ("result", "text", "is_error"),
    [
        (
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": [
                    {
                        "type": "web_search_result",
                        "title": "A",
                        "url": "https://a.org",
                        "encrypted_content": "x",
                    },
                    {
                        "type": "web_search_result",
                        "title": "B",
                        "url": "https://b.org",
                        "encrypted_content": "y",
                    },
                ],
            },
            "[A](https://a.org)\n[B](https://b.org)",
            False,
        ),
        (
            {
                "type": "web_fetch_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": {
                    "type": "web_fetch_result",
                    "url": "https://a.org/p",
                    "content": {
                        "type": "document",
                        "title": "Page",
                        "source": {"type": "text", "media_type": "text/plain", "data": "Body."},
                    },
                },
            },
            "https://a.org/p\nPage\nBody.",
            False,
        ),
        (
            {
                "type": "web_fetch_tool_result",
                "tool_use_id": "srvtoolu_1",
                "content": {
                    "type": "web_fetch_result",
                    "url": "https://a.org/f.pdf",
                    "content": {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"},
                    },
                },
            },
            "https://a.org/f.pdf\n(a application/pdf document, not shown)",
            False,
        ),
        (
            {
                **RESULT,
                "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
            },
            "the web_search tool returned an error: max_uses_exceeded",
            True,
        ),
    ],
)
def test_results_of_the_real_api_are_rendered(result: dict, text: str, is_error: bool) -> None:
    """A conversation begun on the real API carries real results: the model reads what is readable."""
    conv = build_conversation(
        request([{"role": "user", "content": "x"}, {"role": "assistant", "content": [CALL, result]}])
    )
    block = conv.turns[2].blocks[0]
    assert block.content == text and bool(block.is_error) is is_error


def test_no_tool_model_and_user_messages_leave_server_blocks_out() -> None:
    body = request(
        [
            {"role": "user", "content": [{"type": "text", "text": "x"}, CALL]},
            {"role": "assistant", "content": [{"type": "text", "text": "y"}, CALL, RESULT]},
            {"role": "user", "content": "z"},
        ]
    )
    plain = build_conversation(body, server_tools=False)
    assert [t.role for t in plain.turns] == ["user", "assistant", "user"] and not plain.has_tool_blocks()
    assert build_conversation(body).turns[0].blocks[1:] == []  # a user message's server block is dropped
    assert server_block_paths(body) == [
        'messages.1.content.1 (block type "server_tool_use": this model cannot call tools)',
        'messages.1.content.2 (block type "web_search_tool_result": this model cannot call tools)',
    ]


def test_continuation_prompt_equals_a_clients_resumption() -> None:
    """The pipeline's continued conversation is the one a client's pause_turn resend builds."""
    user = [{"role": "user", "content": "news?"}]
    base = build_conversation(request([*user, {"role": "assistant", "content": "Sure,"}]))  # a prefill
    continued = continue_after(base, answer_blocks(" searching.", CALL, RESULT))
    resent = build_conversation(
        request(
            [
                *user,
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Sure, searching."}, CALL, RESULT],
                },
            ]
        )
    )
    assert continued.prefill is None and continued.turns[1].text() == "Sure, searching."
    assert native_messages(continued) == native_messages(resent)
    assert hermes_messages(continued, ()) == hermes_messages(resent, ())


def test_native_and_hermes_renderings_show_the_call_and_the_error() -> None:
    conv = build_conversation(
        request([{"role": "user", "content": "news?"}, {"role": "assistant", "content": [CALL, RESULT]}])
    )
    assert native_messages(conv)[1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "srvtoolu_1",
                    "type": "function",
                    "function": {"name": "web_search", "arguments": {"query": "news"}},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "srvtoolu_1",
            "name": "web_search",
            "content": f"Error: {ERROR_TEXT}",
        },
    ]
    hermes = hermes_messages(conv, ())
    assert hermes[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "web_search", "arguments": {"query": "news"}}\n</tool_call>',
    }
    assert hermes[3] == {"role": "user", "content": f"<tool_response>\nError: {ERROR_TEXT}\n</tool_response>"}


@pytest.mark.parametrize(
    ("declared", "strict_modes", "strict", "expected"),
    [
        ({"auto", "any", "tool", "none"}, set(), False, "auto"),
        ({"auto", "any", "tool", "none"}, {"any", "tool"}, True, "none"),  # strict tools not enforced in auto
        ({"auto", "any", "tool", "none"}, {"auto", "any", "tool"}, True, "auto"),
        ({"tool", "none"}, set(), False, "none"),
        ({"tool"}, set(), False, None),
    ],
)
def test_choice_after_a_server_call(
    declared: set, strict_modes: set, strict: bool, expected: str | None
) -> None:
    tools, _ = offered_tools(
        request([{"role": "user", "content": "x"}], tools=[{**WEB_SEARCH, "strict": strict}])
    )
    caps = Capabilities(tool_choice=frozenset(declared), strict_tools=frozenset(strict_modes))
    choice = choice_after_server_call(ToolChoice("tool", "web_search", parallel=False), caps, tools)
    assert (choice.mode if choice else None) == expected
    assert choice is None or (choice.name is None and choice.parallel is False)


def test_template_rendering_of_llamacpp_and_mlx_shows_the_call_and_the_error() -> None:
    """The in-process drivers render with template_messages: the history's
    server call and error reach the prompt in both renderings, also when
    tool_choice none offers no tools; web_search is offered like any tool."""
    from missive.chat_template.rendering import render_prompt
    from missive.testing import generation_request
    from missive.tools.render import template_messages

    chatml = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    native = "{# tools #}{{ tools | tojson if tools }}" + chatml.replace(
        "{{ m.content }}", "{{ m.content }}{{ m.tool_calls | tojson if m.tool_calls }}"
    )
    history = [{"role": "user", "content": "news?"}, {"role": "assistant", "content": [CALL, RESULT]}]
    for choice in ({"type": "auto"}, {"type": "none"}):
        request = generation_request(history, tools=[WEB_SEARCH], tool_choice=choice)
        for template in (chatml, native):
            messages, extra = template_messages(request, template)
            prompt = render_prompt(template, messages, **extra)
            assert '"web_search"' in prompt and '"query": "news"' in prompt
            assert f"Error: {ERROR_TEXT}" in prompt
            assert prompt.endswith("<|im_start|>assistant\n")  # the answer goes on after the result
            offered = '"required": ["query"]' in prompt
            assert offered is (choice["type"] == "auto")


@pytest.mark.anyio
async def test_continued_prompt_over_the_context_ends_the_message() -> None:
    """When the prompt with the call and its result no longer fits, the
    message ends there with model_context_window_exceeded (never an error)."""
    from missive.config import ModelEntry
    from missive.messages.stream import MessageStream, accumulate
    from missive.testing import generation_request
    from missive_echo import script
    from missive_echo.driver import EchoDriver

    ask = script(
        {"text": "one two three four five"},
        {"tool_call": {"name": "web_search", "arguments": ["{}"]}},
        then=[{"script": [{"text": "never"}]}],
    )
    words = len(ask.split())  # the echo driver's prompt size: whitespace-separated words
    caps = {"tool_choice": ["auto", "any", "tool", "none"]}
    entry = ModelEntry(driver="echo", context_window=words + 3, settings={"capabilities": caps})
    driver = EchoDriver("echo", entry, Capabilities())
    request = generation_request([{"role": "user", "content": ask}], max_tokens=50, tools=[WEB_SEARCH])
    stream = MessageStream(driver, request, message_id="msg_test", model="echo")
    events = [await stream.start()]
    events += [event async for event in stream.events()]
    message = accumulate(events)
    assert [b["type"] for b in message["content"]] == ["text", "server_tool_use", "web_search_tool_result"]
    assert message["stop_reason"] == "model_context_window_exceeded"
    assert message["usage"]["input_tokens"] == words and message["usage"]["output_tokens"] == 2
