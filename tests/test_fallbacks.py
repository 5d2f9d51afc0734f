"""``fallbacks`` through the official SDK (core/missive/routing/chain.py):
a model whose only slot is busy and whose queue is full (529) hands the
request to the next entry, with that entry's overrides; the answer names the
model that served it (``model`` and a ``fallback_message`` entry in
``usage.iterations``); ``"default"`` takes the model's configured chain;
other errors, and anything after an answer started, are not retried.

A slot is held by a streaming request whose scripted answer sleeps; the
test holds its connection open on the app in process and closes it at the
end (the server frees the slot when the client goes), then waits for
``/health`` to show the model idle, so nothing depends on timing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import InProcessApp, in_process_app, until
from missive_echo import script

ONE_SLOT = {"capabilities": {"max_concurrency": 1, "tool_choice": ["auto", "none"]}}
THINKING_SLOT = {"capabilities": {"max_concurrency": 1, "tool_choice": ["auto", "none"], "thinking": True}}
CONFIG: dict[str, Any] = {
    "models": {
        "busy": {
            "driver": "echo",
            "context_window": 1000,
            "queue_depth": 0,
            "settings": THINKING_SLOT,
            "fallbacks": ["spare", {"model": "other", "max_tokens": 7}],
        },
        "spare": {"driver": "echo", "context_window": 1000, "queue_depth": 0, "settings": ONE_SLOT},
        "other": {"driver": "echo", "context_window": 1000, "settings": {"capabilities": {"thinking": True}}},
    },
}
BETA = ["server-side-fallback-2026-07-01"]
HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    with in_process_app(CONFIG) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    # max_retries=0: the SDK retries 529s by itself, which would hide them.
    return app.sdk(timeout=60)


@contextmanager
def holding(app: InProcessApp, *models: str) -> Iterator[None]:
    """Each of ``models``' one slot held by a sleeping stream (for the block),
    its connection held open (``InProcessApp.hold``) and closed at the end."""
    body = {
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": script({"text": "held"}, {"sleep": 120})}],
    }
    with ExitStack() as streams:
        for model in models:
            held = streams.enter_context(app.hold("/v1/messages", {**body, "model": model}))
            assert held.status() == 200  # admitted: it holds the slot
        yield
    with app.http_client(httpx, timeout=10) as http:
        until(lambda: http.get("/health").json()["generating"] == 0, "idle again")


def test_without_fallbacks_a_full_model_is_529(app: InProcessApp, client: anthropic.Anthropic) -> None:
    with holding(app, "busy"):
        with pytest.raises(anthropic.APIStatusError) as raised:
            client.messages.create(model="busy", max_tokens=20, messages=HELLO)
        assert raised.value.status_code == 529


@pytest.mark.parametrize("stream", [False, True])
def test_full_queue_falls_back_to_the_next_entry(
    app: InProcessApp, client: anthropic.Anthropic, stream: bool
) -> None:
    kwargs: dict[str, Any] = dict(
        model="busy", max_tokens=20, messages=HELLO, fallbacks=[{"model": "spare"}], betas=BETA
    )
    with holding(app, "busy"):
        if stream:
            with client.beta.messages.stream(**kwargs) as answer:
                msg = answer.get_final_message()
        else:
            msg = client.beta.messages.create(**kwargs)
    assert msg.model == "spare"
    assert msg.content[0].text == "hello there"  # type: ignore[union-attr]
    assert msg.usage.iterations is not None
    [served] = msg.usage.iterations
    assert served.type == "fallback_message" and served.model == "spare"
    assert served.output_tokens == msg.usage.output_tokens == 2
    assert served.input_tokens == msg.usage.input_tokens


def test_the_chain_goes_on_and_takes_each_entrys_overrides(
    app: InProcessApp, client: anthropic.Anthropic
) -> None:
    chain = [{"model": "spare"}, {"model": "other", "max_tokens": 1}]
    with holding(app, "busy", "spare"):
        msg = client.beta.messages.create(
            model="busy", max_tokens=2000, messages=HELLO, fallbacks=chain, betas=BETA
        )
        assert msg.model == "other"
        assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 1  # the entry's max_tokens
        # "default": the model's configured chain (spare, then other with max_tokens 7).
        default = client.beta.messages.create(
            model="busy",
            max_tokens=2000,
            messages=[{"role": "user", "content": "a b c d e f g h i j"}],
            fallbacks="default",
            betas=BETA,
        )
        assert default.model == "other" and default.usage.output_tokens == 7


def test_thinking_of_the_request_follows_what_the_fallback_supports(
    app: InProcessApp, client: anthropic.Anthropic
) -> None:
    """``enabled`` on a model without thinking becomes the model's default
    (no thinking); ``between_tools`` on a model without tools: ``disabled``."""
    steps = script({"thinking": "hmm"}, {"text": "ok"})
    with holding(app, "busy"):
        msg = client.beta.messages.create(
            model="busy",
            max_tokens=2000,
            messages=[{"role": "user", "content": steps}],
            thinking={"type": "enabled", "budget_tokens": 1024},
            fallbacks=[{"model": "spare"}],
            betas=BETA,
        )
    assert msg.model == "spare" and [b.type for b in msg.content] == ["text"]


def test_bad_entries_and_other_errors_are_not_retried(app: InProcessApp, client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match=r"fallbacks\.0\.model: no model 'nope'"):
        client.beta.messages.create(
            model="busy", max_tokens=20, messages=HELLO, fallbacks=[{"model": "nope"}], betas=BETA
        )
    with pytest.raises(anthropic.BadRequestError, match=r"fallbacks\.0\.colour"):
        client.beta.messages.create(
            model="busy",
            max_tokens=20,
            messages=HELLO,
            fallbacks=[{"model": "spare", "colour": "red"}],
            betas=BETA,
        )
    # A 400 of the requested model (a capability it lacks) is the answer:
    # no fallback runs, though the entry could have answered.
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.beta.messages.create(
            model="spare",
            max_tokens=2000,
            messages=HELLO,
            thinking={"type": "enabled", "budget_tokens": 1024},
            fallbacks=[{"model": "other"}],
            betas=BETA,
        )
    assert "is not supported by model 'spare'" in raised.value.body["error"]["message"]  # type: ignore[index]


def test_an_error_after_the_answer_started_is_not_retried(app: InProcessApp) -> None:
    """The stream has begun (``message_start``): a failure is an ``error``
    event, never an answer from another model."""
    steps = script({"text": "partial"}, {"error": {"type": "overloaded_error", "message": "backend gone"}})
    body = {
        "model": "spare",
        "max_tokens": 20,
        "stream": True,
        "fallbacks": [{"model": "other"}],
        "messages": [{"role": "user", "content": steps}],
    }
    with app.http_client(httpx, timeout=60) as http:
        response = http.post("/v1/messages", json=body)
    events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[0]["message"]["model"] == "spare"
    assert events[-1]["type"] == "error" and events[-1]["error"]["type"] == "overloaded_error"
    assert all(e["type"] != "message_stop" for e in events)


def test_a_batch_request_with_fallbacks_is_errored(client: anthropic.Anthropic) -> None:
    """As the API: fallbacks are "not supported on the Message Batches API"."""
    params = {"model": "spare", "max_tokens": 20, "messages": HELLO}
    batch = client.messages.batches.create(
        requests=[
            {"custom_id": "plain", "params": params},
            {"custom_id": "chained", "params": {**params, "fallbacks": [{"model": "other"}]}},  # type: ignore[typeddict-unknown-key]
        ]
    )
    ended = until(
        lambda: (b := client.messages.batches.retrieve(batch.id)).processing_status == "ended" and b,
        "the batch ended",
        timeout=300,
        interval=0.2,
    )
    assert ended.request_counts.succeeded == 1 and ended.request_counts.errored == 1
    results = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert results["plain"].type == "succeeded"
    errored = results["chained"]
    assert (
        errored.type == "errored"
        and "fallbacks: not supported in a Message Batch" in errored.error.error.message
    )  # type: ignore[union-attr]


def test_a_key_reaches_no_model_it_may_not_use_through_fallbacks() -> None:
    """With keys limited to some models (``[keys.NAME] models``), a fallback
    entry is resolved for the request's key: another model is refused as an
    unknown one, and ``allowed_fallback_models`` lists only the key's."""
    import hashlib

    config = {
        "keys": {
            "scoped": {
                "key_sha256": hashlib.sha256(b"sk-scoped-0001").hexdigest(),
                "models": ["busy", "other"],
            }
        },
        "models": CONFIG["models"],
    }
    with in_process_app(config) as app:  # no slot is held: no socket needed
        scoped = app.sdk(api_key="sk-scoped-0001", timeout=60)
        with pytest.raises(anthropic.BadRequestError) as raised:
            scoped.beta.messages.create(
                model="busy", max_tokens=20, messages=HELLO, fallbacks=[{"model": "spare"}], betas=BETA
            )
        assert "fallbacks.0.model: no model 'spare' is served here" in raised.value.body["error"]["message"]  # type: ignore[index]
        assert scoped.beta.models.retrieve("busy").allowed_fallback_models == ["other"]
        answered = scoped.beta.messages.create(
            model="busy", max_tokens=20, messages=HELLO, fallbacks=[{"model": "other"}], betas=BETA
        )
        assert answered.model == "busy"  # the requested model was free: no fallback taken
