"""The stream converter (Missive's Messages events -> ``chat.completion.chunk``)
chunk by chunk, and its result whatever way the deltas are split."""

from __future__ import annotations

import json
from typing import Any

import pytest

from missive.api import json_loads
from missive_openai_api.chat_stream import ChunkConverter, completion_of, usage_of

USAGE = {
    "input_tokens": 5,
    "cache_read_input_tokens": 7,
    "cache_creation_input_tokens": 1,
    "output_tokens": 0,
}


def events(
    text: list[str], thinking: list[str], args: list[str], stop: str = "tool_use"
) -> list[dict[str, Any]]:
    """A message with a thinking block, a text block and a tool call, its deltas split as given."""
    out: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": dict(USAGE),
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": t}}
            for t in thinking
        ),
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "ping"},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": t}}
            for t in text
        ),
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        },
        *(
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": a},
            }
            for a in args
        ),
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {**USAGE, "output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    return out


def run(evs: list[dict[str, Any]], include_usage: bool = True) -> list[dict[str, Any]]:
    converter = ChunkConverter(completion_id="chatcmpl-1", model="m", created=1, include_usage=include_usage)
    return [chunk for event in evs for chunk in converter.feed(event)]


def fold(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What a client assembles from the chunks (as the openai SDK's stream helper does)."""
    text, reasoning, calls, finish, usage = "", "", {}, None, None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"id": None, "name": "", "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] += call.get("function", {}).get("name") or ""
                slot["arguments"] += call.get("function", {}).get("arguments") or ""
            finish = choice["finish_reason"] or finish
    return {"text": text, "reasoning": reasoning, "calls": calls, "finish": finish, "usage": usage}


def test_chunk_by_chunk() -> None:
    chunks = run(events(["Hi", " there"], ["hm"], ['{"a"', ": 1}"]))
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-1" for c in chunks)
    deltas = [c["choices"][0]["delta"] if c["choices"] else None for c in chunks]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {"reasoning_content": "hm"},
        {"content": "Hi"},
        {"content": " there"},
        {
            "tool_calls": [
                {"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": ""}}
            ]
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
        {},
        None,
    ]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 7 + ["tool_calls"]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 13,
        "completion_tokens": 9,
        "total_tokens": 22,
        "prompt_tokens_details": {"cached_tokens": 7},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def test_without_include_usage_no_usage_anywhere() -> None:
    chunks = run(events(["x"], [], []), include_usage=False)
    assert all("usage" not in c and c["choices"] for c in chunks)


def splits(text: str) -> list[list[str]]:
    """Every split of ``text`` into two or three pieces (and none)."""
    out = [[text]]
    for i in range(1, len(text)):
        out.append([text[:i], text[i:]])
        for j in range(i + 1, len(text)):
            out.append([text[:i], text[i:j], text[j:]])
    return out


@pytest.mark.parametrize("stop", ["end_turn", "max_tokens", "tool_use", "stop_sequence"])
def test_every_split_gives_the_non_stream_completion(stop: str) -> None:
    text, reasoning, arguments = "Héllo 🌍!", "why?", '{"k": "v ü"}'
    folded = {  # the Message those events fold into (the non-streaming answer)
        "content": [
            {"type": "thinking", "thinking": reasoning, "signature": "sig"},
            {"type": "text", "text": text},
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": json.loads(arguments)},
        ],
        "stop_reason": stop,
        "usage": {**USAGE, "output_tokens": 9},
    }
    expected = completion_of(folded, completion_id="c", model="m", created=1)
    message = expected["choices"][0]["message"]
    for pieces in splits(text):
        for args in splits(arguments)[::7]:
            got = fold(run(events(pieces, [reasoning[:1], reasoning[1:]], args, stop)))
            assert got["text"] == message["content"] == text
            assert got["reasoning"] == message["reasoning_content"] == reasoning
            (call,) = got["calls"].values()
            assert call["id"] == message["tool_calls"][0]["id"] and call["name"] == "f"
            assert json.loads(call["arguments"]) == json_loads(
                message["tool_calls"][0]["function"]["arguments"]
            )
            assert got["finish"] == expected["choices"][0]["finish_reason"]
            assert got["usage"] == expected["usage"]


def test_finish_reason_mapping() -> None:
    for stop, finish in [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("stop_sequence", "stop"),
    ]:
        assert fold(run(events(["a"], [], [], stop)))["finish"] == finish


def test_text_only_completion_has_no_tool_calls_and_content_null_for_calls_only() -> None:
    done = completion_of(
        {
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"x": 1}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 2, "output_tokens": 3},
        },
        completion_id="c",
        model="m",
        created=1,
    )
    message = done["choices"][0]["message"]
    assert message["content"] is None and json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
        "x": 1
    }
    assert done["usage"] == usage_of({"input_tokens": 2, "output_tokens": 3})
    assert done["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
