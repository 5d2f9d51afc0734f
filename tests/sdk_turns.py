"""Helpers for tests of multi-turn SDK runs (threads, tool runners): what a
server captured (``server.capture_dir``), a reply's prompt size, and the
whole conversation each request of a thread stood for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def captured(captures: Path, since: int = 0) -> list[dict[str, Any]]:
    """The ``POST /v1/messages`` requests captured, oldest first, from the ``since``-th on."""
    records = [json.loads(p.read_text()) for p in sorted(captures.glob("*.json"))]
    return [r for r in records if r["path"] == "/v1/messages"][since:]


def prompt(message: Any) -> int:
    """A reply's whole prompt: input, cache read and cache creation tokens."""
    usage = message.usage
    return (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )


def as_param(message: Any) -> dict[str, Any]:
    """A reply as the assistant message a client sends back."""
    return {
        "role": "assistant",
        "content": [block.model_dump(exclude_none=True) for block in message.content],
    }


def whole_conversations(bodies: list[dict[str, Any]], replies: list[Any]) -> list[list[Any]]:
    """The whole conversation each request of one thread stood for: a
    create's messages, or the previous request's, its reply and a
    continue's new messages."""
    conversations: list[list[Any]] = []
    for i, body in enumerate(bodies):
        if (body.get("thread") or {}).get("type") == "continue":
            conversations.append([*conversations[-1], as_param(replies[i - 1]), *body["messages"]])
        else:
            conversations.append(list(body["messages"]))
    return conversations


def assert_counted_whole(
    client: Any, records: list[dict[str, Any]], replies: list[Any], *, cached: bool = False, **count: Any
) -> None:
    """Each of one thread's requests (``records``, captured) was answered
    with ``replies`` costing what ``count_tokens`` says of the whole
    conversation it stood for (``count``: the other count_tokens fields);
    with ``cached``, each after the first also read at least the previous
    prompt from the prefix cache."""
    bodies = [r["body"] for r in records]
    for i, (conversation, reply) in enumerate(
        zip(whole_conversations(bodies, replies), replies, strict=False)
    ):
        counted = client.beta.messages.count_tokens(messages=conversation, **count)
        assert prompt(reply) == counted.input_tokens, f"request {i}"
        if cached and i:
            assert reply.usage.cache_read_input_tokens >= prompt(replies[i - 1]), f"request {i}"
