"""Missive's answer (Messages events, or the folded ``Message``) in OpenAI's
Chat Completions shape.

The wire format is OpenAI's (API reference, "The chat completion object"
and "The chat completion chunk object"; the ``openai`` SDK's
``ChatCompletionChunk``): a stream of ``chat.completion.chunk`` objects,
each ``data: {...}`` on its own SSE event, ended by ``data: [DONE]``:

* the first chunk's delta holds ``role: "assistant"`` (and ``content: ""``);
* text deltas are ``delta.content``; reasoning (thinking) deltas
  ``delta.reasoning_content``, the field llama-server and vLLM send;
* a tool call starts with ``delta.tool_calls: [{index, id, type:
  "function", function: {name, arguments: ""}}]``; its argument fragments
  follow as ``{index, function: {arguments}}``; ``index`` counts the calls;
* the last choice chunk has an empty delta and ``finish_reason``
  (:data:`FINISH_REASONS`);
* with ``stream_options.include_usage`` every chunk carries ``usage: null``
  and one more chunk, with no choices, carries the usage.

Usage (:func:`usage_of`): ``prompt_tokens`` counts the whole prompt, cached
tokens included (Missive's ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens``), ``prompt_tokens_details.cached_tokens`` the
cached part.
"""

from __future__ import annotations

from typing import Any

from missive.api import json_dumps

__all__ = ["ChunkConverter", "FINISH_REASONS", "completion_of", "usage_of", "finish_reason_of"]

#: Missive's ``stop_reason`` -> OpenAI's ``finish_reason``.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "content_filter",
}


def finish_reason_of(stop_reason: str | None) -> str:
    return FINISH_REASONS.get(stop_reason or "end_turn", "stop")


def usage_of(usage: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's ``usage`` of a Messages ``usage``."""
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + (usage.get("cache_creation_input_tokens") or 0)
    completion = usage.get("output_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def completion_of(message: dict[str, Any], *, completion_id: str, model: str, created: int) -> dict[str, Any]:
    """The ``chat.completion`` of a folded ``Message``."""
    content = message.get("content") or []
    text = "".join(b["text"] for b in content if b.get("type") == "text")
    reasoning = "".join(b.get("thinking", "") for b in content if b.get("type") == "thinking")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json_dumps(b.get("input", {})).decode()},
        }
        for b in content
        if b.get("type") == "tool_use"
    ]
    reply: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning:
        reply["reasoning_content"] = reasoning
    if calls:
        reply["tool_calls"] = calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": finish_reason_of(message.get("stop_reason")),
                "logprobs": None,
            }
        ],
        "usage": usage_of(message.get("usage") or {}),
    }


class ChunkConverter:
    """Turns Missive's Messages events into ``chat.completion.chunk`` objects,
    one event at a time (:meth:`feed`); pings and events with nothing for
    OpenAI's format (a block's end, a signature) give none."""

    def __init__(self, *, completion_id: str, model: str, created: int, include_usage: bool = False) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self._calls: dict[int, int] = {}  # block index -> tool call index
        self._usage: dict[str, Any] = {}

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The chunks ``event`` gives (none, one, or two at the end)."""
        kind = event.get("type")
        if kind == "message_start":
            self._usage = dict(event["message"].get("usage") or {})
            return [self._chunk({"role": "assistant", "content": ""})]
        if kind == "content_block_start":
            block = event["content_block"]
            if block.get("type") == "tool_use":
                index = self._calls[event["index"]] = len(self._calls)
                call = {
                    "index": index,
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": ""},
                }
                return [self._chunk({"tool_calls": [call]})]
            if block.get("type") == "text" and block.get("text"):
                return [self._chunk({"content": block["text"]})]
            return []
        if kind == "content_block_delta":
            delta = event["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                return [self._chunk({"content": delta["text"]})]
            if dtype == "thinking_delta":
                return [self._chunk({"reasoning_content": delta["thinking"]})]
            if dtype == "input_json_delta" and event["index"] in self._calls:
                fragment = {
                    "index": self._calls[event["index"]],
                    "function": {"arguments": delta["partial_json"]},
                }
                return [self._chunk({"tool_calls": [fragment]})]
            return []
        if kind == "message_delta":
            self._usage = dict(event.get("usage") or self._usage)
            return [self._chunk({}, finish_reason_of(event["delta"].get("stop_reason")))]
        if kind == "message_stop" and self.include_usage:
            return [
                {
                    "id": self.completion_id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage_of(self._usage),
                }
            ]
        return []
