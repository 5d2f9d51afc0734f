"""The vllm driver through the official SDK, against a fake vLLM server that
reproduces vLLM's wire format (missive_openai.testing.FakeChatServer)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import DriverContract, InProcessApp, closed_port, in_process_app, live_server
from missive_openai.testing import FakeChatServer, render_tokens

MAX_MODEL_LEN = 2048


def _png() -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (8, 8), (255, 0, 0)).save(out, format="PNG")
    return out.getvalue()


def _pdf() -> bytes:
    """A one-page PDF written by hand (the text is Helvetica, so pypdf extracts it)."""
    text = b"BT /F1 12 Tf 72 720 Td (Missive PDF page) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(text) + text + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


PNG_B64 = __import__("base64").b64encode(_png()).decode()
PDF = _pdf()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChatServer]:
    with FakeChatServer(max_model_len=MAX_MODEL_LEN, prompt_tokens_details=True) as server:
        yield server


def _vllm(fake: FakeChatServer) -> dict[str, Any]:
    """The model ``vllm``: the fake, with thinking."""
    return {"driver": "vllm", "settings": {"base_url": fake.url, "model": "fake-model", "thinking": True}}


@pytest.fixture(scope="module")
def app(fake: FakeChatServer) -> Iterator[InProcessApp]:
    with closed_port() as down:
        dead = down.url
        base = {"driver": "vllm"}
        config: dict[str, Any] = {
            "server": {"ping_interval": 0.2},
            "models": {
                "vllm": _vllm(fake),
                "vllm-vision": {
                    **base,
                    "settings": {"base_url": fake.url + "/v1", "model": "fake-model", "vision": True},
                },
                "vllm-down": {
                    **base,
                    "context_window": 4096,
                    "settings": {"base_url": dead, "model": "fake-model"},
                },
                "vllm-replicas": {**base, "settings": {"base_urls": [dead, fake.url], "model": "fake-model"}},
            },
        }
        with in_process_app(config) as app:
            yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk(api_key="test", timeout=60)


def script(*steps: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"script": list(steps), **extra})


TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
]


def test_text_stream_equals_non_stream_and_upstream_body(
    client: anthropic.Anthropic, fake: FakeChatServer
) -> None:
    kwargs: dict[str, Any] = dict(
        model="vllm",
        max_tokens=50,
        stop_sequences=["zzz"],
        messages=[{"role": "user", "content": "red orange yellow"}],
        extra_body={"temperature": 0.0, "top_k": 5},
    )
    plain = client.messages.create(**kwargs)
    sent = fake.requests[-1]
    with client.messages.stream(**kwargs) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert plain.content[0].text == text == final.content[0].text == "red orange yellow"
    assert plain.stop_reason == final.stop_reason == "end_turn"
    assert plain.usage.output_tokens == final.usage.output_tokens == 4  # three words + EOS, as vLLM counts
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["temperature"] == 0.0 and sent["top_k"] == 5 and sent["max_tokens"] == 50
    assert "stop" not in sent  # the core matches stop sequences itself
    # thinking absent: switched off (Qwen3/GLM read enable_thinking, DeepSeek-V3.1 thinking)
    assert sent["chat_template_kwargs"] == {
        "enable_thinking": False,
        "thinking": False,
        "thinking_budget": 0,
        "preserve_thinking": True,
        "clear_thinking": False,
    }
    assert sent["reasoning_effort"] == "low"  # gpt-oss cannot switch reasoning off
    assert sent["messages"] == [{"role": "user", "content": "red orange yellow"}]


def test_count_tokens_is_tokenize_count_and_usage(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    messages = [{"role": "user", "content": "one two three four"}]
    counted = client.messages.count_tokens(model="vllm", messages=messages, tools=TOOLS, system="be brief")
    tokenize = fake.tokenize_requests[-1]
    assert (
        tokenize["tools"][0]["function"]["name"] == "get_weather"
        and tokenize["add_generation_prompt"] is True
    )
    assert tokenize["messages"][0] == {"role": "system", "content": "be brief"}
    assert counted.input_tokens == len(render_tokens(tokenize))
    usage = client.messages.create(
        model="vllm", max_tokens=20, messages=messages, tools=TOOLS, system="be brief"
    ).usage
    assert usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens


def test_cached_tokens_reported_as_cache_read(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    long_text = " ".join(f"word{i}" for i in range(100))
    messages = [{"role": "user", "content": long_text}]
    client.messages.create(model="vllm", max_tokens=1, messages=messages)
    with client.messages.stream(model="vllm", max_tokens=1, messages=messages) as stream:
        start_usage = None
        for event in stream:
            if event.type == "message_start":
                start_usage = event.message.usage
        final = stream.get_final_message()
    total = len(
        render_tokens(
            {
                "messages": [{"role": "user", "content": long_text}],
                "chat_template_kwargs": {
                    "enable_thinking": False,
                    "thinking": False,
                    "thinking_budget": 0,
                    "preserve_thinking": True,
                    "clear_thinking": False,
                },
            }
        )
    )
    assert (
        start_usage is not None and start_usage.input_tokens == total
    )  # the /tokenize count, before the split
    # vLLM reports whole cached blocks of 16, at least one token recomputed.
    assert final.usage.cache_read_input_tokens == ((total - 1) // 16) * 16 > 0
    assert final.usage.input_tokens == total - final.usage.cache_read_input_tokens


def test_tool_calls_stream_and_non_stream_accumulate_the_same_input(
    client: anthropic.Anthropic, fake: FakeChatServer
) -> None:
    content = script(
        {"content": "Let me check."},
        {"tool_call": {"name": "get_weather", "arguments": ['{"city', '": "Par', 'is"}']}},
        {"tool_call": {"name": "get_time", "arguments": []}},
        finish_reason="stop",  # as vLLM's named tool choice reports it: tool_use all the same
    )
    kwargs: dict[str, Any] = dict(
        model="vllm", max_tokens=100, tools=TOOLS, messages=[{"role": "user", "content": content}]
    )
    plain = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    for message in (plain, final):
        assert [b.type for b in message.content] == ["text", "tool_use", "tool_use"]
        assert message.content[1].name == "get_weather" and message.content[1].input == {"city": "Paris"}
        assert message.content[2].name == "get_time" and message.content[2].input == {}
        assert message.content[1].id.startswith("chatcmpl-tool-")
        assert message.stop_reason == "tool_use"
    assert fake.requests[-1]["tool_choice"] == "auto"


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        (
            {"type": "tool", "name": "get_time"},
            {"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
        ),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "any", "disable_parallel_tool_use": True},
            {"tool_choice": "required", "parallel_tool_calls": False},
        ),
    ],
)
def test_tool_choice_modes_sent_upstream(
    client: anthropic.Anthropic, fake: FakeChatServer, choice: dict[str, Any], sent: dict[str, Any]
) -> None:
    message = client.messages.create(
        model="vllm",
        max_tokens=30,
        tools=TOOLS,
        tool_choice=choice,
        messages=[{"role": "user", "content": "hello there"}],
    )
    body = fake.requests[-1]
    assert {k: body.get(k) for k in sent} == sent
    if "parallel_tool_calls" not in sent:
        assert "parallel_tool_calls" not in body
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": TOOLS[0]["input_schema"],
        },
    }
    if choice["type"] in ("any", "tool"):  # the fake forces a call, as vLLM's guided decoding
        assert message.stop_reason == "tool_use"
        assert message.content[-1].name == choice.get("name", "get_weather")
    else:
        assert message.content[0].text == "hello there"


def test_tool_history_converted(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    client.messages.create(
        model="vllm",
        max_tokens=10,
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "weather in Paris and the time?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "clock unavailable"}],
                    },
                    {"type": "text", "text": "thanks"},
                ],
            },
        ],
    )
    assert fake.requests[-1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "toolu_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: clock unavailable"},
        {"role": "user", "content": "thanks"},
    ]


def test_anthropic_defined_and_server_tools(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    """Client tools and server tools get their synthesized schemas. A forced
    web_search call is answered "unavailable" by Missive; the backend is then
    asked again, in "auto", with the call and the error in the history."""
    before = len(fake.requests)
    message = client.messages.create(
        model="vllm",
        max_tokens=20,
        messages=[{"role": "user", "content": "tide times"}],
        tools=[
            {"type": "bash_20250124", "name": "bash"},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        tool_choice={"type": "tool", "name": "web_search"},
    )
    first, second = fake.requests[before:]
    assert [t["function"]["name"] for t in first["tools"]] == ["bash", "web_search"]
    assert "command" in first["tools"][0]["function"]["parameters"]["properties"]
    assert first["tools"][1]["function"]["parameters"]["required"] == ["query"]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "web_search"}}
    assert [b.type for b in message.content] == ["server_tool_use", "web_search_tool_result", "text"]
    call_id = message.content[0].id
    assert call_id.startswith("srvtoolu_") and message.content[1].content.error_code == "unavailable"
    assert message.content[2].text == "tide times" and message.stop_reason == "end_turn"
    assert second["tool_choice"] == "auto"
    assert second["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "web_search", "arguments": "{}"}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": "Error: the web_search tool returned an error: unavailable",
        },
    ]
    prompts = [len(render_tokens(body)) for body in (first, second)]
    total = message.usage.input_tokens + message.usage.cache_read_input_tokens
    assert total == sum(prompts)  # usage is cumulative over both generations


def test_server_tool_loop_pauses_the_turn(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    """A backend that calls web_search again and again: each call answered,
    then pause_turn; the history sent back renders every call and error."""
    from missive.tools.server import MAX_SERVER_CALLS

    search = script({"tool_call": {"name": "web_search", "arguments": ['{"query": "q"}']}})
    tools = [{"type": "web_search_20250305", "name": "web_search"}]
    before = len(fake.requests)
    message = client.messages.create(
        model="vllm", max_tokens=50, tools=tools, messages=[{"role": "user", "content": search}]
    )
    assert message.stop_reason == "pause_turn"
    assert [b.type for b in message.content] == [
        "server_tool_use",
        "web_search_tool_result",
    ] * MAX_SERVER_CALLS
    assert len(fake.requests) - before == MAX_SERVER_CALLS
    client.messages.create(
        model="vllm",
        max_tokens=1,
        tools=tools,
        tool_choice={"type": "none"},
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
        ],
    )
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user"] + ["assistant", "tool"] * MAX_SERVER_CALLS
    assert all(m["content"].startswith("Error: the web_search tool returned an error") for m in sent[2::2])


def test_reasoning_becomes_thinking_block(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    content = script(
        {"reasoning": "Let me"}, {"reasoning": " think.", "field": "reasoning"}, {"content": "Four."}
    )
    kwargs: dict[str, Any] = dict(
        model="vllm",
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": content}],
    )
    plain = client.messages.create(**kwargs)
    assert fake.requests[-1]["chat_template_kwargs"] == {
        "enable_thinking": True,
        "thinking": True,
        "thinking_budget": 1024,
        "preserve_thinking": True,
        "clear_thinking": False,
    }
    assert fake.requests[-1]["reasoning_effort"] == "low"  # budget 1024: gpt-oss "low"
    with client.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    for message in (plain, final):
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[0].thinking == "Let me think." and message.content[1].text == "Four."

    # the signed block replayed reaches vLLM as reasoning_content; a changed one does not
    replay = [b.model_dump(exclude_none=True) for b in plain.content]
    for thinking, expected in ((replay[0], "Let me think."), ({**replay[0], "thinking": "Forged."}, None)):
        client.messages.create(
            model="vllm",
            max_tokens=20,
            thinking={"type": "adaptive"},
            messages=[
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": [thinking, replay[1]]},
                {"role": "user", "content": "Sure?"},
            ],
        )
        assistant = fake.requests[-1]["messages"][1]
        assert assistant["content"] == "Four." and assistant.get("reasoning_content") == expected


def test_prefill_continues_final_message(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    message = client.messages.create(
        model="vllm",
        max_tokens=10,
        messages=[{"role": "user", "content": "alpha beta"}, {"role": "assistant", "content": "The answer:"}],
    )
    body = fake.requests[-1]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["messages"][-1] == {"role": "assistant", "content": "The answer:"}
    assert fake.tokenize_requests[-1]["continue_final_message"] is True
    assert message.content[0].text == "alpha beta"


def test_structured_output_and_images(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    client.messages.create(
        model="vllm",
        max_tokens=10,
        messages=[{"role": "user", "content": "x"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    assert fake.requests[-1]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": schema},
    }
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="vllm", max_tokens=10, messages=[{"role": "user", "content": [image]}])
    assert "input media type image/png" in caught.value.body["error"]["message"]
    client.messages.create(
        model="vllm-vision",
        max_tokens=10,
        messages=[{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}],
    )
    assert fake.requests[-1]["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "text", "text": "what?"},
    ]


def test_images_and_documents_in_tool_results(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    """Claude Code's Read tool: a screenshot (WebP here, made smaller) and a
    PDF inside tool results. The image reaches vLLM as a data URI after the
    tool message; the PDF as text; /tokenize sees the same parts, so the
    count is exact (the fake counts 16 tokens an image)."""
    import base64
    import io

    from PIL import Image

    big = io.BytesIO()
    Image.new("RGB", (3200, 1600), (0, 90, 200)).save(big, format="WEBP")
    screenshot = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/webp",
            "data": base64.b64encode(big.getvalue()).decode(),
        },
    }
    pdf = {
        "type": "document",
        "title": "spec.pdf",
        "source": {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(PDF).decode()},
    }
    messages = [
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"p": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {"p": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [screenshot]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [pdf]},
                {"type": "text", "text": "what do they say?"},
            ],
        },
    ]
    tools = [{"name": "Read", "input_schema": {"type": "object", "properties": {"p": {"type": "string"}}}}]
    count = client.messages.count_tokens(model="vllm-vision", messages=messages, tools=tools).input_tokens
    message = client.messages.create(model="vllm-vision", max_tokens=10, messages=messages, tools=tools)
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool", "user"]
    assert sent[2]["content"] == ""
    assert sent[3]["content"].startswith(
        "<document>\n<title>spec.pdf</title>\n<page number=\"1\">\nMissive PDF page"
    )
    parts = sent[4]["content"]
    assert parts[0]["type"] == "image_url" and parts[1] == {"type": "text", "text": "what do they say?"}
    uri = parts[0]["image_url"]["url"]
    assert uri.startswith("data:image/webp;base64,")
    with Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))) as img:
        assert img.size == (1568, 784)  # fitted to media.image_max_edge
    assert (
        count
        == len(render_tokens(fake.requests[-1]))
        == message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    )
    assert "<|image|>" in render_tokens(fake.requests[-1])


def test_prompt_too_long_before_generation(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    sent = len(fake.requests)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="vllm", max_tokens=10, messages=[{"role": "user", "content": "hello " * MAX_MODEL_LEN}]
        )
    count = len(render_tokens(fake.tokenize_requests[-1]))
    assert (
        caught.value.body["error"]["message"]
        == f"prompt is too long: {count} tokens > {MAX_MODEL_LEN - 1} maximum"
    )
    assert len(fake.requests) == sent  # refused from the /tokenize count, nothing generated
    # max_tokens is clamped to what the context leaves (vLLM would refuse it with a 400).
    message = client.messages.create(
        model="vllm", max_tokens=100_000, messages=[{"role": "user", "content": "fits"}]
    )
    assert message.content[0].text == "fits"
    assert fake.requests[-1]["max_tokens"] == MAX_MODEL_LEN - len(render_tokens(fake.tokenize_requests[-1]))


def test_models_listing_reports_max_model_len(client: anthropic.Anthropic) -> None:
    assert client.models.retrieve("vllm").max_input_tokens == MAX_MODEL_LEN


def test_backend_down_is_529_with_retry_after(app: InProcessApp) -> None:
    with app.http_client() as http:
        response = http.post(
            "/v1/messages",
            json={"model": "vllm-down", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"
    assert int(response.headers["retry-after"]) >= 1


def test_replica_failover_before_first_byte(client: anthropic.Anthropic, fake: FakeChatServer) -> None:
    for _ in range(3):
        message = client.messages.create(
            model="vllm-replicas", max_tokens=10, messages=[{"role": "user", "content": "still here"}]
        )
        assert message.content[0].text == "still here"


def test_malformed_chunk_is_an_error_event(app: InProcessApp) -> None:
    content = script({"content": "Hi"}, {"raw": "data: {not json"})
    with (
        app.http_client() as http,
        http.stream(
            "POST",
            "/v1/messages",
            timeout=30,
            json={
                "model": "vllm",
                "max_tokens": 20,
                "stream": True,
                "messages": [{"role": "user", "content": content}],
            },
        ) as r,
    ):
        body = r.read().decode()
    assert r.status_code == 200
    assert "event: error" in body and "malformed chunk from the backend" in body
    assert "message_stop" not in body


def test_malformed_tool_arguments_are_502(client: anthropic.Anthropic) -> None:
    content = script({"tool_call": {"name": "get_time", "arguments": ['{"a": ', "oops"]}})
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model="vllm", max_tokens=20, tools=TOOLS, messages=[{"role": "user", "content": content}]
        )
    assert caught.value.status_code == 502
    assert "malformed JSON arguments for tool 'get_time'" in caught.value.body["error"]["message"]


def test_backend_error_chunk_mid_stream(client: anthropic.Anthropic) -> None:
    content = script({"content": "partial"}, {"error": "engine died"})
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(model="vllm", max_tokens=20, messages=[{"role": "user", "content": content}])
    assert caught.value.status_code == 502 and "engine died" in caught.value.body["error"]["message"]


def test_client_disconnect_closes_upstream(fake: FakeChatServer) -> None:
    """On a live server: the app in process hands a stream over only once it
    has ended, so a client cannot leave it midway there."""
    steps = [{"content": "tick"}] + [{"sleep": 0.05}, {"content": " tick"}] * 200
    config = {"server": {"ping_interval": 0.2}, "models": {"vllm": _vllm(fake)}}
    with live_server(config) as url:  # the server stays up: only the client leaves
        before = len(fake.disconnects)
        client = anthropic.Anthropic(base_url=url, api_key="test", max_retries=0, timeout=60)
        with client.messages.stream(
            model="vllm", max_tokens=1000, messages=[{"role": "user", "content": script(*steps)}]
        ) as stream:
            for text in stream.text_stream:
                if text:
                    break
        assert fake.wait_for(lambda: len(fake.disconnects) > before), "the fake never saw the disconnect"


@pytest.fixture(scope="module")
def contract_url(app: InProcessApp) -> str:
    return app.url


@pytest.mark.api  # the contract runs on the app in process, not on a live server
class TestVLLMContract(DriverContract):
    model = "vllm"
    prompt = "red orange yellow green blue"

    @pytest.fixture(autouse=True)
    def _in_process(self, app: InProcessApp) -> None:
        self.app = app


def test_startup_probe_names_a_server_without_auto_tool_choice(tmp_path: Any) -> None:
    """A vLLM started without --enable-auto-tool-choice is named in the
    start-up log, and ``auto`` leaves the model's effective capabilities: a
    request relying on it gets the core's 400 naming the capability (not a
    weakened answer), while forced choices still reach vLLM."""
    with FakeChatServer(auto_tools=False) as bare, FakeChatServer() as full:
        config = {
            "models": {
                "bare": {"driver": "vllm", "settings": {"base_url": bare.url, "model": "fake-model"}},
                "full": {"driver": "vllm", "settings": {"base_url": full.url, "model": "fake-model"}},
                "unprobed": {
                    "driver": "vllm",
                    "settings": {"base_url": bare.url, "model": "fake-model", "startup_probe": False},
                },
            }
        }
        with in_process_app(config) as app:
            log = app.log()
            client = app.sdk(api_key="test", timeout=60)
            with pytest.raises(anthropic.BadRequestError) as refused:
                client.messages.create(
                    model="bare", max_tokens=20, tools=TOOLS, messages=[{"role": "user", "content": "hello"}]
                )
            sent_to_bare = len(bare.requests)
            forced = client.messages.create(
                model="bare",
                max_tokens=20,
                tools=TOOLS,
                tool_choice={"type": "tool", "name": "get_time"},
                messages=[{"role": "user", "content": "hello"}],
            )
            auto = client.messages.create(
                model="full", max_tokens=20, tools=TOOLS, messages=[{"role": "user", "content": "hello"}]
            )
            with pytest.raises(anthropic.BadRequestError) as passed_on:
                client.messages.create(
                    model="unprobed",
                    max_tokens=20,
                    tools=TOOLS,
                    messages=[{"role": "user", "content": "hello"}],
                )
    assert "model bare: the vLLM server refuses tool_choice \"auto\"" in log
    assert "--enable-auto-tool-choice --tool-call-parser" in log
    assert "model full: the vLLM server accepts tool_choice \"auto\"" in log
    assert "model unprobed: the vLLM server" not in log
    message = refused.value.body["error"]["message"]
    assert "auto" in message and "bare" in message, message
    assert sent_to_bare == 1  # only the probe: the refused request never reached vLLM
    probe = bare.requests[0]
    assert probe["tool_choice"] == "auto" and probe["max_tokens"] == 1 and probe["stream"] is True
    assert forced.stop_reason == "tool_use" and forced.content[-1].name == "get_time"
    assert auto.stop_reason in ("end_turn", "tool_use")
    assert "enable-auto-tool-choice" in passed_on.value.body["error"]["message"]  # vLLM's own 400, unprobed


def test_each_key_s_cache_scope_is_sent_as_cache_salt(
    fake: FakeChatServer, client: anthropic.Anthropic
) -> None:
    """vLLM's ``cache_salt`` (0.9+; vLLM docs, "Automatic Prefix Caching":
    blocks are shared only between requests of the same salt) carries the
    key's cache scope: a digest per scope, the same for keys of one
    ``cache_scope``, never the key's name; none on a server without keys."""
    import hashlib

    keys = {
        name: {"key_sha256": hashlib.sha256(f"sk-{name}".encode()).hexdigest(), **extra}
        for name, extra in (("alice", {}), ("bob", {}), ("carol", {"cache_scope": "team"}))
    }
    keys["dave"] = {"key_sha256": hashlib.sha256(b"sk-dave").hexdigest(), "cache_scope": "team"}
    salts = {}
    with in_process_app({"keys": keys, "models": {"vllm": _vllm(fake)}}) as keyed:
        for name in keys:
            keyed.sdk(api_key=f"sk-{name}").messages.create(
                model="vllm", max_tokens=5, messages=[{"role": "user", "content": "same words"}]
            )
            salts[name] = fake.requests[-1].get("cache_salt")
    assert all(isinstance(s, str) and len(s) == 32 for s in salts.values()), salts
    assert len({salts["alice"], salts["bob"], salts["carol"]}) == 3 and salts["carol"] == salts["dave"]
    assert not any(name in salt for name, salt in salts.items())
    client.messages.create(model="vllm", max_tokens=5, messages=[{"role": "user", "content": "same words"}])
    assert "cache_salt" not in fake.requests[-1]  # an open server: one scope, no salt
