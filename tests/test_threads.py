"""Message threads (``thread: create / continue``) through the official SDK.

A live Missive with echo models and two API keys; every request is captured
(``server.capture_dir``) so a test can see what the SDK sent and what it was
answered. ``echo-report`` answers with the conversation its driver received,
so a continue can be seen to carry the whole conversation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from sdk_turns import as_param, captured, prompt

from missive.testing import InProcessApp, in_process_app, until
from missive_echo import script

KEY_A, KEY_B = "sk-thread-key-a", "sk-thread-key-b"
CAPS = {"tool_choice": ["auto", "any", "tool", "none"], "thinking": True}
TOOL = {
    "name": "lookup",
    "description": "Look a word up",
    "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
}


def echo_models(**extra: Any) -> dict[str, Any]:
    models = {
        name: {"driver": "echo", "context_window": 20_000, "settings": {"capabilities": CAPS, **settings}}
        for name, settings in (("echo", {}), ("echo-b", {}), ("echo-report", {"report": True}))
    }
    models["echo"]["aliases"] = ["claude-*"]
    return {**models, **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessApp, Path]]:
    captures = tmp_path_factory.mktemp("captures")
    config = {"server": {"api_keys": [KEY_A, KEY_B], "capture_dir": str(captures)}, "models": echo_models()}
    with in_process_app(config) as app:
        yield app, captures


def client_for(app: InProcessApp, key: str = KEY_A) -> anthropic.Anthropic:
    return app.sdk(api_key=key, timeout=60)


@pytest.fixture
def client(server: tuple[InProcessApp, Path]) -> anthropic.Anthropic:
    return client_for(server[0])


@pytest.mark.parametrize("stream", [False, True])
def test_a_continue_is_answered_from_the_whole_conversation(
    client: anthropic.Anthropic, stream: bool
) -> None:
    system = "You answer in one word."
    first_user = {"role": "user", "content": "hello there"}

    def create(**kwargs: Any) -> Any:
        if stream:
            with client.beta.messages.stream(model="echo-report", max_tokens=50, **kwargs) as events:
                return events.get_final_message()
        return client.beta.messages.create(model="echo-report", max_tokens=50, **kwargs)

    first = create(system=system, tools=[TOOL], messages=[first_user], thread={"type": "create"})
    second_user = {"role": "user", "content": "and once more"}
    second = create(messages=[second_user], thread={"type": "continue", "previous_message_id": first.id})
    seen = json.loads(second.content[0].text)
    assert seen["system"] == system
    assert [(t["role"], t["blocks"][0]["text"]) for t in seen["turns"]] == [
        ("user", "hello there"),
        ("assistant", first.content[0].text),
        ("user", "and once more"),
    ]
    full = [first_user, as_param(first), second_user]
    counted = client.beta.messages.count_tokens(
        model="echo-report", system=system, tools=[TOOL], messages=full
    )
    assert prompt(second) == counted.input_tokens
    # A third turn continues from the second response.
    third = create(
        messages=[{"role": "user", "content": "last"}],
        thread={"type": "continue", "previous_message_id": second.id},
    )
    assert [t["blocks"][0]["text"] for t in json.loads(third.content[0].text)["turns"]][-1] == "last"


def test_thread_errors_carry_the_sdk_error_codes(client: anthropic.Anthropic) -> None:
    kwargs: dict[str, Any] = {"model": "echo", "max_tokens": 20}
    system = [{"type": "text", "text": "sys"}]
    first = client.beta.messages.create(
        **kwargs, system=system, messages=[{"role": "user", "content": "one"}], thread={"type": "create"}
    )
    cont = {"type": "continue", "previous_message_id": first.id}

    with pytest.raises(anthropic.NotFoundError) as missing:
        client.beta.messages.create(
            **kwargs,
            messages=[{"role": "user", "content": "x"}],
            thread={"type": "continue", "previous_message_id": "msg_nothing_here"},
        )
    assert missing.value.error_code == "thread_not_found"
    assert missing.value.body["error"]["details"] == {"error_code": "thread_not_found"}
    assert type(missing.value).__name__ == "ThreadNotFoundError"

    with pytest.raises(anthropic.BadRequestError) as mismatch:
        client.beta.messages.create(
            **{**kwargs, "model": "echo-b"}, messages=[{"role": "user", "content": "x"}], thread=cont
        )
    assert mismatch.value.error_code == "thread_fingerprint_mismatch"
    assert "differing field(s): model" in mismatch.value.message
    with pytest.raises(anthropic.BadRequestError) as system_changed:
        client.beta.messages.create(
            **kwargs, system="other", messages=[{"role": "user", "content": "x"}], thread=cont
        )
    assert system_changed.value.error_code == "thread_fingerprint_mismatch"
    assert "differing field(s): system" in system_changed.value.message

    # A continue that fails validation once rebuilt frees the response again.
    with pytest.raises(anthropic.BadRequestError) as invalid:
        client.beta.messages.create(**kwargs, messages=[{"role": "user", "content": ""}], thread=cont)
    assert invalid.value.error_code is None and "messages.2" in invalid.value.message

    # The same system sent again is accepted (cache_control markers aside).
    second = client.beta.messages.create(
        **kwargs,
        system=[{**system[0], "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "two words"}],
        thread=cont,
    )
    assert second.content[0].text == "two words"
    with pytest.raises(anthropic.BadRequestError) as again:
        client.beta.messages.create(**kwargs, messages=[{"role": "user", "content": "x"}], thread=cont)
    assert again.value.error_code == "thread_already_continued"
    assert again.value.body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "thread, problem",
    [
        ({"type": "resume"}, "thread.type: Input should be 'create' or 'continue'"),
        ({"type": "continue"}, "thread.previous_message_id: Field required"),
        ("create", "thread: Input should be a valid dictionary"),
        (
            {"type": "continue", "previous_message_id": 7},
            "thread.previous_message_id: Input should be a non-empty string",
        ),
    ],
)
def test_malformed_thread_fields_are_400s(client: anthropic.Anthropic, thread: Any, problem: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as error:
        client.beta.messages.create(
            model="echo",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"thread": thread},
        )
    assert problem in error.value.message


def test_a_continue_in_flight_refuses_a_second_one(echo_url: str) -> None:
    """A stream read as it is written, then closed by the client: a live server,
    the session's echo server (the in-process transport hands a response over
    once it has ended)."""
    _continue_in_flight(anthropic.Anthropic(base_url=echo_url, api_key="unused", max_retries=0, timeout=60))


def _continue_in_flight(client: anthropic.Anthropic) -> None:
    first = client.beta.messages.create(
        model="echo", max_tokens=20, messages=[{"role": "user", "content": "go"}], thread={"type": "create"}
    )
    cont = {"type": "continue", "previous_message_id": first.id}
    slow = script({"sleep": 120}, {"text": "late"})
    with client.beta.messages.stream(
        model="echo", max_tokens=20, messages=[{"role": "user", "content": slow}], thread=cont
    ) as running:
        assert next(iter(running)).type == "message_start"  # the continue holds the thread now
        with pytest.raises(anthropic.BadRequestError) as busy:
            client.beta.messages.create(
                model="echo", max_tokens=20, messages=[{"role": "user", "content": "x"}], thread=cont
            )
        assert busy.value.error_code == "thread_continue_in_flight"
    # The stream was closed before it completed: the response can be continued again.

    def continued() -> Any:
        try:
            return client.beta.messages.create(
                model="echo", max_tokens=20, messages=[{"role": "user", "content": "after"}], thread=cont
            )
        except anthropic.BadRequestError as exc:
            assert exc.error_code == "thread_continue_in_flight"
            return None

    assert until(continued, "continued after the first continue was closed").content[0].text == "after"


def test_threads_are_private_to_their_api_key(server: tuple[InProcessApp, Path]) -> None:
    app, _ = server
    a, b = client_for(app, KEY_A), client_for(app, KEY_B)
    first = a.beta.messages.create(
        model="echo",
        max_tokens=20,
        messages=[{"role": "user", "content": "mine"}],
        thread={"type": "create"},
        diagnostics={"previous_message_id": None},
    )
    cont = {"type": "continue", "previous_message_id": first.id}
    with pytest.raises(anthropic.NotFoundError) as other:
        b.beta.messages.create(
            model="echo", max_tokens=20, messages=[{"role": "user", "content": "yours?"}], thread=cont
        )
    assert other.value.error_code == "thread_not_found"
    # Nor is its diagnostics fingerprint another key's to compare with.
    peek = b.beta.messages.create(
        model="echo",
        max_tokens=20,
        messages=[{"role": "user", "content": "mine"}],
        diagnostics={"previous_message_id": first.id},
    )
    assert peek.diagnostics.cache_miss_reason.type == "previous_message_not_found"
    # Both headers may be sent; the owner's key still finds its thread.
    mine = a.beta.messages.create(
        model="echo",
        max_tokens=20,
        messages=[{"role": "user", "content": "still mine"}],
        thread=cont,
        extra_headers={"authorization": f"Bearer {KEY_A}"},
    )
    assert mine.content[0].text == "still mine"


def test_the_thread_helper_sends_only_new_messages_and_counts_the_whole_conversation(
    server: tuple[InProcessApp, Path],
) -> None:
    app, captures = server
    client = client_for(app)
    before = len(captured(captures))
    thread = client.beta.messages.thread(
        model="echo", max_tokens=30, system="Count every word.", tools=[TOOL]
    )
    for words in ("one two three", "four five", "six"):
        answer = thread.send({"role": "user", "content": words})
        assert answer.content[0].text == words
        sent = list(thread.messages)[:-1]  # what this turn's prompt held: everything but its reply
        counted = client.beta.messages.count_tokens(
            model="echo", system="Count every word.", tools=[TOOL], messages=sent
        )
        assert prompt(answer) == counted.input_tokens
    bodies = [r["body"] for r in captured(captures, before)]
    assert [b["thread"]["type"] for b in bodies] == ["create", "continue", "continue"]
    assert [len(b["messages"]) for b in bodies] == [1, 1, 1]
    assert all("system" not in b and "tools" not in b for b in bodies[1:])
    assert all(r["ignored"] == [] for r in captured(captures, before)), (
        "thread, diagnostics or the beta reported"
    )


def test_the_thread_helper_streams(client: anthropic.Anthropic) -> None:
    thread = client.beta.messages.thread(model="echo", max_tokens=30)
    for words in ("alpha beta", "gamma"):
        with thread.stream({"role": "user", "content": words}) as events:
            assert "".join(events.text_stream) == words
    assert [m["role"] if isinstance(m, dict) else m.role for m in thread.messages] == [
        "user",
        "assistant",
    ] * 2
    assert thread.previous_message_id is not None


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessApp, Path]]:
    """A server keeping 3 responses at most, threads for one second."""
    captures = tmp_path_factory.mktemp("captures-small")
    config = {
        "server": {"capture_dir": str(captures)},
        "threads": {"ttl": 1.0, "max_count": 3},
        "models": echo_models(),
    }
    with in_process_app(config) as app:
        yield app, captures


def assert_replayed(captures: Path, since: int) -> None:
    """The turn after ``since`` was a continue answered 404 thread_not_found,
    then the whole conversation again under a new thread."""
    records = captured(captures, since)
    continues = [r for r in records if r["body"].get("thread", {}).get("type") == "continue"]
    assert continues and continues[0]["status"] == 404, [
        (r["status"], r["body"].get("thread")) for r in records
    ]
    after = records[records.index(continues[0]) + 1]
    assert after["body"]["thread"] == {"type": "create"} and after["status"] == 200
    assert len(after["body"]["messages"]) == 3


def test_an_expired_thread_is_resent_by_the_sdk(small: tuple[InProcessApp, Path]) -> None:
    app, captures = small
    client = client_for(app)
    thread = client.beta.messages.thread(model="echo", max_tokens=30)
    assert thread.send({"role": "user", "content": "before the pause"}).content[0].text == "before the pause"
    time.sleep(1.5)  # past the server's threads.ttl (1 s): the thread has expired
    since = len(captured(captures))
    answer = thread.send({"role": "user", "content": "after the pause"})
    assert answer.content[0].text == "after the pause"
    assert_replayed(captures, since)


def test_a_thread_dropped_for_room_is_resent_by_the_sdk(small: tuple[InProcessApp, Path]) -> None:
    app, captures = small
    client = client_for(app)
    thread = client.beta.messages.thread(model="echo", max_tokens=30)
    thread.send({"role": "user", "content": "first turn"})
    for i in range(3):  # three newer responses: the store keeps 3
        client.beta.messages.create(
            model="echo",
            max_tokens=5,
            messages=[{"role": "user", "content": f"n{i}"}],
            thread={"type": "create"},
        )
    since = len(captured(captures))
    assert thread.send({"role": "user", "content": "second turn"}).content[0].text == "second turn"
    assert_replayed(captures, since)


def test_disabled_threads_send_the_tool_runner_unthreaded(tmp_path: Path) -> None:
    config = {"threads": {"enabled": False}, "models": echo_models()}
    with in_process_app(config) as app:
        client = client_for(app)
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.beta.messages.create(
                model="echo",
                max_tokens=5,
                messages=[{"role": "user", "content": "x"}],
                thread={"type": "create"},
            )
        assert refused.value.error_code == "thread_unsupported_request"
        assert refused.value.body["error"]["details"] == {"error_code": "thread_unsupported_request"}

        calls: list[str] = []

        @anthropic.beta_tool
        def lookup(word: str) -> str:
            """Look a word up."""
            calls.append(word)
            return f"{word} means something"

        content = script(
            {"tool_call": {"name": "lookup", "arguments": ['{"word": "tea"}']}},
            then=[{"script": [{"text": "done"}]}],
        )
        runner = client.beta.messages.tool_runner(
            model="echo", max_tokens=50, tools=[lookup], messages=[{"role": "user", "content": content}]
        )
        final = runner.until_done()
        assert calls == ["tea"] and final.content[0].text == "done"


def test_a_message_batch_request_with_a_thread_is_errored(client: anthropic.Anthropic) -> None:
    params = {
        "model": "echo",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "thread": {"type": "create"},
    }
    batch = client.messages.batches.create(requests=[{"custom_id": "threaded", "params": params}])
    # Polled every 0.2 s: each poll is a request to the server running the batch.
    until(
        lambda: client.messages.batches.retrieve(batch.id).processing_status == "ended",
        "the batch ended",
        interval=0.2,
    )
    [result] = list(client.messages.batches.results(batch.id))
    assert result.result.type == "errored"
    assert "message threads are not supported in a Message Batch" in result.result.error.error.message
