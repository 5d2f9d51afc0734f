"""The llamaserver driver through the official SDK against FakeLlamaServer:
the paths a real llama-server cannot be made to take (malformed output, error
chunks, a replica still loading, ik_llama.cpp's shapes, reasoning), and the
request bodies Missive sends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import closed_port, in_process_app
from missive_llamaserver.testing import FakeLlamaServer

N_CTX = 512


def script(*steps: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"script": list(steps), **extra})


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeLlamaServer]]:
    with (
        FakeLlamaServer(n_ctx=N_CTX) as main,
        FakeLlamaServer(n_ctx=N_CTX, fork="ik_llama.cpp") as ik,
        FakeLlamaServer(n_ctx=N_CTX, supports_tools=False) as plain,
        FakeLlamaServer(n_ctx=N_CTX) as loading,
        FakeLlamaServer(n_ctx=N_CTX) as broken,
    ):
        yield {"main": main, "ik": ik, "plain": plain, "loading": loading, "broken": broken}


@pytest.fixture(scope="module")
def client(fakes: dict[str, FakeLlamaServer]) -> Iterator[anthropic.Anthropic]:
    with closed_port() as down:
        dead = down.url

        def model(url: str | list[str], **settings: Any) -> dict[str, Any]:
            key = "base_urls" if isinstance(url, list) else "base_url"
            return {"driver": "llamaserver", "settings": {key: url, **settings}}

        config: dict[str, Any] = {
            "models": {
                "main": model(fakes["main"].url, thinking=True),
                "ik": model(fakes["ik"].url),
                "plain": model(fakes["plain"].url),
                "replicas": model([fakes["loading"].url, fakes["main"].url]),
                "loading": model(fakes["loading"].url),
                "down": model(dead, connect_timeout=1.0),
                "broken": model(fakes["broken"].url),
                "bigger": {**model(fakes["main"].url), "context_window": 4 * N_CTX},
                "api-sampling": model(fakes["main"].url, sampling_defaults="api"),
            },
        }
        with in_process_app(config) as app:
            yield app.sdk(api_key="test", timeout=60)


def test_request_body_and_exact_usage(client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]) -> None:
    messages = [{"role": "user", "content": "one two three four five"}]
    counted = client.messages.count_tokens(model="main", messages=messages).input_tokens
    message = client.messages.create(
        model="main", max_tokens=50, messages=messages, stop_sequences=["zzz"], extra_body={"top_k": 5}
    )
    body = fakes["main"].requests[-1]
    assert fakes["main"].templated[-1]["messages"] == body["messages"]  # counted as it is generated
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["cache_prompt"] is True and body["max_tokens"] == 50 and "stop" not in body
    # sampling_defaults = "model": what the request leaves unset is llama-server's
    # (the GGUF's recommended values)
    assert body["top_k"] == 5 and not {"temperature", "top_p", "min_p"} & set(body)
    assert body["chat_template_kwargs"] == {
        "enable_thinking": False,
        "thinking": False,
        "thinking_budget": 0,
        "preserve_thinking": True,
        "clear_thinking": False,
    }
    assert body["reasoning_format"] == "deepseek" and body["reasoning_effort"] == "low"
    assert "reasoning_budget_tokens" not in body
    assert message.content[0].text == "one two three four five"
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == counted
    assert usage.output_tokens == 5


def test_api_sampling_defaults_fill_what_the_request_leaves_unset(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    client.messages.create(
        model="api-sampling",
        max_tokens=5,
        messages=[{"role": "user", "content": "a b"}],
        extra_body={"top_k": 5},
    )
    body = fakes["main"].requests[-1]
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (1.0, 1.0, 5, 0.0)
    client.messages.create(
        model="api-sampling",
        max_tokens=5,
        messages=[{"role": "user", "content": "a b"}],
        extra_body={"temperature": 0.2},
    )
    body = fakes["main"].requests[-1]
    assert (body["temperature"], body["top_p"], body["top_k"], body["min_p"]) == (0.2, 1.0, 0, 0.0)


@pytest.mark.parametrize("model", ["main", "ik"])
def test_cached_prefix_is_cache_read(client: anthropic.Anthropic, model: str) -> None:
    """mainline reports prompt_tokens_details.cached_tokens; ik_llama.cpp only
    timings.prompt_n (the evaluated part): both become cache_read_input_tokens."""
    messages = [{"role": "user", "content": " ".join(f"w{i}" for i in range(40))}]
    total = client.messages.count_tokens(model=model, messages=messages).input_tokens
    client.messages.create(model=model, max_tokens=1, messages=messages)
    with client.messages.stream(model=model, max_tokens=1, messages=messages) as stream:
        started = next(e for e in stream if e.type == "message_start").message.usage
        final = stream.get_final_message().usage
    assert started.input_tokens == total and started.cache_read_input_tokens == 0
    assert final.cache_read_input_tokens == total - 1  # the fake re-evaluates the last prompt token
    assert final.input_tokens == 1


def test_reasoning_shown_only_when_asked(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    content = script({"reasoning": "Let me think."}, {"content": "Done."})
    asked = client.messages.create(
        model="main",
        max_tokens=1100,
        messages=[{"role": "user", "content": content}],
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    sent = fakes["main"].requests[-1]
    assert sent["chat_template_kwargs"] == {
        "enable_thinking": True,
        "thinking": True,
        "thinking_budget": 1024,
        "preserve_thinking": True,
        "clear_thinking": False,
    }
    assert sent["reasoning_budget_tokens"] == 1024
    assert [b.type for b in asked.content] == ["thinking", "text"]
    assert asked.content[0].thinking == "Let me think." and asked.content[1].text == "Done."
    plain = client.messages.create(
        model="main", max_tokens=50, messages=[{"role": "user", "content": content}]
    )
    assert [b.type for b in plain.content] == [
        "text"
    ] and plain.usage.output_tokens == 2  # reasoning still counted


def test_thinking_needs_the_setting(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="thinking"):
        client.messages.create(
            model="ik",
            max_tokens=1100,
            messages=[{"role": "user", "content": "hi"}],
            thinking={"type": "enabled", "budget_tokens": 1024},
        )


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([{"content": "ok"}, {"raw": "data: {not json"}], "malformed chunk"),
        ([{"content": "ok"}, {"error": "slot crashed"}], "slot crashed"),
        ([{"content": "ok"}, {"drop": True}], "lost the connection|closed the stream"),
    ],
)
@pytest.mark.parametrize("model", ["main", "ik"])
def test_broken_streams_are_502(
    client: anthropic.Anthropic, model: str, steps: list[dict[str, Any]], expected: str
) -> None:
    content = script(*steps)
    with pytest.raises(anthropic.InternalServerError) as caught:
        client.messages.create(model=model, max_tokens=50, messages=[{"role": "user", "content": content}])
    assert caught.value.status_code == 502
    assert caught.value.body["error"]["type"] == "api_error"
    with client.messages.stream(
        model=model, max_tokens=50, messages=[{"role": "user", "content": content}]
    ) as s:
        with pytest.raises(anthropic.APIStatusError) as streamed:
            for _ in s:
                pass
    import re

    assert re.search(expected, str(streamed.value)), streamed.value


def test_loading_replica_is_skipped(client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]) -> None:
    fakes["loading"].status = 503
    try:
        before = len(fakes["main"].requests)
        for _ in range(3):
            message = client.messages.create(
                model="replicas", max_tokens=20, messages=[{"role": "user", "content": "still here"}]
            )
            assert message.content[0].text == "still here"
        assert len(fakes["main"].requests) == before + 3
        assert fakes["loading"].requests == []
        with pytest.raises(anthropic.APIStatusError) as caught:
            client.messages.create(
                model="loading", max_tokens=20, messages=[{"role": "user", "content": "hi"}]
            )
        assert caught.value.status_code == 529
        assert caught.value.body["error"]["type"] == "overloaded_error"
        assert "Loading model" in caught.value.body["error"]["message"]
        assert int(caught.value.response.headers["retry-after"]) >= 1
    finally:
        fakes["loading"].status = None


def test_backend_down_is_529_with_retry_after(client: anthropic.Anthropic) -> None:
    for call in (
        lambda: client.messages.create(
            model="down", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        ),
        lambda: client.messages.count_tokens(model="down", messages=[{"role": "user", "content": "x"}]),
    ):
        with pytest.raises(anthropic.APIStatusError) as caught:
            call()
        assert caught.value.status_code == 529
        assert caught.value.body["error"]["type"] == "overloaded_error"
        assert caught.value.response.headers.get("retry-after")


def test_template_refusal_is_400_and_keeps_the_replica(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    fakes["broken"].template_error = "Conversation roles must alternate user/assistant/user/assistant/..."
    try:
        with pytest.raises(anthropic.BadRequestError, match="roles must alternate"):
            client.messages.create(model="broken", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.BadRequestError, match="rejected the conversation"):
            client.messages.count_tokens(model="broken", messages=[{"role": "user", "content": "x"}])
    finally:
        fakes["broken"].template_error = None
    # a 500 in llama-server's own envelope did not take the replica out of rotation
    assert (
        client.messages.create(model="broken", max_tokens=5, messages=[{"role": "user", "content": "fine"}])
        .content[0]
        .text
        == "fine"
    )


def test_server_context_refusal_is_prompt_too_long(client: anthropic.Anthropic) -> None:
    """The entry claims 4x the server's context: Missive's own check passes and
    llama-server's exceed_context_size_error is translated."""
    text = " ".join(["word"] * (N_CTX + 10))
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="bigger", max_tokens=5, messages=[{"role": "user", "content": text}])
    message = caught.value.body["error"]["message"]
    assert message.startswith("prompt is too long: ") and message.endswith(f" > {N_CTX - 1} maximum"), message


