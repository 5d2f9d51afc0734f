"""The Ollama driver end to end: the official SDK → Missive → the fake Ollama server.

The fake records what Missive sent, so these tests check the request Ollama
receives (think, num_ctx, no stop, tools, history) as well as the answer the
client gets (blocks, usage, stop reasons, errors).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.config import ConfigError
from missive.testing import InProcessApp, closed_port, in_process_app, live_server
from missive_ollama.testing import FakeModel, FakeOllama, prompt_tokens

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    }
]


def _image(fmt: str, size: tuple[int, int] = (8, 8)) -> str:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, (0, 128, 255)).save(out, format=fmt)
    return base64.b64encode(out.getvalue()).decode()


PNG = _image("PNG")


def fake_script(*steps: dict[str, Any], **extra: Any) -> str:
    """A user message that makes the fake Ollama play ``steps``."""
    return "FAKE:" + json.dumps({"steps": list(steps), **extra})


def tool_call_chunk(name: str, arguments: dict[str, Any], index: int = 0) -> dict[str, Any]:
    """A tool call as Ollama streams it: whole, arguments as an object, its own id."""
    return {
        "tool_calls": [
            {"id": f"call_{index}abc123", "function": {"index": index, "name": name, "arguments": arguments}}
        ]
    }


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOllama]:
    models = {
        "qwen3:8b": FakeModel(capabilities=["completion", "tools", "thinking"], context_length=40960),
        "gemma3:4b": FakeModel(capabilities=["completion", "vision"], context_length=8192, arch="gemma3"),
        "qwen2.5vl:3b": FakeModel(
            capabilities=["completion", "vision", "tools"], context_length=8192, arch="qwen25vl"
        ),
        "llama3.2:latest": FakeModel(capabilities=["completion"], context_length=131072, arch="llama"),
        "ghost:1b": FakeModel(chat_missing=True),
        "gpt-oss:20b": FakeModel(capabilities=["completion", "tools", "thinking"], arch="gptoss"),
    }
    with FakeOllama(models) as server:
        yield server


def model(fake: FakeOllama, tag: str, context: int | None = 2048, **settings: Any) -> dict[str, Any]:
    """A model of the fake Ollama, with its ``tag``."""
    entry: dict[str, Any] = {
        "driver": "ollama",
        "settings": {"model": tag, "base_url": fake.url, **settings},
    }
    if context is not None:
        entry["context_window"] = context
    return entry


@pytest.fixture(scope="module")
def app(fake: FakeOllama) -> Iterator[InProcessApp]:
    config = {
        "models": {
            "qwen": model(fake, "qwen3:8b"),
            "vision": model(fake, "gemma3:4b"),
            "vision-tools": model(fake, "qwen2.5vl:3b"),
            "plain": model(fake, "llama3.2", context=None, sampling_defaults="model"),
            "ghost": model(fake, "ghost:1b"),
            "oss": model(fake, "gpt-oss:20b", think_level="effort"),
            # only for the near-the-limit test: its estimate ratio stays untrained
            "edge": model(fake, "qwen3:8b"),
        }
    }
    with in_process_app(config) as app:
        yield app


@pytest.fixture(scope="module")
def url(fake: FakeOllama) -> Iterator[str]:
    """A live server of the model ``qwen``, for the tests of a stream as it
    is written (the app in process hands a stream over once it has ended)."""
    with live_server({"models": {"qwen": model(fake, "qwen3:8b")}}) as base:
        yield base


@pytest.fixture
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk(api_key="test", timeout=60)


def last_chat(fake: FakeOllama) -> dict[str, Any]:
    return fake.chats[-1].body


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


# -- what Ollama receives -------------------------------------------------------


def test_request_sends_think_false_num_ctx_and_no_stop(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    msg = client.messages.create(
        model="qwen", max_tokens=50, system="Be brief.", stop_sequences=["zzz"], messages=user("hello there")
    )
    assert msg.content[0].text == "hello there"
    body = last_chat(fake)
    assert body["model"] == "qwen3:8b" and body["stream"] is True
    assert body["think"] is False  # a thinking model: absent would turn thinking on
    assert body["truncate"] is False and body["shift"] is False
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello there"},
    ]
    opts = body["options"]
    assert opts["num_ctx"] == 2048 and opts["num_predict"] == 50
    assert "stop" not in opts and "stop" not in body
    assert (opts["temperature"], opts["top_p"], opts["top_k"], opts["repeat_penalty"]) == (1.0, 1.0, 0, 1.0)
    assert "tools" not in body


def test_sampling_passed_and_model_defaults_left_alone(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    client.messages.create(
        model="qwen", max_tokens=5, messages=user("a b"), extra_body={"temperature": 0.2, "top_k": 7}
    )
    opts = last_chat(fake)["options"]
    assert opts["temperature"] == 0.2 and opts["top_k"] == 7 and opts["top_p"] == 1.0
    client.messages.create(model="plain", max_tokens=5, messages=user("a b"))
    body = last_chat(fake)
    assert body["model"] == "llama3.2:latest"
    assert set(body["options"]) == {"num_ctx", "num_predict"}  # sampling_defaults = "model"
    assert body["options"]["num_ctx"] == 131072  # no context_window configured: the model's own (/api/show)


def test_models_listing_reports_the_context_sent_as_num_ctx(client: anthropic.Anthropic) -> None:
    assert client.models.retrieve("qwen").max_input_tokens == 2048
    assert client.models.retrieve("plain").max_input_tokens == 131072


# -- thinking -------------------------------------------------------------------


def test_thinking_enabled_sends_think_true_and_streams_thinking(
    client: anthropic.Anthropic, fake: FakeOllama
) -> None:
    kwargs: dict[str, Any] = dict(
        model="qwen",
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=user("sky blue"),
    )
    plain = client.messages.create(**kwargs)
    assert last_chat(fake)["think"] is True
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    for msg in (plain, final):
        assert [b.type for b in msg.content] == ["thinking", "text"]
        assert msg.content[0].thinking == "Let me think." and msg.content[1].text == "sky blue"
        assert msg.usage.output_tokens == 5  # eval_count: thinking and text tokens

    # the signed block replayed reaches Ollama as the message's thinking; a changed one does not
    replay = [b.model_dump(exclude_none=True) for b in plain.content]
    for thinking, expected in ((replay[0], "Let me think."), ({**replay[0], "thinking": "Forged."}, None)):
        conversation = [
            *user("sky blue"),
            {"role": "assistant", "content": [thinking, replay[1]]},
            *user("again"),
        ]
        client.messages.create(model="qwen", max_tokens=20, messages=conversation)
        assistant = last_chat(fake)["messages"][1]
        assert assistant["content"] == "sky blue" and assistant.get("thinking") == expected


def test_adaptive_thinking_on_a_model_that_cannot_think_sends_false(
    client: anthropic.Anthropic, fake: FakeOllama
) -> None:
    msg = client.messages.create(
        model="plain", max_tokens=20, thinking={"type": "adaptive"}, messages=user("hi")
    )
    assert last_chat(fake)["think"] is False and [b.type for b in msg.content] == ["text"]


def test_enabled_thinking_refused_for_a_model_without_it(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="vision",
            max_tokens=2000,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=user("hi"),
        )
    assert (
        "thinking" in caught.value.body["error"]["message"]
        and "'vision'" in caught.value.body["error"]["message"]
    )


def test_reasoning_sent_although_not_asked_is_not_shown(
    client: anthropic.Anthropic, fake: FakeOllama
) -> None:
    # gpt-oss reasons even with think false; the client did not ask for thinking blocks.
    content = fake_script({"thinking": "musing"}, {"content": "Answer."})
    msg = client.messages.create(model="oss", max_tokens=20, messages=user(content))
    assert last_chat(fake)["think"] is False
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "Answer."
    assert msg.usage.output_tokens == 2


def test_effort_maps_to_think_level(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    client.messages.create(
        model="oss",
        max_tokens=20,
        thinking={"type": "adaptive"},
        messages=user("hi"),
        extra_body={"output_config": {"effort": "max"}},
    )
    assert last_chat(fake)["think"] == "high"


# -- tools ----------------------------------------------------------------------


def test_tool_loop(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    args = {"unit": "celsius", "city": "Paris"}  # key order must survive
    first = client.messages.create(
        model="qwen",
        max_tokens=100,
        tools=TOOLS,
        messages=user(fake_script({"content": "Let me check."}, tool_call_chunk("get_weather", args))),
    )
    sent = last_chat(fake)
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather in a city",
                "parameters": TOOLS[0]["input_schema"],
            },
        }
    ]
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    call = first.content[1]
    assert call.id.startswith("toolu_") and call.name == "get_weather" and call.input == args
    assert list(call.input) == ["unit", "city"]

    history = [
        *user("weather?"),
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "service down", "is_error": True},
                {"type": "text", "text": "try again"},
            ],
        },
    ]
    second = client.messages.create(model="qwen", max_tokens=100, tools=TOOLS, messages=history)
    assert second.stop_reason == "end_turn" and second.content[0].text == "try again"
    messages = last_chat(fake)["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [{"id": call.id, "function": {"index": 0, "name": "get_weather", "arguments": args}}],
    }
    assert list(messages[1]["tool_calls"][0]["function"]["arguments"]) == ["unit", "city"]
    assert messages[2] == {
        "role": "tool",
        "content": "Error: service down",
        "tool_call_id": call.id,
        "tool_name": "get_weather",
    }
    assert messages[3] == {"role": "user", "content": "try again"}


def test_streamed_tool_call_is_one_valid_json_object(client: anthropic.Anthropic) -> None:
    content = fake_script(
        tool_call_chunk("get_weather", {"city": "Oslo"}), tool_call_chunk("get_weather", {"city": "Rome"}, 1)
    )
    kwargs: dict[str, Any] = dict(model="qwen", max_tokens=100, tools=TOOLS, messages=user(content))
    plain = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        partials = [e.partial_json for e in stream if e.type == "input_json"]
        final = stream.get_final_message()
    assert [json.loads(p) for p in partials] == [{"city": "Oslo"}, {"city": "Rome"}]
    for msg in (plain, final):
        assert [(b.name, b.input) for b in msg.content] == [
            ("get_weather", {"city": "Oslo"}),
            ("get_weather", {"city": "Rome"}),
        ]
        assert msg.stop_reason == "tool_use"
    assert plain.content[0].id != final.content[0].id  # ids are Missive's, per answer


def test_disable_parallel_tool_use_keeps_one_call(client: anthropic.Anthropic) -> None:
    content = fake_script(
        tool_call_chunk("get_weather", {"city": "Oslo"}), tool_call_chunk("get_weather", {"city": "Rome"}, 1)
    )
    msg = client.messages.create(
        model="qwen",
        max_tokens=100,
        tools=TOOLS,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        messages=user(content),
    )
    assert [b.input for b in msg.content] == [{"city": "Oslo"}]


def test_tool_choice_none_sends_no_tools(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    msg = client.messages.create(
        model="qwen", max_tokens=20, tools=TOOLS, tool_choice={"type": "none"}, messages=user("hi you")
    )
    assert "tools" not in last_chat(fake) and msg.content[0].text == "hi you"


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_forced_tool_choice_refused(client: anthropic.Anthropic, choice: dict[str, Any]) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="qwen", max_tokens=20, tools=TOOLS, tool_choice=choice, messages=user("hi")
        )
    assert caught.value.body["error"]["message"].startswith(
        f'tools with tool_choice "{choice["type"]}" is not supported'
    )


def test_tools_refused_for_a_model_without_the_tools_capability(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="vision", max_tokens=20, tools=TOOLS, messages=user("hi"))
    assert "supported: no tool use" in caught.value.body["error"]["message"]


def test_malformed_tool_arguments_are_a_502(client: anthropic.Anthropic) -> None:
    bad = {"tool_calls": [{"function": {"name": "get_weather", "arguments": "{not json"}}]}
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="qwen", max_tokens=20, tools=TOOLS, messages=user(fake_script(bad)))
    assert caught.value.status_code == 502


# -- images -----------------------------------------------------------------------


def test_images_go_to_message_images(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    client.messages.create(
        model="vision",
        max_tokens=20,
        messages=[{"role": "user", "content": [image, {"type": "text", "text": "what is it"}]}],
    )
    assert last_chat(fake)["messages"] == [{"role": "user", "content": "what is it", "images": [PNG]}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="qwen", max_tokens=20, messages=[{"role": "user", "content": [image]}])
    assert "input media type image/png" in caught.value.body["error"]["message"]


def test_webp_converted_to_png_for_ollama(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    """Ollama's vision models decode PNG and JPEG; the core converts a WebP
    (inside a tool result, as Claude Code's Read tool sends screenshots)."""
    webp = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/webp", "data": _image("WEBP", (30, 20))},
    }
    messages = [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [webp]}]},
    ]
    tools = [{"name": "Read", "input_schema": {"type": "object", "properties": {}}}]
    client.messages.create(model="vision-tools", max_tokens=20, messages=messages, tools=tools)
    sent = last_chat(fake)["messages"][-1]
    assert sent["role"] == "tool" and len(sent["images"]) == 1
    assert base64.b64decode(sent["images"][0]).startswith(b"\x89PNG\r\n\x1a\n")


