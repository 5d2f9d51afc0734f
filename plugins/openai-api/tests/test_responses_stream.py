"""The Responses stream converter (Missive's Messages events -> Responses
stream events) event by event, and its result whatever way the deltas are
split: the same ``response`` as the non-streaming answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_chat_stream import USAGE, events, splits

from missive.api import InvalidRequestError, OverloadedError
from missive_openai_api.responses_store import ResponseStore, Stored
from missive_openai_api.responses_stream import ResponseConverter, ResponseShape, assistant_turn, response_of


def shape(encrypted: bool = False) -> ResponseShape:
    return ResponseShape("resp_abc", 7, "m", {"store": True}, encrypted_reasoning=encrypted)


def run(evs: list[dict[str, Any]], encrypted: bool = False) -> tuple[ResponseConverter, list[dict[str, Any]]]:
    converter = ResponseConverter(shape(encrypted))
    return converter, [out for event in evs for out in converter.feed(event)]


def fold(stream: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client assembles from the events (as the SDK's stream helper does)."""
    items: dict[int, dict[str, Any]] = {}
    for e in stream:
        if e["type"] == "response.output_item.added":
            items[e["output_index"]] = {**e["item"], "text": "", "reasoning": "", "arguments": ""}
        elif e["type"] == "response.output_text.delta":
            items[e["output_index"]]["text"] += e["delta"]
        elif e["type"] == "response.reasoning_text.delta":
            items[e["output_index"]]["reasoning"] += e["delta"]
        elif e["type"] == "response.function_call_arguments.delta":
            items[e["output_index"]]["arguments"] += e["delta"]
    return {"items": [items[i] for i in sorted(items)], "final": stream[-1]["response"]}


