"""The generic openai driver through the official SDK, against a generic
OpenAI-compatible fake (FakeChatServer with vllm=False: no /tokenize, no
max_model_len), plus unit tests of the error and chunk translation."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.driver.events import Finished, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
from missive.protocol.errors import BadGatewayError, InvalidRequestError, OverloadedError, PromptTooLongError
from missive.testing import DriverContract, InProcessApp, in_process_app
from missive_openai.chunks import ChunkTranslator
from missive_openai.testing import FakeChatServer, render_tokens
from missive_openai.upstream_errors import context_overflow, parse_error_body, translate

CONTEXT = 1024


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChatServer]:
    with FakeChatServer(
        vllm=False, max_model_len=CONTEXT, api_key="sk-upstream", error_shape="object"
    ) as server:
        yield server


@pytest.fixture(scope="module")
def app(fake: FakeChatServer) -> Iterator[InProcessApp]:
    settings = {"base_url": fake.url, "model": "fake-model", "api_key": "sk-upstream"}
    config: dict[str, Any] = {
        "models": {
            "gen": {"driver": "openai", "context_window": CONTEXT, "settings": settings},
            "gen-noctx": {
                "driver": "openai",
                "settings": {
                    **settings,
                    "prefill": "trailing_message",
                    "capabilities": {
                        "tool_choice": ["auto", "any", "tool", "none"],
                        "sampling": ["temperature"],
                    },
                },
            },
            "gen-badkey": {"driver": "openai", "settings": {**settings, "api_key": "wrong"}},
            "gen-5xx": {"driver": "openai", "settings": settings},  # its own replica pool
            "gen-vision": {
                "driver": "openai",
                "context_window": CONTEXT,
                "settings": {
                    **settings,
                    "capabilities": {"input_media": ["image/png"], "image_max_edge": 100},
                },
            },
        },
    }
    with in_process_app(config) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk(api_key="test", timeout=60)


def test_estimate_at_start_exact_usage_at_the_end(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    messages = [{"role": "user", "content": "alpha beta gamma delta"}]
    estimate = client.messages.count_tokens(model="gen", messages=messages).input_tokens
    with client.messages.stream(model="gen", max_tokens=20, messages=messages) as stream:
        started = None
        for event in stream:
            if event.type == "message_start":
                started = event.message.usage.input_tokens
        final = stream.get_final_message()
    exact = len(render_tokens(fake.requests[-1]))
    assert started == estimate  # message_start carries the estimate, before any token
    assert final.usage.input_tokens == exact != estimate  # message_delta carries the server's count
    assert fake.headers[-1]["authorization"] == "Bearer sk-upstream"
    assert final.content[0].text == "alpha beta gamma delta"


def test_images_sent_as_data_uris_and_estimated_from_pixels(
    client: anthropic.Anthropic, fake: FakeChatServer
) -> None:
    """A JPEG for a server declared PNG-only, fitted to its 100-pixel edge:
    the server gets a PNG data URI; the estimate counts the image by its
    pixels (ceil(100 x 50 / 750) = 7), not by the length of its base64."""
    import base64
    import io
    import math

    from PIL import Image

    from missive_openai.driver import estimate_tokens

    out = io.BytesIO()
    Image.new("RGB", (400, 200), (9, 99, 199)).save(out, format="JPEG")
    image = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/jpeg",
            "data": base64.b64encode(out.getvalue()).decode(),
        },
    }
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "what colour"}]}]
    estimate = client.messages.count_tokens(model="gen-vision", messages=messages).input_tokens
    client.messages.create(model="gen-vision", max_tokens=5, messages=messages)
    part = fake.requests[-1]["messages"][0]["content"][0]
    assert part["image_url"]["url"].startswith("data:image/png;base64,")
    with Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))) as img:
        assert img.size == (100, 50)
    assert estimate == estimate_tokens(fake.requests[-1]) + math.ceil(100 * 50 / 750)
    assert estimate < 40


def test_upstream_credentials_refused_is_502(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="gen-badkey", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502
    assert "refused Missive's credentials" in caught.value.body["error"]["message"]


def test_context_overflow_from_the_server_wording(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="gen", max_tokens=5, messages=[{"role": "user", "content": "hi " * CONTEXT}]
        )
    prompt = len(render_tokens(fake.requests[-1]))
    assert (
        caught.value.body["error"]["message"]
        == f"prompt is too long: {prompt} tokens > {CONTEXT - 1} maximum"
    )


def test_output_budget_too_large_is_retried_clamped(
    client: anthropic.Anthropic, fake: FakeChatServer
) -> None:
    before = len(fake.requests)
    message = client.messages.create(
        model="gen-noctx", max_tokens=100_000, messages=[{"role": "user", "content": "short prompt"}]
    )
    assert message.content[0].text == "short prompt"
    first, second = fake.requests[before:]
    assert first["max_tokens"] == 100_000
    assert second["max_tokens"] == CONTEXT - len(render_tokens(second))


def test_prefill_refused_unless_declared(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    messages = [{"role": "user", "content": "one two"}, {"role": "assistant", "content": "Sure:"}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="gen", max_tokens=5, messages=messages)
    assert caught.value.body["error"]["message"].startswith(
        "assistant prefill (a final assistant message) is not supported by model 'gen' (driver 'openai')"
    )
    client.messages.create(model="gen-noctx", max_tokens=5, messages=messages)
    assert fake.requests[-1]["messages"][-1] == {"role": "assistant", "content": "Sure:"}
    assert "continue_final_message" not in fake.requests[-1]


def test_declared_capabilities_are_enforced(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="gen",
            max_tokens=5,
            tools=tools,
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "x"}],
        )
    assert 'tool_choice "any" is not supported' in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="gen", max_tokens=5, messages=[{"role": "user", "content": "x"}], extra_body={"top_k": 3}
        )
    message = client.messages.create(
        model="gen-noctx",
        max_tokens=5,
        tools=tools,
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": "x"}],
    )
    assert fake.requests[-1]["tool_choice"] == "required"
    assert message.stop_reason == "tool_use" and message.content[0].input == {}


def test_backend_5xx_is_529(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    fake.fail_status = 503
    try:
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(model="gen-5xx", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    finally:
        fake.fail_status = None
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert "engine unavailable" in caught.value.body["error"]["message"]


# -- unit tests of the translation ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "prompt", "context", "output_only"),
    [
        (
            {
                "error": {
                    "message": "This model's maximum context length is 4096 tokens. However, your request "
                    "has 5000 input tokens. Please reduce the length of the input messages.",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
            5000,
            4096,
            False,
        ),
        (
            {
                "object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 4196 tokens (4000 in the messages, 196 in the completion). "
                "Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            4000,
            4096,
            True,
        ),
        (
            {
                "error": {
                    "code": 400,
                    "message": "request (9000 tokens) exceeds the available context size "
                    "(8192 tokens), try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 9000,
                    "n_ctx": 8192,
                }
            },
            9000,
            8192,
            False,
        ),
        (
            {"detail": "The decoder prompt (length 3000) is longer than the maximum model length of 2048."},
            3000,
            2048,
            False,
        ),
        (
            {
                "error": {
                    "message": "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's "
                    "maximum context length is 4096 tokens and your request has 100 input tokens "
                    "(5000 > 4096 - 100).",
                    "code": 400,
                }
            },
            100,
            4096,
            True,
        ),
    ],
)
def test_context_wordings(body: dict[str, Any], prompt: int, context: int, output_only: bool) -> None:
    error = parse_error_body(400, json.dumps(body).encode())
    overflow = context_overflow(error)
    assert overflow is not None
    assert (overflow.prompt_tokens, overflow.context, overflow.output_only) == (prompt, context, output_only)
    translated = translate(error, model="m")
    assert isinstance(translated, PromptTooLongError)
    assert translated.message == f"prompt is too long: {prompt} tokens > {context - 1} maximum"


def test_other_errors_translated() -> None:
    assert isinstance(
        translate(parse_error_body(400, b'{"error": {"message": "bad image"}}'), model="m"),
        InvalidRequestError,
    )
    down = translate(parse_error_body(500, b"Internal Server Error"), model="m")
    assert isinstance(down, OverloadedError) and down.retry_after and "Internal Server Error" in down.message
    assert isinstance(
        translate(parse_error_body(403, b'{"error": "Unauthorized"}'), model="m"), BadGatewayError
    )


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_incomplete_arguments_are_rejected_not_repaired() -> None:
    translator = ChunkTranslator()
    translator.feed(
        _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "a", "arguments": '{"x"'}}]})
    )
    # Call 1 is complete but waits for call 0, which never completes.
    assert (
        translator.feed(_chunk({"tool_calls": [{"index": 1, "function": {"name": "b", "arguments": "{}"}}]}))
        == []
    )
    translator.feed(_chunk({}, "tool_calls"))
    with pytest.raises(BadGatewayError, match="malformed JSON arguments for tool 'a'"):
        translator.finish(ended_cleanly=True)


def _run(chunks: list[dict[str, Any]]) -> list[Any]:
    translator = ChunkTranslator()
    events: list[Any] = []
    for chunk in chunks:
        events += translator.feed(chunk)
    return events + translator.finish(ended_cleanly=True)


def _calls(events: list[Any]) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(name, id, input) of each call, checking the blocks are sequential."""
    calls: list[tuple[str, str | None, dict[str, Any]]] = []
    open_call: list[Any] | None = None
    for event in events:
        if isinstance(event, ToolCallStart):
            assert open_call is None, "a call started inside another"
            open_call = [event, ""]
        elif isinstance(event, ToolCallDelta):
            assert open_call is not None
            open_call[1] += event.partial_json
        elif isinstance(event, ToolCallEnd):
            assert open_call is not None
            start, raw = open_call
            calls.append((start.name, start.id, json.loads(raw or "{}")))
            open_call = None
    assert open_call is None
    return calls