# -- usage and stop reasons -----------------------------------------------------


def test_usage_starts_with_the_estimate_and_ends_exact(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    messages = user("one two three four five six seven eight")
    estimate = client.messages.count_tokens(model="qwen", messages=messages).input_tokens
    with client.messages.stream(model="qwen", max_tokens=50, messages=messages) as stream:
        events = list(stream)
        final = stream.get_final_message()
    exact = prompt_tokens(last_chat(fake))
    assert estimate != exact  # the fake's tokenizer is not the estimate's
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens == estimate
    usage = final.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == exact
    assert usage.output_tokens == 8


def test_cached_prefix_reported_as_cache_read(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    history = [
        *user("first question here"),
        {"role": "assistant", "content": "first answer"},
        *user("second one"),
    ]
    client.messages.create(model="vision", max_tokens=20, messages=history)
    again = client.messages.create(
        model="vision", max_tokens=20, messages=history[:2] + user("another question")
    )
    body = last_chat(fake)
    shared = prompt_tokens(body, body["messages"][:2])
    assert again.usage.cache_read_input_tokens == shared
    assert again.usage.input_tokens == prompt_tokens(body) - shared


def test_max_tokens_and_context_exhaustion(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    msg = client.messages.create(model="qwen", max_tokens=2, messages=user("a b c d"))
    assert (msg.stop_reason, msg.content[0].text, msg.usage.output_tokens) == ("max_tokens", "a b", 2)
    # Ollama (shift: false) stops with "length" when the context fills before num_predict.
    content = fake_script({"content": "x"}, final={"done_reason": "length"})
    msg = client.messages.create(model="qwen", max_tokens=50, messages=user(content))
    assert msg.stop_reason == "model_context_window_exceeded"


def test_max_tokens_zero_warms_the_cache_silently(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    msg = client.messages.create(model="qwen", max_tokens=0, messages=user("warm me up"))
    assert msg.content == [] and msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 0
    assert last_chat(fake)["options"]["num_predict"] == 1  # 0 would mean "no limit" to Ollama
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == prompt_tokens(last_chat(fake))


def test_prefill_is_a_final_assistant_message(client: anthropic.Anthropic, fake: FakeOllama) -> None:
    client.messages.create(
        model="qwen", max_tokens=20, messages=[*user("go"), {"role": "assistant", "content": "Sure:"}]
    )
    assert last_chat(fake)["messages"][-1] == {"role": "assistant", "content": "Sure:"}


# -- errors -----------------------------------------------------------------------


def test_prompt_over_the_context_refused_before_sending(
    client: anthropic.Anthropic, fake: FakeOllama
) -> None:
    sent = len(fake.chats)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="qwen", max_tokens=20, messages=user("word " * 4000))
    assert caught.value.body["error"]["message"].endswith("tokens > 2047 maximum")
    assert len(fake.chats) == sent


def test_prompt_near_the_limit_refused_by_ollama_is_a_400(
    client: anthropic.Anthropic, fake: FakeOllama
) -> None:
    # 6600 characters: 1886 estimated tokens (3.5 characters each), above 0.9 × 2048 and
    # below 2048, so Missive sends it and waits for Ollama's verdict before starting the
    # message; the fake counts 3304 tokens > num_ctx and refuses (truncate: false).
    text = "a " * 3300
    for stream in (False, True):
        with pytest.raises(anthropic.BadRequestError) as caught:
            if stream:
                with client.messages.stream(model="edge", max_tokens=20, messages=user(text)) as s:
                    s.get_final_message()
            else:
                client.messages.create(model="edge", max_tokens=20, messages=user(text))
        message = caught.value.body["error"]["message"]
        assert message.startswith("prompt is too long: ") and message.endswith(" > 2047 maximum"), message
        assert fake.chats[-1].status == 400 and fake.chats[-1].body["truncate"] is False


def test_model_missing_in_ollama_is_a_502_naming_the_tag(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="ghost", max_tokens=20, messages=user("hi"))
    assert caught.value.status_code == 502
    message = caught.value.body["error"]["message"]
    assert "has no model 'ghost:1b'" in message and "ollama pull ghost:1b" in message


def test_ollama_http_error_before_the_stream_is_a_502(client: anthropic.Anthropic) -> None:
    content = fake_script({"status": 500, "error": "llama runner process has terminated: signal: killed"})
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="qwen", max_tokens=20, messages=user(content))
    assert (
        caught.value.status_code == 502
        and "llama runner process has terminated" in caught.value.body["error"]["message"]
    )


def test_ollama_busy_is_a_529_with_retry_after(client: anthropic.Anthropic) -> None:
    content = fake_script(
        {"status": 503, "error": "server busy, please try again.  maximum pending requests exceeded"}
    )
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="qwen", max_tokens=20, messages=user(content))
    assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "5"


@pytest.mark.parametrize(
    "steps, wording",
    [
        ([{"content": "partial"}, {"raw": "{not json"}], "malformed stream line"),
        (
            [{"content": "partial"}, {"error_line": "an error was encountered while running the model"}],
            "an error was encountered",
        ),
        ([{"content": "partial"}, {"no_done": True}], "without its final (done) line"),
        ([{"content": "partial"}, {"close": True}], "Ollama at"),
    ],
)
def test_broken_streams(client: anthropic.Anthropic, steps: list[dict[str, Any]], wording: str) -> None:
    content = fake_script(*steps)
    with pytest.raises(anthropic.APIStatusError) as caught:  # non-streaming: still an HTTP error
        client.messages.create(model="qwen", max_tokens=20, messages=user(content))
    assert caught.value.status_code == 502 and wording in caught.value.body["error"]["message"]
    with pytest.raises(anthropic.APIStatusError) as caught_stream:  # streaming: an SSE error event
        with client.messages.stream(model="qwen", max_tokens=20, messages=user(content)) as stream:
            for _ in stream:
                pass
    assert wording in str(caught_stream.value)


def test_done_reason_load_without_an_answer_is_a_502(client: anthropic.Anthropic) -> None:
    content = fake_script(final={"done_reason": "load"})
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="qwen", max_tokens=20, messages=user(content))
    assert caught.value.status_code == 502 and "done_reason 'load'" in caught.value.body["error"]["message"]


