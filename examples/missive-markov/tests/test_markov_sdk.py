"""The markov driver through the official SDK against a live Missive and a
real backend process: streaming, stop reasons, usage, refusals of what it
cannot do, and the backend's failures as the API's errors."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.testing import closed_port, live_server

ASK = [{"role": "user", "content": "List three colours of the rainbow."}]
GREEDY = {"temperature": 0.0}


def markov(base_url: str, **settings: Any) -> dict[str, Any]:
    return {"driver": "markov", "settings": {"base_url": base_url, **settings}}


@pytest.fixture(scope="module")
def client(backend: str) -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            "markov": markov(backend),
            "markov-seeded": markov(backend, seed=7),
            "markov-wide": {**markov(backend), "context_window": 1000},
        }
    }
    with live_server(config) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)


def sdk(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)


def test_streamed_answer_ends_its_turn_with_exact_usage(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model="markov", max_tokens=60, messages=ASK, extra_body=GREEDY) as stream:
        deltas = [
            e.delta.text for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta"
        ]
        final = stream.get_final_message()
    text = "".join(deltas)  # (the core may join deltas that arrive together into one event)
    assert deltas and text == final.content[0].text
    assert final.stop_reason == "end_turn"  # the chain reached the end of a sentence
    assert final.usage.output_tokens == len(text.split()) > 3
    counted = client.messages.count_tokens(model="markov", messages=ASK).input_tokens
    # the rendered prompt: "user: List three colours of the rainbow.\nassistant:"
    assert final.usage.input_tokens == counted == 8


def test_max_tokens_stops_the_backend_early(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model="markov", max_tokens=3, messages=ASK, extra_body=GREEDY)
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3 == len(message.content[0].text.split())


def test_stop_sequence_cuts_the_answer(client: anthropic.Anthropic) -> None:
    full = (
        client.messages.create(model="markov", max_tokens=60, messages=ASK, extra_body=GREEDY).content[0].text
    )
    stop = full.split()[3]
    message = client.messages.create(
        model="markov", max_tokens=60, messages=ASK, stop_sequences=[stop], extra_body=GREEDY
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    assert message.content[0].text == full[: full.index(stop)]


def test_prefill_is_continued(client: anthropic.Anthropic) -> None:
    messages = [*ASK, {"role": "assistant", "content": "The seven colours are"}]
    message = client.messages.create(model="markov", max_tokens=5, messages=messages, extra_body=GREEDY)
    text = message.content[0].text
    assert text.startswith(" ") and len(text.split()) == 5  # words after the prefill's


def test_seeded_sampling_repeats_itself(client: anthropic.Anthropic) -> None:
    body = dict(
        model="markov-seeded", max_tokens=30, messages=ASK, extra_body={"temperature": 1.0, "top_k": 3}
    )
    answers = {client.messages.create(**body).content[0].text for _ in range(3)}
    assert len(answers) == 1


def test_context_window_is_the_backends_at_most(client: anthropic.Anthropic) -> None:
    assert client.models.retrieve("markov-wide").max_input_tokens == 64
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="markov-wide", max_tokens=5, messages=[{"role": "user", "content": "a " * 70}]
        )
    # 70 words + "user:" + "assistant:"; one token must remain for the answer
    assert caught.value.body["error"]["message"] == "prompt is too long: 72 tokens > 63 maximum"


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.mark.parametrize(
    ("extra", "wording"),
    [
        ({"extra_body": {"top_p": 0.9}}, "top_p is not supported by model 'markov' (driver 'markov')"),
        ({"tools": [{"name": "f", "input_schema": {"type": "object"}}]}, "supported: no tool use"),
        (
            {"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 1024}},
            'thinking {"type": "enabled"} is not supported',
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                            }
                        ],
                    }
                ]
            },
            "input media type image/png is not supported by model 'markov'",
        ),
    ],
    ids=["top_p", "tools", "thinking", "image"],
)
def test_what_it_cannot_do_is_refused(
    client: anthropic.Anthropic, extra: dict[str, Any], wording: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**{"model": "markov", "max_tokens": 20, "messages": ASK, **extra})
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert wording in caught.value.body["error"]["message"]


def test_unreachable_backend_is_a_529_with_retry_after(missive_server: Any) -> None:
    with closed_port() as down:
        server = missive_server({"models": {"m": markov(down.url, retry_after=9)}})
        for call in (
            lambda c: c.messages.create(model="m", max_tokens=5, messages=ASK),
            lambda c: c.messages.count_tokens(model="m", messages=ASK),
        ):
            with pytest.raises(anthropic.APIStatusError) as caught:
                call(sdk(server.url))
            assert caught.value.status_code == 529 and caught.value.response.headers["retry-after"] == "9"
            assert caught.value.body["error"]["type"] == "overloaded_error"
            assert "is unreachable" in caught.value.body["error"]["message"]


def test_busy_backend_is_a_529_and_a_closed_stream_frees_it(
    missive_server: Any, slow_backend: tuple[subprocess.Popen[str], str]
) -> None:
    client = sdk(missive_server({"models": {"m": markov(slow_backend[1])}}).url)
    # 10 s at 50 ms a token, were it not closed; greedy (18 words): sampled, the
    # chain may end after two words and free the slot before the next request.
    long = dict(model="m", max_tokens=200, messages=ASK, extra_body=GREEDY)
    with client.messages.stream(**long) as stream:
        next(e for e in stream if e.type == "content_block_delta")
        with pytest.raises(anthropic.APIStatusError) as caught:  # the backend's only slot is taken
            client.messages.create(model="m", max_tokens=5, messages=ASK)
        assert caught.value.status_code == 529 and "is busy" in caught.value.body["error"]["message"]
    deadline = time.monotonic() + 15  # closing the stream closed the backend's connection
    while True:
        try:
            assert client.messages.create(model="m", max_tokens=2, messages=ASK).usage.output_tokens == 2
            break
        except anthropic.APIStatusError:
            assert time.monotonic() < deadline, "the backend's slot was not freed"
            time.sleep(0.1)


def test_backend_lost_mid_answer_is_an_error_event(
    missive_server: Any, slow_backend: tuple[subprocess.Popen[str], str]
) -> None:
    proc, url = slow_backend
    client = sdk(missive_server({"models": {"m": markov(url)}}).url)
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(model="m", max_tokens=200, messages=ASK) as stream:
            for event in stream:
                if event.type == "content_block_delta":
                    proc.kill()
    # the backend's stream ends when its connection closes (HTTP/1.0): without the done line
    assert caught.value.body["error"]["type"] == "api_error"
    assert "ended the answer without its done line" in caught.value.body["error"]["message"]


def test_bad_settings_stop_the_server_with_their_names(missive_server: Any) -> None:
    with pytest.raises(RuntimeError) as caught:
        missive_server(
            {"models": {"m": {"driver": "markov", "settings": {"base_url": "localhost:8700", "sed": 1}}}}
        )
    log = str(caught.value)
    assert (
        "model 'm': invalid markov setting settings.base_url: Value error, must start with http:// or https://"
        in log
    )
    assert "settings.sed: Extra inputs are not permitted" in log