PARIS_ROME = [
    ("get_weather", "call_a", {"location": "Paris"}),
    ("get_weather", "call_b", {"location": "Rome"}),
]


def test_two_calls_opened_in_one_chunk_then_interleaved() -> None:
    """Issue 15 item 1: index 0 and 1 opened together, fragments 0, 1, 0, 1."""
    opened = [
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {
            "index": 1,
            "id": "call_b",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
    ]
    events = _run(
        [
            _chunk({"role": "assistant", "content": None, "tool_calls": opened}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"location": '}}]}),
            _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"location": '}}]}),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '"Rome"}'}}]}),
            _chunk({}, "tool_calls"),
        ]
    )
    assert _calls(events) == PARIS_ROME
    assert isinstance(events[-1], Finished) and events[-1].stop_reason == "tool_use"


@pytest.mark.parametrize(
    "shape", ["name-late", "one-chunk", "empty-lists", "reused-index", "reversed", "surrogates"]
)
def test_openai_tool_call_stream_shapes(shape: str) -> None:
    """Shapes backends are known to send give the same calls."""
    if shape == "name-late":  # id and name only in a later fragment
        chunks = [
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"location": "Paris"}'}}]}),
            _chunk({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "get_weather"}}]}),
            _chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"location": "Rome"}'}}]}),
            _chunk({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "get_weather"}}]}),
        ]
    elif shape == "one-chunk":  # both whole calls in one chunk, with the finish
        chunks = [
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                        },
                        {
                            "index": 1,
                            "id": "call_b",
                            "function": {"name": "get_weather", "arguments": {"location": "Rome"}},
                        },
                    ]
                }
            )
        ]
    elif shape == "empty-lists":  # tool_calls: [] on content chunks
        chunks = [
            _chunk({"content": "", "tool_calls": []}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                        }
                    ]
                }
            ),
            _chunk({"content": None, "tool_calls": []}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                        }
                    ]
                }
            ),
        ]
    elif shape == "reused-index":  # every call numbered 0, told apart by id
        chunks = [
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "function": {"name": "get_weather", "arguments": '{"location": '},
                        }
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_b",
                            "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                        }
                    ]
                }
            ),
        ]
    elif shape == "reversed":  # index 1 complete before index 0 starts
        chunks = [
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                        }
                    ]
                }
            ),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'},
                        }
                    ]
                }
            ),
        ]
    else:  # an emoji's UTF-16 escape split between two fragments
        chunks = [
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a",
                            "function": {"name": "get_weather", "arguments": '{"location": "Paris\ud83d'},
                        }
                    ]
                }
            ),
            _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '\ude00"}'}}]}),
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_b",
                            "function": {"name": "get_weather", "arguments": '{"location": "Rome"}'},
                        }
                    ]
                }
            ),
        ]
    events = _run([*chunks, _chunk({}, "tool_calls")])
    expected = PARIS_ROME
    if shape == "surrogates":
        expected = [("get_weather", "call_a", {"location": "Paris\U0001f600"}), PARIS_ROME[1]]
        for event in events:
            if isinstance(event, ToolCallDelta):
                event.partial_json.encode("utf-8")  # encodable for the client
    assert _calls(events) == expected