def test_unreachable_ollama_is_a_529_with_retry_after() -> None:
    with closed_port() as down:
        config = {
            "models": {
                "q": {
                    "driver": "ollama",
                    "settings": {
                        "model": "qwen3:8b",
                        "base_url": down.url,
                        "retry_after": 7,
                    },
                }
            }
        }
        with in_process_app(config) as app:  # start-up goes on: Ollama may come up later
            client = app.sdk()
            for call in (
                lambda: client.messages.create(model="q", max_tokens=5, messages=user("hi")),
                lambda: client.messages.count_tokens(model="q", messages=user("hi")),
            ):
                with pytest.raises(anthropic.APIStatusError) as caught:
                    call()
                assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "7"
                message = caught.value.body["error"]["message"]
                assert "unavailable" in message and "ConnectError" in message and "127.0.0.1" in message


def test_unknown_tag_fails_start_up(fake: FakeOllama) -> None:
    config = {"models": {"q": {"driver": "ollama", "settings": {"model": "nope:7b", "base_url": fake.url}}}}
    with pytest.raises(ConfigError) as caught:
        with in_process_app(config, timeout=30):
            pass
    assert "has no model 'nope:7b'" in str(caught.value) and "ollama pull nope:7b" in str(caught.value)


def test_preload_at_start(fake: FakeOllama) -> None:
    before = len(fake.chats)
    config = {
        "models": {
            "q": {
                "driver": "ollama",
                "settings": {"model": "qwen3:8b", "base_url": fake.url, "preload": True},
            }
        }
    }
    with in_process_app(config):
        loads = [c for c in fake.chats[before:] if c.body["messages"] == []]
        assert len(loads) == 1 and loads[0].body["think"] is False


