"""Tool use on the embedded default model (SmolLM2-135M via llama.cpp), for real.

SmolLM2's chat template has no tool support: Missive renders the tools with
the Hermes convention and, for ``tool_choice`` ``any``/``tool``, constrains
sampling with a grammar, so even this 135M model returns schema-valid calls.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import pytest

from missive.testing import in_process_app

MODEL = "smollm2-135m"
GREEDY = {"temperature": 0.0}
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
}
ADD = {
    "name": "add",
    "description": "Add two integers.",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def valid_weather(args: dict) -> bool:
    return isinstance(args.get("city"), str) and args.get("unit") in ("celsius", "fahrenheit")


def test_forced_tool_loop(smol: anthropic.Anthropic) -> None:
    first = smol.messages.create(
        model=MODEL,
        max_tokens=120,
        tools=[WEATHER, ADD],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        messages=ASK,
        extra_body=GREEDY,
    )
    assert first.stop_reason == "tool_use"
    calls = [b for b in first.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and valid_weather(calls[0].input)
    assert calls[0].id.startswith("toolu_")
    second = smol.messages.create(
        model=MODEL,
        max_tokens=40,
        tools=[WEATHER, ADD],
        messages=[
            *ASK,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": calls[0].id, "content": "Sunny, 21 degrees."}
                ],
            },
        ],
        tool_choice={"type": "none"},
        extra_body=GREEDY,
    )
    assert second.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in second.content] == ["text"] and second.content[0].text.strip()


def test_stream_accumulates_the_same_input(smol: anthropic.Anthropic) -> None:
    kwargs = dict(
        model=MODEL,
        max_tokens=120,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        messages=ASK,
        extra_body=GREEDY,
    )
    plain = smol.messages.create(**kwargs)
    fragments = []
    with smol.messages.stream(**kwargs) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                fragments.append(event.delta.partial_json)
        final = stream.get_final_message()
    assert len(fragments) > 1  # arguments arrive as fragments, not whole
    plain_calls = [b.input for b in plain.content if b.type == "tool_use"]
    assert plain_calls and plain_calls == [b.input for b in final.content if b.type == "tool_use"]
    assert all(valid_weather(args) for args in plain_calls)


def test_named_tool_is_called(smol: anthropic.Anthropic) -> None:
    msg = smol.messages.create(
        model=MODEL,
        max_tokens=80,
        tools=[WEATHER, ADD],
        tool_choice={"type": "tool", "name": "add"},
        messages=ASK,  # the question is about weather; the forced tool is add
        extra_body=GREEDY,
    )
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert calls and all(c.name == "add" for c in calls)
    assert all(isinstance(c.input["a"], int) and isinstance(c.input["b"], int) for c in calls)


def test_tool_choice_none_yields_no_tool_use(smol: anthropic.Anthropic) -> None:
    msg = smol.messages.create(
        model=MODEL,
        max_tokens=30,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=ASK,
        extra_body=GREEDY,
    )
    assert all(b.type == "text" for b in msg.content) and msg.stop_reason != "tool_use"


def test_64_tool_catalog(smol: anthropic.Anthropic) -> None:
    tools = [
        {
            "name": f"tool_{i:02d}",
            "description": f"Tool number {i}.",
            "input_schema": {
                "type": "object",
                "properties": {"value": {"type": "integer"}},
                "required": ["value"],
            },
        }
        for i in range(64)
    ]
    kwargs = dict(model=MODEL, tools=tools, messages=[{"role": "user", "content": "Use a tool."}])
    counted = smol.messages.count_tokens(**kwargs).input_tokens
    msg = smol.messages.create(
        max_tokens=60,
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        extra_body=GREEDY,
        **kwargs,
    )
    calls = [b for b in msg.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name in {t["name"] for t in tools}
    assert isinstance(calls[0].input["value"], int)
    assert counted == msg.usage.input_tokens + msg.usage.cache_read_input_tokens


def test_structured_output(smol: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    msg = smol.messages.create(
        model=MODEL,
        max_tokens=60,
        messages=[{"role": "user", "content": "Invent a person."}],
        extra_body={**GREEDY, "output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    data = json.loads(msg.content[0].text)
    assert set(data) == {"name", "age"} and isinstance(data["age"], int)


def test_strict_tool_in_auto_mode_is_refused(smol: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        smol.messages.create(model=MODEL, max_tokens=10, tools=[{**WEATHER, "strict": True}], messages=ASK)
    message = info.value.body["error"]["message"]
    assert 'strict tools with tool_choice "auto"' in message and '"any", "tool"' in message


WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def test_forced_web_search_is_answered_unavailable(smol: anthropic.Anthropic) -> None:
    """tool_choice forces the server tool: the grammar makes SmolLM2 write a
    schema-valid call, Missive answers it with the API's ``unavailable``
    error, and the model goes on after the result in the same message."""
    kwargs = dict(
        model=MODEL,
        max_tokens=80,
        tools=[WEATHER, WEB_SEARCH],
        tool_choice={"type": "tool", "name": "web_search"},
        messages=[{"role": "user", "content": "What is the latest news about the Mars rover?"}],
        extra_body=GREEDY,
    )
    plain = smol.messages.create(**kwargs)
    with smol.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    for message in (plain, final):
        call, result = message.content[:2]
        assert (
            call.type == "server_tool_use" and call.name == "web_search" and call.id.startswith("srvtoolu_")
        )
        assert isinstance(call.input["query"], str) and call.input["query"]
        assert result.type == "web_search_tool_result" and result.tool_use_id == call.id
        assert (
            result.content.type == "web_search_tool_result_error"
            and result.content.error_code == "unavailable"
        )
        assert message.stop_reason in ("end_turn", "max_tokens", "pause_turn")
        assert message.usage.server_tool_use.web_search_requests == 0
    assert [b.type for b in final.content] == [b.type for b in plain.content]
    assert final.content[0].input == plain.content[0].input
    history = [
        *kwargs["messages"],
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in plain.content]},
        {"role": "user", "content": "Then answer from memory, briefly."},
    ]
    again = dict(model=MODEL, tools=[WEATHER, WEB_SEARCH], tool_choice={"type": "none"}, messages=history)
    counted = smol.messages.count_tokens(**again).input_tokens
    after = smol.messages.create(max_tokens=20, extra_body=GREEDY, **again)
    assert [b.type for b in after.content] == ["text"] and after.content[0].text.strip()
    assert counted == after.usage.input_tokens + after.usage.cache_read_input_tokens


HARD_SCHEMAS = [
    {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": "[A-Z][a-z]+"}},
        "required": ["name"],
    },
    {"type": "object", "properties": {"a": True, "b": {"not": {"type": "null"}}}},
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "tags": {
                "type": "object",
                "propertyNames": {"pattern": "^[a-z]+$"},
                "additionalProperties": {"type": "string"},
            },
        },
        "required": ["when"],
    },
    {
        "type": "object",
        "$ref": "#/$defs/Args",
        "$defs": {
            "Args": {
                "type": "object",
                "properties": {"x": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]}},
            },
            "B": {"type": "string"},
        },
    },
]


def test_strict_schema_a_grammar_cannot_enforce_is_a_400(smol: anthropic.Anthropic) -> None:
    """strict: true promises schema-exact arguments: what llama.cpp's grammar
    cannot enforce (an unanchored pattern) is refused, naming the problem."""
    schema = HARD_SCHEMAS[0]
    with pytest.raises(anthropic.BadRequestError) as caught:
        smol.messages.create(
            model=MODEL,
            max_tokens=20,
            tools=[{"name": "f", "input_schema": schema, "strict": True}],
            tool_choice={"type": "any"},
            messages=ASK,
        )
    assert (
        "strict tool's input_schema cannot be enforced by a llama.cpp grammar"
        in caught.value.body["error"]["message"]
    )


BOUNDED = {
    "type": "object",
    "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 10}},
    "required": ["x"],
}


def test_strict_tool_with_a_bound_the_grammar_ignores_is_a_400(smol: anthropic.Anthropic) -> None:
    """llama.cpp's converter accepts maximum without enforcing it (SmolLM2
    answered {"x": 500} with a 200): strict promises schema-exact arguments,
    so it is refused, naming the keyword."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        smol.messages.create(
            model=MODEL,
            max_tokens=20,
            tools=[{"name": "f", "input_schema": BOUNDED, "strict": True}],
            tool_choice={"type": "any"},
            messages=ASK,
        )
    message = caught.value.body["error"]["message"]
    assert "strict tool's input_schema cannot be enforced by a llama.cpp grammar" in message
    assert "tool 'f' #/properties/x/minimum, tool 'f' #/properties/x/maximum" in message