def test_local_context_check_before_sending(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    before = len(fakes["main"].requests)
    text = " ".join(["word"] * N_CTX)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="main", max_tokens=5, messages=[{"role": "user", "content": text}])
    counted = client.messages.count_tokens(
        model="main", messages=[{"role": "user", "content": text}]
    ).input_tokens
    assert (
        caught.value.body["error"]["message"] == f"prompt is too long: {counted} tokens > {N_CTX - 1} maximum"
    )
    assert len(fakes["main"].requests) == before  # refused before generating


TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {"name": "get_time", "input_schema": {"type": "object", "properties": {}}},
]


def test_forced_choice_sends_a_grammar(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    answer = script({"content": '{"name": "get_weather", '}, {"content": '"arguments": {"city": "Paris"}}'})
    message = client.messages.create(
        model="main",
        max_tokens=50,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": answer}],
    )
    body = fakes["main"].requests[-1]
    assert body["tool_choice"] == "none" and [t["function"]["name"] for t in body["tools"]] == [
        "get_weather",
        "get_time",
    ]
    schema = body["json_schema"]
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"] == TOOLS[0]["input_schema"]
    assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"
    assert message.content[0].name == "get_weather" and message.content[0].input == {"city": "Paris"}
    client.messages.create(
        model="main",
        max_tokens=50,
        tools=TOOLS,
        tool_choice={"type": "any"},
        messages=[{"role": "user", "content": answer}],
    )
    assert [s["properties"]["name"]["const"] for s in fakes["main"].requests[-1]["json_schema"]["anyOf"]] == [
        "get_weather",
        "get_time",
    ]


def test_forced_choice_ignored_by_the_server_is_502(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.InternalServerError, match="ignored the forced tool call"):
        client.messages.create(
            model="main",
            max_tokens=50,
            tools=TOOLS,
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "plain words"}],
        )


