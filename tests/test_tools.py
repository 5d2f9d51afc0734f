"""Tool use through the core: definitions, tool_choice, history checks, parsed calls.

The echo driver plays scripted model output; ``echo-hermes`` parses tool calls
out of that text with the Hermes parser, as an in-process model's driver does.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from missive_echo import script

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture(scope="session")
def echo(echo_in_process: anthropic.Anthropic) -> anthropic.Anthropic:
    """These tests need no socket: the echo app in process (the ``api`` tier)."""
    return echo_in_process


CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich 🌧", "n": {"deep": [1, "}"]}}}\n'
    "</tool_call>"
)


def pieces(text: str, size: int) -> list[dict]:
    return [{"text": text[i : i + size]} for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_parsed_call_at_any_chunking(echo: anthropic.Anthropic, size: int) -> None:
    content = script(*pieces("Let me check." + CALL, size))
    kwargs = dict(
        model="echo-hermes", max_tokens=500, tools=[WEATHER], messages=[{"role": "user", "content": content}]
    )
    msg = echo.messages.create(**kwargs)
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[0].text == "Let me check."
    assert msg.content[1].name == "get_weather"
    assert msg.content[1].input == {"city": "Zürich 🌧", "n": {"deep": [1, "}"]}}
    assert msg.stop_reason == "tool_use"
    with echo.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert final.content[1].input == msg.content[1].input and final.content[0].text == "Let me check."


def test_two_calls_and_disable_parallel(echo: anthropic.Anthropic) -> None:
    two = CALL + "\n" + CALL.replace("Zürich 🌧", "Oslo")
    messages = [{"role": "user", "content": script(*pieces(two, 5))}]
    msg = echo.messages.create(model="echo-hermes", max_tokens=500, tools=[WEATHER], messages=messages)
    assert [b.type for b in msg.content] == ["tool_use", "tool_use"]  # no whitespace text block between
    assert [b.input["city"] for b in msg.content] == ["Zürich 🌧", "Oslo"]
    assert msg.content[0].id != msg.content[1].id
    one = echo.messages.create(
        model="echo-hermes",
        max_tokens=500,
        tools=[WEATHER],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=messages,
    )
    assert [b.type for b in one.content] == ["tool_use"] and one.stop_reason == "tool_use"


def test_malformed_call_is_given_back_as_text(echo: anthropic.Anthropic) -> None:
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par</tool_call>'
    msg = echo.messages.create(
        model="echo-hermes",
        max_tokens=500,
        tools=[WEATHER],
        messages=[{"role": "user", "content": script({"text": bad})}],
    )
    assert [b.type for b in msg.content] == ["text"] and msg.stop_reason == "end_turn"
    assert "get_weather" in msg.content[0].text  # the model's own characters, no fabricated call


def test_tool_choice_none_does_not_parse(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(
        model="echo-hermes",
        max_tokens=500,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[{"role": "user", "content": script({"text": CALL})}],
    )
    assert all(b.type == "text" for b in msg.content) and msg.stop_reason == "end_turn"


def test_native_tool_events_and_stop_reason(echo: anthropic.Anthropic) -> None:
    content = script(
        {"tool_call": {"name": "get_weather", "arguments": ['{"city":', ' "Rome"}']}}, stop_reason="end_turn"
    )
    msg = echo.messages.create(
        model="echo-tools", max_tokens=50, tools=[WEATHER], messages=[{"role": "user", "content": content}]
    )
    assert msg.stop_reason == "tool_use" and msg.content[0].input == {"city": "Rome"}


def test_tool_loop_history_is_accepted(echo: anthropic.Anthropic) -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Rome"}}
            ],
        },
        {"role": "system", "content": "# Environment"},  # clients insert these anywhere
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny", "is_error": False},
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    msg = echo.messages.create(model="echo-tools", max_tokens=50, tools=[WEATHER], messages=messages)
    # The system message stays where it was sent, a marked note before the result's turn.
    assert msg.content[0].text == "<system_message> # Environment </system_message> thanks"


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}],
                },
                {"role": "user", "content": "no result"},
            ],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_9. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "?"}],
                }
            ],
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
        (
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_d", "name": "get_weather", "input": {}},
                        {"type": "tool_use", "id": "toolu_d", "name": "get_weather", "input": {}},
                    ],
                },
            ],
            "messages.1.content.1: `tool_use` ids must be unique",
        ),
        (  # a call in a user message: the API's 400, not rendered as the user's words
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "toolu_u", "name": "get_weather", "input": {}}],
                },
            ],
            "messages.1: `tool_use` blocks can only be in `assistant` messages",
        ),
        (  # a result in an assistant message, even with its call before it
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {}},
                        {"type": "tool_result", "tool_use_id": "toolu_a", "content": "sunny"},
                    ],
                },
            ],
            "messages.1: `tool_result` blocks can only be in `user` messages",
        ),
    ],
)
def test_history_errors_use_the_api_wording(echo: anthropic.Anthropic, messages: list, expected: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        echo.messages.create(model="echo-tools", max_tokens=5, tools=[WEATHER], messages=messages)
    assert info.value.body["error"]["message"] == expected


def test_tool_choice_errors(echo: anthropic.Anthropic) -> None:
    user = [{"role": "user", "content": "x"}]
    with pytest.raises(anthropic.BadRequestError, match="tool 'nope' is not among"):
        echo.messages.create(
            model="echo-tools",
            max_tokens=5,
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "nope"},
            messages=user,
        )
    with pytest.raises(anthropic.BadRequestError, match="Tool names must be unique"):
        echo.messages.create(model="echo-tools", max_tokens=5, tools=[WEATHER, WEATHER], messages=user)
    with pytest.raises(anthropic.BadRequestError) as info:
        echo.messages.create(model="echo", max_tokens=5, tools=[WEATHER], messages=user)
    assert info.value.body["error"]["message"] == (
        "tools with tool_choice \"auto\" is not supported by model 'echo' (driver 'echo'); supported: no "
        "tool use"
    )


def test_client_tools_get_schemas(echo: anthropic.Anthropic) -> None:
    tools = [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    ]
    content = script({"text": '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'})
    msg = echo.messages.create(
        model="echo-hermes", max_tokens=50, tools=tools, messages=[{"role": "user", "content": content}]
    )
    assert msg.content[0].name == "bash" and msg.content[0].input == {"command": "ls"}


def test_forced_call_cut_before_its_name_leaves_no_markup(echo: anthropic.Anthropic) -> None:
    content = script({"text": "<tool_"}, {"text": "call>"})
    msg = echo.messages.create(
        model="echo-hermes",
        max_tokens=1,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": content}],
    )
    assert msg.stop_reason == "max_tokens" and msg.content == []


def test_forced_call_cut_by_max_tokens_is_a_max_tokens_answer(echo: anthropic.Anthropic) -> None:
    """A constrained (forced) call cut off by max_tokens: 200 with stop_reason
    max_tokens, the complete calls before it kept (the API's behaviour), not a 502."""
    first = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    content = script(
        {"text": first}, {"text": '<tool_call>\n{"name": "get_weather", "arg'}, {"text": "uments"}
    )
    kwargs: dict[str, Any] = dict(
        model="echo-hermes",
        max_tokens=2,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": content}],
    )
    plain = echo.messages.create(**kwargs)
    with echo.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    for message in (plain, final):
        assert message.stop_reason == "max_tokens"
        assert message.content[0].type == "tool_use" and message.content[0].input == {"city": "Paris"}
        assert all(b.type == "tool_use" for b in message.content)  # no call markup as text
        assert all(b.input == {} for b in message.content[1:])  # the cut-off call, if it was opened


@pytest.mark.parametrize(
    ("model", "steps"),
    [
        (  # a parsed call (Hermes): the text is cut inside the arguments
            "echo-hermes",
            [
                {"text": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "cel'},
                {"text": 'sius"}}\n</tool_call>'},
            ],
        ),
        (  # a driver's call events whose fragments end mid-object
            "echo-tools",
            [{"tool_call": {"name": "get_weather", "arguments": ['{"city": "Paris", ', '"unit": "cel']}}],
        ),
    ],
)
def test_a_cut_forced_call_has_the_same_input_streamed_or_not(
    echo: anthropic.Anthropic, model: str, steps: list[dict[str, Any]]
) -> None:
    """A forced call cut by max_tokens: the non-streamed input is what the
    SDK's accumulator parses from the streamed fragments (partial JSON: the
    members written in full), not {} beside a streamed {"city": "Paris"}."""
    kwargs: dict[str, Any] = dict(
        model=model,
        max_tokens=1,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": script(*steps, stop_reason="max_tokens")}],
    )
    plain = echo.messages.create(**kwargs)
    with echo.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert plain.stop_reason == final.stop_reason == "max_tokens"
    cut = [("tool_use", "get_weather", {"city": "Paris"})]
    assert [(b.type, b.name, b.input) for b in plain.content] == cut
    assert [(b.type, b.name, b.input) for b in final.content] == cut


def test_a_repeated_call_ends_the_answer(echo: anthropic.Anthropic) -> None:
    """A model that writes the same call again (a small model forced to call
    a tool loops until max_tokens) ends its answer with tool_use before the
    repeat; different calls are all kept, streamed or not."""
    from missive_echo import script

    call = {"tool_call": {"name": "get_weather", "arguments": ['{"city": ', '"Paris"}']}}
    same_spaced = {"tool_call": {"name": "get_weather", "arguments": ['{ "city":"Paris" }']}}
    other = {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Rome"}']}}
    weather = [
        {
            "name": "get_weather",
            "description": "Weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    body = {"model": "echo-tools", "max_tokens": 100, "tools": weather, "tool_choice": {"type": "any"}}
    repeated = script(call, other, same_spaced, call, {"text": "never shown"}, stop_reason="max_tokens")
    for stream in (False, True):
        if stream:
            with echo.messages.stream(**body, messages=[{"role": "user", "content": repeated}]) as events:
                message = events.get_final_message()
        else:
            message = echo.messages.create(**body, messages=[{"role": "user", "content": repeated}])
        assert message.stop_reason == "tool_use"
        assert [(b.type, b.input) for b in message.content] == [
            ("tool_use", {"city": "Paris"}),
            ("tool_use", {"city": "Rome"}),
        ]
        assert message.usage.output_tokens >= 3


def test_a_remote_ref_in_a_schema_is_never_fetched(echo: anthropic.Anthropic) -> None:
    """A ``$ref`` to another document must not make the server request it
    (jsonschema's default resolver would, with urlopen in the event loop: an
    SSRF, and a frozen server when the URL is its own). The call is checked
    without it and answered at once; the listener sees no connection."""
    import socket
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/secret-internal"
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"$ref": url}}}}
    content = script(
        {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Rome"}']}}, stop_reason="end_turn"
    )
    try:
        started = time.monotonic()
        msg = echo.messages.create(
            model="echo-tools",
            max_tokens=50,
            tools=[tool],
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": content}],
            timeout=20,
        )
        assert msg.stop_reason == "tool_use" and msg.content[0].input == {"city": "Rome"}
        assert time.monotonic() - started < 10
        with pytest.raises(socket.timeout):
            listener.accept()  # nobody connected
    finally:
        listener.close()