def test_event_by_event() -> None:
    converter, stream = run(events(["Hi", " there"], ["hm"], ['{"a"', ": 1}"]), encrypted=True)
    assert [e["sequence_number"] for e in stream] == list(range(len(stream)))
    assert [e["type"] for e in stream] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = stream[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    reasoning = stream[7]["item"]
    assert reasoning == {
        "id": "rs_abc000",
        "type": "reasoning",
        "status": "completed",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "hm"}],
        "encrypted_content": "sig",
    }
    assert stream[10] == {
        "type": "response.output_text.delta",
        "sequence_number": 10,
        "item_id": "msg_abc001",
        "output_index": 1,
        "content_index": 0,
        "delta": "Hi",
        "logprobs": [],
    }
    assert stream[12]["text"] == "Hi there"
    assert stream[18]["arguments"] == '{"a": 1}' and stream[18]["item_id"] == "fc_abc002"
    call = stream[19]["item"]
    assert call["call_id"] == "toolu_1" and call["name"] == "f" and call["status"] == "completed"
    final = stream[-1]["response"]
    assert final["status"] == "completed" and final["store"] is True and final["id"] == "resp_abc"
    assert final["usage"] == {
        "input_tokens": 13,
        "input_tokens_details": {"cached_tokens": 7},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 22,
    }
    assert converter.content == [
        {"type": "thinking", "thinking": "hm", "signature": "sig"},
        {"type": "text", "text": "Hi there"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ]


def test_pings_and_unknown_blocks_give_nothing() -> None:
    converter = ResponseConverter(shape())
    assert converter.feed({"type": "ping"}) == []
    block = {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
    assert converter.feed({"type": "content_block_start", "index": 0, "content_block": block}) == []
    assert converter.feed({"type": "content_block_stop", "index": 0}) == []


@pytest.mark.parametrize("stop", ["end_turn", "max_tokens", "tool_use", "stop_sequence", "refusal"])
def test_every_split_gives_the_non_stream_response(stop: str) -> None:
    text, reasoning, arguments = "Héllo 🌍!", "why?", '{"k": "v ü"}'
    folded = {
        "content": [
            {"type": "thinking", "thinking": reasoning, "signature": "sig"},
            {"type": "text", "text": text},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": json.loads(arguments)},
        ],
        "stop_reason": stop,
        "usage": {**USAGE, "output_tokens": 9},
    }
    expected = response_of(folded, shape())
    for pieces in splits(text):
        for args in splits(arguments)[::7]:
            converter, stream = run(events(pieces, [reasoning[:1], reasoning[1:]], args, stop))
            got = fold(stream)
            final = got["final"]
            assert stream[-1]["type"] == f"response.{expected['status']}"
            assert final["status"] == expected["status"]
            assert final["incomplete_details"] == expected["incomplete_details"]
            assert final["usage"] == expected["usage"]
            thinking, message, call = got["items"]
            assert thinking["reasoning"] == reasoning and message["text"] == text
            assert json.loads(call["arguments"]) == json.loads(arguments)
            # The completed response equals the non-streaming one (arguments as JSON).
            for a, b in zip(final["output"], expected["output"], strict=True):
                if a["type"] == "function_call":
                    assert json.loads(a.pop("arguments")) == json.loads(b["arguments"])
                    b = {k: v for k, v in b.items() if k != "arguments"}
                assert a == b
            assert converter.content == folded["content"]


def test_statuses() -> None:
    assert response_of({"content": [], "stop_reason": "max_tokens"}, shape())["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    refused = response_of({"content": [], "stop_reason": "refusal"}, shape())
    assert refused["status"] == "incomplete" and refused["incomplete_details"] == {"reason": "content_filter"}
    assert response_of({"content": [], "stop_reason": "end_turn"}, shape())["status"] == "completed"


def test_failure_event() -> None:
    converter, stream = run(events(["a"], [], [])[:4])
    (failed,) = converter.fail(OverloadedError("busy"))
    assert failed["type"] == "response.failed" and failed["sequence_number"] == len(stream)
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error", "message": "busy"}
    (bad,) = ResponseConverter(shape()).fail(InvalidRequestError("no"))
    assert bad["response"]["error"]["code"] == "invalid_prompt"


def test_assistant_turn_keeps_signed_thinking_text_and_calls() -> None:
    content = [
        {"type": "thinking", "thinking": "t", "signature": ""},
        {"type": "text", "text": ""},
        {"type": "text", "text": "x"},
        {"type": "tool_use", "id": "c", "name": "f", "input": {}},
    ]
    assert assistant_turn(content) == {
        "role": "assistant",
        "content": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c", "name": "f", "input": {}}],
    }
    assert assistant_turn([]) is None


def test_store_chain_owner_and_bounds() -> None:
    store = ResponseStore(max_count=3, max_bytes=10_000)
    turn = [{"role": "user", "content": [{"type": "text", "text": "a"}]}]
    done = {"status": "completed"}
    store.put("r1", Stored("alice", None, [{"type": "text", "text": "sys"}], turn, {"id": "r1", **done}))
    store.put("r2", Stored("alice", "r1", [], turn, {"id": "r2", **done}))
    assert store.conversation("alice", "r2") == ([{"type": "text", "text": "sys"}], turn + turn)
    assert store.conversation("bob", "r2") is None and store.get("bob", "r1") is None
    # A background response still running (or cancelled, failed) is no conversation yet.
    store.put("r0", Stored("alice", "r1", [], turn, {"id": "r0", "status": "in_progress"}))
    assert store.conversation("alice", "r0") is None and store.get("alice", "r0") is not None
    store.delete("alice", "r0")
    assert not store.delete("bob", "r1")
    store.put("r3", Stored("alice", "r2", [], turn, {"id": "r3", **done}))
    # over max_count the least recently used goes: r2 (reading r2's chain used r1 after it)
    store.put("r4", Stored("alice", None, [], turn, {"id": "r4", **done}))
    assert len(store) == 3 and store.get("alice", "r2") is None and store.get("alice", "r1") is not None
    assert store.conversation("alice", "r3") is None  # a link of its chain was dropped
    big = Stored(
        "alice", None, [], [{"role": "user", "content": [{"type": "text", "text": "x" * 20_000}]}], {}
    )
    store.put("big", big)
    assert store.get("alice", "big") is None  # alone over max_bytes: not kept
    assert store.delete("alice", "r4") and store.bytes > 0


@pytest.mark.parametrize(("stop", "status"), [("max_tokens", "incomplete"), ("end_turn", "completed")])
def test_a_call_cut_short_is_the_same_streamed_or_not(stop: str, status: str) -> None:
    """A call whose arguments are not whole JSON at the answer's end is
    ``incomplete`` when the token limit ended the answer (its end events
    wait for the message_delta), else ``completed``; its ``arguments`` are
    the fragments' text, streamed or not."""
    arguments = '{"k": "v", "n": 1'
    folded = {
        "content": [
            {"type": "thinking", "thinking": "why?", "signature": "sig"},
            {"type": "text", "text": "Hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"k": "v", "n": 1}},
        ],
        "stop_reason": stop,
        "usage": {**USAGE, "output_tokens": 9},
    }
    expected = response_of(folded, shape(), {2: arguments})
    assert expected["output"][2]["status"] == status and expected["output"][2]["arguments"] == arguments
    assert response_of(folded, shape())["output"][2]["status"] == "completed"  # its input is whole
    for args in splits(arguments):
        converter, stream = run(events(["Hi"], ["why?"], args, stop))
        assert stream[-1]["response"]["output"] == expected["output"]
        (done,) = [e for e in stream if e["type"] == "response.output_item.done" and e["output_index"] == 2]
        assert done["item"] == expected["output"][2]
        assert converter.content[-1]["input"] == {"k": "v", "n": 1}  # as the core's fold parses it


@pytest.mark.parametrize("last", ["text", "thinking"])
@pytest.mark.parametrize(("stop", "status"), [("max_tokens", "incomplete"), ("end_turn", "completed")])
def test_the_last_item_is_incomplete_when_the_token_limit_cut_it(last: str, stop: str, status: str) -> None:
    """An answer the token limit ended ends its last item unfinished: the
    message (or the reasoning, when the limit came while reasoning) is
    ``incomplete``, streamed or not, and the items before it ``completed``
    (found by a newcomer: the cut message said ``completed``)."""
    drop = {"text": (2,), "thinking": (1, 2)}[last]
    evs = [e for e in events(["Hel", "lo"], ["h", "m"], [], stop) if e.get("index") not in drop]
    kinds = ["thinking", "text"][: 3 - len(drop)]
    folded = {
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "text", "text": "Hello"},
        ][: len(kinds)],
        "stop_reason": stop,
        "usage": {**USAGE, "output_tokens": 9},
    }
    expected = response_of(folded, shape())
    assert [i["status"] for i in expected["output"]] == [*(["completed"] * (len(kinds) - 1)), status]
    _, stream = run(evs)
    assert stream[-1]["response"]["output"] == expected["output"]
    done = [e["item"] for e in stream if e["type"] == "response.output_item.done"]
    assert done == expected["output"]


def test_snapshot_and_stop_of_an_answer_cut_off() -> None:
    evs = events(["Hel", "lo"], ["hm"], ['{"a"', ": 1}"])
    converter, _ = run(evs[: evs.index({"type": "content_block_stop", "index": 1})])
    snapshot = converter.snapshot()
    assert snapshot["status"] == "in_progress" and converter.final is None
    assert [(i["type"], i["status"]) for i in snapshot["output"]] == [
        ("reasoning", "completed"),
        ("message", "in_progress"),
    ]
    assert snapshot["output"][1]["content"][0]["text"] == "Hello"
    *_, last = converter.stop("incomplete", {"reason": "client_disconnected"})
    final = converter.final
    assert final is not None and last["response"] == final and final["usage"] is None
    assert final["status"] == "incomplete" and final["incomplete_details"] == {
        "reason": "client_disconnected"
    }
    assert (
        final["output"][1]["status"] == "incomplete" and final["output"][1]["content"][0]["text"] == "Hello"
    )
    assert converter.content[-1] == {"type": "text", "text": "Hello"}
