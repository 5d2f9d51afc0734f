"""The non-streaming ``Message``: the fold of the stream's events (contract section 3)."""

from __future__ import annotations

from typing import Any

from .blocks import Event
from .tool_use import input_object

__all__ = ["accumulate"]


def accumulate(events: list[Event]) -> dict[str, Any]:
    """Fold stream events into the non-streaming ``Message`` body."""
    message: dict[str, Any] = {}
    partial_json: dict[int, str] = {}
    for event in events:
        kind = event["type"]
        if kind == "message_start":
            message = {**event["message"], "content": []}
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            block = message["content"][event["index"]]
            delta = event["delta"]
            dtype = delta["type"]
            if dtype == "text_delta":
                block["text"] += delta["text"]
            elif dtype == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif dtype == "signature_delta":
                block["signature"] = delta["signature"]
            elif dtype == "input_json_delta":
                partial_json[event["index"]] = partial_json.get(event["index"], "") + delta["partial_json"]
            elif dtype == "compaction_delta":  # whole, as the SDK's accumulator takes it
                block["content"] = delta["content"]
                block["encrypted_content"] = delta.get("encrypted_content")
        elif kind == "content_block_stop":
            index = event["index"]
            if index in partial_json:
                raw = partial_json.pop(index)
                message["content"][index]["input"] = input_object(raw)
        elif kind == "message_delta":
            message["stop_reason"] = event["delta"]["stop_reason"]
            message["stop_sequence"] = event["delta"]["stop_sequence"]
            message["usage"] = dict(event["usage"])
            if "context_management" in event:
                message["context_management"] = event["context_management"]
    return message