# -- streaming behaviour ------------------------------------------------------------


def test_message_start_is_sent_before_ollama_answers(url: str, fake: FakeOllama) -> None:
    # The fake sends nothing (not even headers) until the test opens the gate, so a
    # driver that waited for Ollama before starting the message would time out here.
    gate = fake.gate("prefill")
    body = {
        "model": "qwen",
        "max_tokens": 20,
        "stream": True,
        "messages": user(fake_script({"wait": "prefill"}, {"content": "done"})),
    }
    with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=20) as resp:
        lines = resp.iter_lines()
        first = next(line for line in lines if line.startswith("event: "))
        assert first == "event: message_start" and not gate.is_set()
        gate.set()
        rest = [line[7:] for line in lines if line.startswith("event: ")]
    assert rest[-1] == "message_stop" and "content_block_delta" in rest


@pytest.mark.parametrize("where", ["prefill", "answer"])
def test_disconnect_closes_the_upstream_request(url: str, fake: FakeOllama, where: str) -> None:
    steps = (
        [{"sleep": 30}, {"content": "late"}]
        if where == "prefill"
        else [{"content": "first"}, {"sleep": 30}, {"content": "never"}]
    )
    body = {"model": "qwen", "max_tokens": 20, "stream": True, "messages": user(fake_script(*steps))}
    seen = len(fake.chats)
    with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=20) as resp:
        wanted = "message_start" if where == "prefill" else "text_delta"
        next(line for line in resp.iter_lines() if wanted in line)
    polled = threading.Event()
    for _ in range(100):  # the fake notices the closed connection while it sleeps
        if len(fake.chats) > seen and fake.chats[seen].disconnected:
            break
        polled.wait(0.1)
    record = fake.chats[seen]
    assert record.disconnected and not record.finished