def test_arguments_after_a_complete_call_are_a_502() -> None:
    translator = ChunkTranslator()
    translator.feed(
        _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "a", "arguments": "{}"}}]})
    )
    with pytest.raises(BadGatewayError, match="after its JSON object was complete"):
        translator.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"more": 1}'}}]}))


def test_sequential_calls_and_usage_split() -> None:
    translator = ChunkTranslator()
    events = []
    for chunk in (
        _chunk({"content": "ok"}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "a", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": '}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        _chunk(
            {"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "b", "arguments": {"y": 2}}}]}
        ),
        _chunk({}, "tool_calls"),
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        },
    ):
        events += translator.feed(chunk)
    events += translator.finish(ended_cleanly=True)
    assert events == [
        TextDelta("ok"),
        ToolCallStart(name="a", id="call_1"),
        ToolCallDelta('{"x": 1}', tokens=3),
        ToolCallEnd(),
        ToolCallStart(name="b", id="call_2"),
        ToolCallDelta('{"y": 2}', tokens=1),
        ToolCallEnd(),
        Finished("tool_use", output_tokens=7, input_tokens=6, cache_read_input_tokens=4),
    ]


@pytest.mark.parametrize(
    ("reason", "stop"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        ("tool_calls", "end_turn"),
    ],
)
def test_finish_reasons(reason: str, stop: str) -> None:
    translator = ChunkTranslator()
    translator.feed(_chunk({"content": "x"}, reason))
    assert translator.finish(ended_cleanly=True)[-1] == Finished(stop)