def test_non_strict_tool_with_a_bound_is_answered(smol: anthropic.Anthropic) -> None:
    reply = smol.messages.create(
        model=MODEL,
        max_tokens=30,
        tools=[{"name": "f", "input_schema": BOUNDED}],
        tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        messages=ASK,
        extra_body=GREEDY,
    )
    calls = [b for b in reply.content if b.type == "tool_use"]
    assert [c.name for c in calls] == ["f"]
    if reply.stop_reason == "tool_use":
        assert isinstance(calls[0].input["x"], int)


@pytest.mark.parametrize("schema", HARD_SCHEMAS)
def test_non_strict_schema_is_enforced_as_far_as_it_can_be(smol: anthropic.Anthropic, schema: dict) -> None:
    """Issue 15 item 4: the API accepts any JSON Schema for a tool without
    strict: true; the call is forced, its input a JSON object, and the
    enforceable part holds (required keys, types)."""
    reply = smol.messages.create(
        model=MODEL,
        max_tokens=100,
        tools=[{"name": "f", "input_schema": schema}],
        tool_choice={"type": "any"},
        messages=ASK,
        extra_body=GREEDY,
    )
    # The 135M model may write inside a string until max_tokens: the call is
    # then open and cut (input: the members written in full), as the API does; it is still the call.
    assert reply.stop_reason in ("tool_use", "max_tokens")
    calls = [b for b in reply.content if b.type == "tool_use"]  # parallel calls are allowed: one or more
    assert calls and all(c.name == "f" and isinstance(c.input, dict) for c in calls)
    complete = calls if reply.stop_reason == "tool_use" else calls[:-1]
    for call in complete:
        for key in schema.get("required", []):
            assert isinstance(call.input[key], str)