def test_matched_stop_sequence_closes_the_upstream_request(
    client: anthropic.Anthropic, fake: FakeOllama
) -> None:
    # The core closes the driver (no cancellation) when a stop sequence matches:
    # the driver itself must close the HTTP request so Ollama stops generating.
    content = fake_script({"content": "alpha"}, {"content": " STOP"}, {"sleep": 30}, {"content": " never"})
    seen = len(fake.chats)
    msg = client.messages.create(model="qwen", max_tokens=20, stop_sequences=["STOP"], messages=user(content))
    assert msg.stop_reason == "stop_sequence" and msg.content[0].text == "alpha "
    polled = threading.Event()
    for _ in range(100):
        if fake.chats[seen].disconnected:
            break
        polled.wait(0.1)
    assert fake.chats[seen].disconnected and not fake.chats[seen].finished


def test_server_tool_history_and_definitions_converted() -> None:
    """web_search blocks sent back in an assistant turn reach Ollama as a
    call and a tool message naming the tool, with the error."""
    from missive.testing import generation_request
    from missive_ollama.convert import chat_messages, chat_tools

    call = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_fetch",
        "input": {"url": "https://a.org"},
    }
    result = {
        "type": "web_fetch_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": {"type": "web_fetch_tool_result_error", "error_code": "unavailable"},
    }
    request = generation_request(
        [{"role": "user", "content": "read a.org"}, {"role": "assistant", "content": [call, result]}],
        tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}],
    )
    assert chat_messages(request.conversation) == [
        {"role": "user", "content": "read a.org"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "srvtoolu_1",
                    "function": {"index": 0, "name": "web_fetch", "arguments": {"url": "https://a.org"}},
                }
            ],
        },
        {
            "role": "tool",
            "content": "Error: the web_fetch tool returned an error: unavailable",
            "tool_call_id": "srvtoolu_1",
            "tool_name": "web_fetch",
        },
    ]
    assert chat_tools(request)[0]["function"]["parameters"]["required"] == ["url"]