def test_stream_cut_before_finish_and_forbidden_calls() -> None:
    translator = ChunkTranslator()
    translator.feed(_chunk({"content": "x"}))
    with pytest.raises(BadGatewayError, match="closed the stream"):
        translator.finish(ended_cleanly=False)
    # A complete call is checked as soon as it is complete (here: in its chunk).
    none = ChunkTranslator(tool_choice="none")
    with pytest.raises(BadGatewayError, match="although tool_choice was none"):
        none.feed(
            _chunk(
                {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "a", "arguments": "{}"}}]},
                "stop",
            )
        )
    named = ChunkTranslator(tool_choice="tool", forced_name="b")
    named.feed(
        _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "a", "arguments": ""}}]}, "stop")
    )
    with pytest.raises(BadGatewayError, match="named 'b'"):  # a call without arguments: checked at the end
        named.finish(ended_cleanly=True)


@pytest.fixture(scope="module")
def contract_url(app: InProcessApp) -> str:
    return app.url


@pytest.mark.api  # the contract runs on the app in process, not on a live server
class TestOpenAIContract(DriverContract):
    model = "gen"
    exact_count_tokens = False
    prompt = "red orange yellow green blue"

    @pytest.fixture(autouse=True)
    def _in_process(self, app: InProcessApp) -> None:
        self.app = app