def test_structured_output_with_an_unanchored_pattern_is_answered(smol: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "[0-9]+"}},
        "required": ["code"],
        "additionalProperties": False,
    }
    raw = smol.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=40,
        messages=ASK,
        extra_body=GREEDY,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    reply = raw.parse()
    assert reply.stop_reason in ("end_turn", "max_tokens")
    if reply.stop_reason == "end_turn":
        assert set(json.loads(reply.content[0].text)) == {"code"}
    # The grammar cannot hold an unanchored pattern: the client is told, as for any ignored part.
    assert raw.headers["missive-ignored"] == (
        "output_config.format #/properties/code/pattern (not enforced by the llama.cpp grammar)"
    )


#: A schema llama.cpp's grammar enforces only in part: bounds, an unanchored
#: pattern and a $ref to another document are left out (missive_llamacpp.enforced).
LOOSE = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 1},
        "s": {"type": "string", "pattern": "[0-9]+"},
        "r": {"$ref": "https://example.com/r.json"},
    },
    "required": ["n"],
}
LOOSE_PARTS = [
    "#/properties/n/minimum (not enforced by the llama.cpp grammar)",
    "#/properties/s/pattern (not enforced by the llama.cpp grammar)",
    "#/properties/r/$ref (not enforced by the llama.cpp grammar)",
]


def test_unenforced_structured_output_parts_are_reported_and_refused_in_strict_mode() -> None:
    """What the grammar leaves out of ``output_config.format`` (or the older
    ``output_format``) is in ``missive-ignored``; strict mode refuses it
    with a 400, before any generation, as any ignored part; a schema the
    grammar holds whole is neither."""
    body = {"model": MODEL, "max_tokens": 1, "messages": ASK}
    with in_process_app() as app:
        http = app.http_client(httpx)
        fmt = {"type": "json_schema", "schema": LOOSE}
        resp = http.post("/v1/messages", json={**body, "output_config": {"format": fmt}})
        assert resp.status_code == 200
        assert resp.headers["missive-ignored"] == ", ".join(f"output_config.format {p}" for p in LOOSE_PARTS)
        resp = http.post("/v1/messages", json={**body, "output_format": fmt})
        assert resp.headers["missive-ignored"] == ", ".join(f"output_format {p}" for p in LOOSE_PARTS)
    with in_process_app({"server": {"strict": True}}) as app:
        http = app.http_client(httpx)
        resp = http.post("/v1/messages", json={**body, "output_config": {"format": fmt}})
        assert resp.status_code == 400
        assert resp.json()["error"]["message"] == "strict mode: this server does not support: " + ", ".join(
            f"output_config.format {p}" for p in LOOSE_PARTS
        )
        exact = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        resp = http.post(
            "/v1/messages",
            json={**body, "output_config": {"format": {"type": "json_schema", "schema": exact}}},
        )
        assert resp.status_code == 200 and "missive-ignored" not in resp.headers