def test_tool_choice_none_offers_no_tools(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    client.messages.create(
        model="main",
        max_tokens=20,
        tools=TOOLS,
        tool_choice={"type": "none"},
        messages=[{"role": "user", "content": "hello"}],
    )
    body = fakes["main"].requests[-1]
    assert "tools" not in body and "tool_choice" not in body and "json_schema" not in body


def test_template_without_tools_gets_hermes(
    client: anthropic.Anthropic, fakes: dict[str, FakeLlamaServer]
) -> None:
    """supports_tools false: the tools go into the system prompt and Missive
    parses the <tool_call> the model writes."""
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    content = script({"content": "Checking. "}, {"content": call[:20]}, {"content": call[20:]})
    counted = client.messages.count_tokens(
        model="plain", tools=TOOLS, messages=[{"role": "user", "content": content}]
    ).input_tokens
    message = client.messages.create(
        model="plain", max_tokens=80, tools=TOOLS, messages=[{"role": "user", "content": content}]
    )
    body = fakes["plain"].requests[-1]
    assert "tools" not in body and "<tools>" in body["messages"][0]["content"]
    assert [b.type for b in message.content] == ["text", "tool_use"] and message.stop_reason == "tool_use"
    assert message.content[1].input == {"city": "Oslo"}
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == counted
    # the result goes back as a <tool_response> the template can render
    client.messages.create(
        model="plain",
        max_tokens=20,
        tools=TOOLS,
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}],
            },
        ],
    )
    assert (
        "<tool_response>\nsunny\n</tool_response>" in fakes["plain"].requests[-1]["messages"][-1]["content"]
    )


def test_structured_output_with_auto_tools_is_refused(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="output_config.format together with tools"):
        client.messages.create(
            model="main",
            max_tokens=20,
            tools=TOOLS,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
        )


def test_images_are_refused(client: anthropic.Anthropic) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError, match="input media type image/png"):
        client.messages.create(model="main", max_tokens=20, messages=[{"role": "user", "content": [image]}])