def test_server_tool_history_and_definitions_converted() -> None:
    """web_search blocks sent back in an assistant turn reach the backend as
    a call and a tool message with the error; the tool with its schema."""
    from missive.testing import generation_request
    from missive_openai.convert import chat_messages, chat_tools

    call = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "tides"}}
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"},
    }
    request = generation_request(
        [
            {"role": "user", "content": "tides?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Searching."},
                    call,
                    result,
                    {"type": "text", "text": "Search is down."},
                ],
            },
            {"role": "user", "content": "ok"},
        ],
        tools=[{"type": "web_search_20250305", "name": "web_search"}],
    )
    assert chat_messages(request.conversation) == [
        {"role": "user", "content": "tides?"},
        {
            "role": "assistant",
            "content": "Searching.",
            "tool_calls": [
                {
                    "id": "srvtoolu_1",
                    "type": "function",
                    "function": {"name": "web_search", "arguments": '{"query": "tides"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "srvtoolu_1",
            "content": "Error: the web_search tool returned an error: unavailable",
        },
        {"role": "assistant", "content": "Search is down."},
        {"role": "user", "content": "ok"},
    ]
    assert chat_tools(request)[0]["function"]["parameters"]["required"] == ["query"]


WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather in a place",
    "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
}


def _interleaved_script() -> str:
    """The backend opens two calls in one chunk, then interleaves their
    argument fragments; the second call's id is Kimi-K2 style."""

    def raw(delta: dict[str, Any]) -> dict[str, str]:
        return {
            "raw": "data: "
            + json.dumps(
                {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                }
            )
        }

    opened = [
        {
            "index": 0,
            "id": "call_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
        {
            "index": 1,
            "id": "functions.get_weather:1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": ""},
        },
    ]
    fragments = [(0, '{"location": '), (1, '{"location": '), (0, '"Paris"}'), (1, '"Rome"}')]
    script = [
        raw({"tool_calls": opened}),
        *(raw({"tool_calls": [{"index": i, "function": {"arguments": a}}]}) for i, a in fragments),
    ]
    return json.dumps({"script": script, "finish_reason": "tool_calls"})


@pytest.mark.parametrize("stream", [False, True])
def test_interleaved_calls_and_foreign_ids_through_the_sdk(
    client: anthropic.Anthropic, fake: FakeChatServer, stream: bool
) -> None:
    """Issue 15 items 1 and 2: two tool_use blocks in index order, strictly
    sequential in the stream; every id matches the API's pattern, and the
    backend gets its own ids back in the history."""
    body: dict[str, Any] = {
        "model": "gen",
        "max_tokens": 50,
        "tools": [WEATHER_TOOL],
        "messages": [{"role": "user", "content": _interleaved_script()}],
    }
    if stream:
        with client.messages.stream(**body) as events:
            kinds = [
                (e.type, getattr(e, "index", None)) for e in events if e.type.startswith("content_block")
            ]
            message = events.get_final_message()
        starts = [i for kind, i in kinds if kind == "content_block_start"]
        stops = [i for kind, i in kinds if kind == "content_block_stop"]
        assert starts == stops == [0, 1]
        assert kinds.index(("content_block_stop", 0)) < kinds.index(("content_block_start", 1))
    else:
        message = client.messages.create(**body)
    assert message.stop_reason == "tool_use"
    calls = [b for b in message.content if b.type == "tool_use"]
    assert [(c.name, c.input) for c in calls] == [
        ("get_weather", {"location": "Paris"}),
        ("get_weather", {"location": "Rome"}),
    ]
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]+", c.id) for c in calls), [c.id for c in calls]
    assert calls[0].id == "call_a"
    history = [
        *body["messages"],
        {"role": "assistant", "content": [c.model_dump() for c in calls]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": c.id, "content": "sunny"} for c in calls],
        },
    ]
    client.messages.create(**{**body, "messages": history})
    sent = fake.requests[-1]["messages"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_a", "functions.get_weather:1"]
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ["call_a", "functions.get_weather:1"]