def test_forced_call_is_not_repeated_until_max_tokens(smol: anthropic.Anthropic) -> None:
    """SmolLM2 forced to call a tool (parallel calls allowed) writes the same
    call again and again; the answer ends with tool_use after the first,
    not with max_tokens after several copies (found by a newcomer)."""
    tools = [
        {
            "name": "get_weather",
            "description": "Get the weather in a city",
            "input_schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    reply = smol.messages.create(
        model=MODEL,
        max_tokens=60,
        tools=tools,
        extra_body=GREEDY,
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "weather Paris"}],
    )
    calls = [(b.name, json.dumps(b.input, sort_keys=True)) for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use", (reply.stop_reason, calls)
    assert calls and len(calls) == len(set(calls))


def test_schemas_that_crashed_llama_cpp_are_answered(smol: anthropic.Anthropic) -> None:
    """Each of these once killed the server (SIGSEGV): ``maxLength: 3000``
    (nested groups past llama.cpp's parser stack), ``minLength: 2001`` (a
    grammar llama.cpp refused, then a NULL sampler), a constant with a quote
    (an escape the port got wrong). Now: answered, the count above
    llama.cpp's limit reported as not enforced; a strict tool with one is a
    400 naming it (missive_llamacpp.grammar_size, grammar_check)."""
    schema = {
        "type": "object",
        "properties": {
            "tag": {"const": 'say "hi"'},
            "name": {"type": "string", "minLength": 1, "maxLength": 2000},
            "long": {"type": "string", "minLength": 2001},
        },
        "required": ["tag"],
        "additionalProperties": False,
    }
    for _ in range(2):  # the server is still there for the second
        raw = smol.messages.with_raw_response.create(
            model=MODEL,
            max_tokens=40,
            messages=[{"role": "user", "content": "Invent a name."}],
            extra_body={**GREEDY, "output_config": {"format": {"type": "json_schema", "schema": schema}}},
        )
        reply = raw.parse()
        assert raw.headers["missive-ignored"] == (
            "output_config.format #/properties/long/minLength (not enforced by the llama.cpp grammar)"
        )
        if reply.stop_reason == "end_turn":
            assert json.loads(reply.content[0].text)["tag"] == 'say "hi"'
    huge = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2001}}, "required": ["s"]}
    with pytest.raises(anthropic.BadRequestError) as caught:
        smol.messages.create(
            model=MODEL,
            max_tokens=12,
            tools=[{"name": "f", "input_schema": huge, "strict": True}],
            tool_choice={"type": "any"},
            messages=ASK,
        )
    assert "tool 'f' #/properties/s/minLength" in caught.value.body["error"]["message"]


def test_a_grammar_nested_too_deep_is_a_400_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's last guard: whatever produced it, a grammar nested deeper
    than llama.cpp's parser takes is refused before it reaches llama.cpp
    (here a pattern let through by disabling the pattern check)."""
    from missive_llamacpp import grammar

    monkeypatch.setattr(grammar, "_pattern_ok", lambda pattern: True)
    deep = "^" + "(" * 300 + "a" + ")" * 300 + "$"
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": deep}}, "required": ["s"]}
    body = {"model": MODEL, "max_tokens": 4, "messages": ASK}
    with in_process_app() as app:
        http = app.http_client(httpx)
        fmt = {"type": "json_schema", "schema": schema}
        resp = http.post("/v1/messages", json={**body, "output_config": {"format": fmt}})
        assert resp.status_code == 400, resp.text
        assert "nested 300 groups deep" in resp.json()["error"]["message"]
        assert http.post("/v1/messages", json=body).status_code == 200
