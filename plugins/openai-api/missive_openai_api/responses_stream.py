"""Missive's answer (Messages events, or the folded ``Message``) as OpenAI's
Responses API ``response`` object and its stream events.

The wire format is OpenAI's (API reference, "The response object" and
"Streaming events"; the ``openai`` SDK's ``Response`` and
``ResponseStreamEvent`` types). Each content block of the answer is one
output item, in order:

* a ``thinking`` block: a ``reasoning`` item whose ``content`` is one
  ``reasoning_text`` part (the raw reasoning, as OpenAI's open-weight models
  give it) and whose ``summary`` is empty; when the request asks for a
  summary (``reasoning.summary`` ``auto``, ``concise`` or ``detailed``),
  ``summary`` is one ``summary_text`` part holding that same text instead
  (a local model writes no summary of its reasoning: the reasoning itself
  is the most faithful one Missive has) and ``content`` is empty; its
  ``encrypted_content`` is the
  block's signature when the request's ``include`` asks for
  ``reasoning.encrypted_content``, so a client that keeps no state
  (``store: false``) can send the item back and the model sees its reasoning
  again (:mod:`.responses_request`);
* a ``text`` block: a ``message`` item (``role: "assistant"``) with one
  ``output_text`` part;
* a ``tool_use`` block: a ``function_call`` item (``call_id`` is the block's
  id, ``arguments`` the JSON text); a call of a namespaced function names
  it by ``namespace`` and ``name``, as OpenAI's item does
  (``ResponseFunctionToolCall.namespace``);
* where web search was offered as the server tool, a ``server_tool_use``
  block and its ``web_search_tool_result``: a ``web_search_call`` item
  (:mod:`.responses_search`).

A stream is SSE events ``event: <type>`` / ``data: {...}``, each with a
``sequence_number`` counting from 0: ``response.created``,
``response.in_progress``; per item ``response.output_item.added``, for a
message or reasoning item ``response.content_part.added``, the deltas
(``response.output_text.delta``, ``response.reasoning_text.delta``,
``response.function_call_arguments.delta``), their ``.done`` event,
``response.content_part.done``, ``response.output_item.done`` (a reasoning
item summarised: ``response.reasoning_summary_part.added``,
``response.reasoning_summary_text.delta`` and ``.done``,
``response.reasoning_summary_part.done``, each with its ``summary_index``,
as the SDK's ``ResponseReasoningSummary*Event`` types have them); and last
``response.completed`` (``response.incomplete`` when the answer stopped at
``max_output_tokens``), which holds the whole response, or
``response.failed`` for an error after the stream started.

Usage (:func:`usage_of`): ``input_tokens`` counts the whole prompt, cached
tokens included, ``input_tokens_details.cached_tokens`` the cached part;
``output_tokens_details.reasoning_tokens`` the part of ``output_tokens``
the model spent reasoning (:data:`.chat_stream.REASONING_TOKENS`, which
the door adds to the Messages usage from ``Answer.thinking_tokens``; 0 when
it did not reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from missive.api import MissiveError

from .calls import CUT_STOPS, CUT_WHOLE, arguments_of, cut_item, input_of, is_whole
from .chat_stream import REASONING_TOKENS
from .errors import envelope, status_of
from .responses_search import SearchEvents, call_item, sources_of

__all__ = [
    "ResponseConverter",
    "ResponseShape",
    "response_of",
    "usage_of",
    "status_of_stop",
    "assistant_turn",
    "CLIENT_GONE",
]

#: Missive's ``stop_reason`` -> the ``incomplete_details.reason`` of an incomplete response.
INCOMPLETE = {
    "max_tokens": "max_output_tokens",
    "model_context_window_exceeded": "max_output_tokens",
    "refusal": "content_filter",
}


#: The ``incomplete_details`` of a streamed response whose client went before
#: its end: the answer stopped there (as a ``POST /v1/messages`` stream's
#: does), and the response is kept as far as it got (``routes``).
CLIENT_GONE = {"reason": "client_disconnected"}


def status_of_stop(stop_reason: str | None) -> tuple[str, dict[str, Any] | None]:
    """``(status, incomplete_details)`` of an answer that stopped for ``stop_reason``."""
    reason = INCOMPLETE.get(stop_reason or "end_turn")
    return ("incomplete", {"reason": reason}) if reason else ("completed", None)


def usage_of(usage: dict[str, Any]) -> dict[str, Any]:
    """The Responses ``usage`` of a Messages ``usage``."""
    cached = usage.get("cache_read_input_tokens") or 0
    prompt = (usage.get("input_tokens") or 0) + cached + (usage.get("cache_creation_input_tokens") or 0)
    output = usage.get("output_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": usage.get(REASONING_TOKENS) or 0},
        "total_tokens": prompt + output,
    }


@dataclass
class ResponseShape:
    """What the ``response`` object holds besides the answer.

    Attributes:
        response_id: ``resp_...``.
        created_at: Unix seconds.
        model: the model id the client sent.
        echo: the request's parameters as the response object repeats them
            (``instructions``, ``tools``, ``tool_choice``, ``text``...).
        encrypted_reasoning: ``include`` has ``reasoning.encrypted_content``.
        namespaced: a Messages tool name -> ``(namespace, name)`` of the
            namespaced function it offers (:mod:`.responses_tools`).
        summary: the request asked for reasoning summaries (``reasoning.summary``).
        web_search: web search was offered as the server tool (:mod:`.responses_search`);
            ``search_sources``: ``include`` asks for its ``action.sources``.
    """

    response_id: str
    created_at: int
    model: str
    echo: dict[str, Any] = field(default_factory=dict)
    encrypted_reasoning: bool = False
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    summary: bool = False
    web_search: bool = False
    search_sources: bool = False

    def item_id(self, prefix: str, index: int) -> str:
        """The id of output item ``index`` (``msg_``, ``fc_``, ``rs_``)."""
        return f"{prefix}_{self.response_id.removeprefix('resp_')}{index:03d}"

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        *,
        incomplete: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The ``response`` object."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": output,
            "usage": None if usage is None else usage_of(usage),
            **self.echo,
        }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _item(shape: ResponseShape, index: int, block: dict[str, Any], status: str) -> dict[str, Any] | None:
    """The output item of a content block (``tool_use`` with ``arguments``
    as text), or None for a block with nothing in OpenAI's format."""
    kind = block.get("type")
    if kind == "text":
        content = [] if status == "in_progress" else [_text_part(block.get("text", ""))]
        return {
            "id": shape.item_id("msg", index),
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }
    if kind == "thinking":
        done = status != "in_progress"
        signature = block.get("signature") or None
        kind = "summary_text" if shape.summary else "reasoning_text"
        parts = [{"type": kind, "text": block.get("thinking", "")}] if done else []
        return {
            "id": shape.item_id("rs", index),
            "type": "reasoning",
            "status": status,
            "summary": parts if shape.summary else [],
            "content": [] if shape.summary else parts,
            "encrypted_content": signature if done and shape.encrypted_reasoning else None,
        }
    if kind == "tool_use":
        item = {
            "id": shape.item_id("fc", index),
            "type": "function_call",
            "status": status,
            "call_id": block["id"],
            "name": block["name"],
            "arguments": block.get("arguments", "") if status != "in_progress" else "",
        }
        if block["name"] in shape.namespaced:
            item["namespace"], item["name"] = shape.namespaced[block["name"]]
        return item
    return None


def _is_search(block: dict[str, Any]) -> bool:
    return block.get("type") == "server_tool_use" and block.get("name") == "web_search"


def response_of(
    message: dict[str, Any], shape: ResponseShape, raw: Mapping[int, str] | None = None
) -> dict[str, Any]:
    """The ``response`` object of a folded ``Message``; ``raw``: the text of
    each call's argument fragments by block index (:class:`.calls.RawArguments`),
    its ``arguments`` as a stream sends them, else each call's ``input`` as
    JSON; the item the answer's end cut is ``incomplete`` (:func:`.calls.cut_item`)."""
    output: list[dict[str, Any]] = []
    calls: dict[str, dict[str, Any]] = {}
    raw = raw or {}
    content = message.get("content") or []
    cut = cut_item(content, message.get("stop_reason"), raw)
    for index, block in enumerate(content):
        if shape.web_search and _is_search(block):
            sources: list[dict[str, Any]] | None = [] if shape.search_sources else None
            call = call_item(shape.item_id("ws", len(output)), block, "completed", sources)
            calls[block["id"]] = call
            output.append(call)
            continue
        if shape.web_search and block.get("type") == "web_search_tool_result":
            found = calls.get(block.get("tool_use_id", ""))
            if found is not None and shape.search_sources:
                found["action"]["sources"] = sources_of(block)
            continue
        if block.get("type") == "tool_use":
            block = {**block, "arguments": arguments_of(block, raw.get(index))}
        item = _item(shape, len(output), block, "incomplete" if index == cut else "completed")
        if item is not None:
            output.append(item)
    status, incomplete = status_of_stop(message.get("stop_reason"))
    return shape.response(status, output, message.get("usage") or {}, incomplete=incomplete)


def assistant_turn(content: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The Messages assistant turn a later ``previous_response_id`` request
    sees for ``content`` (the answer's blocks OpenAI's format shows), or
    None when there is none."""
    blocks = []
    for block in content:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            blocks.append({"type": "text", "text": block["text"]})
        elif kind == "thinking" and block.get("signature"):
            blocks.append(
                {"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]}
            )
        elif kind in ("tool_use", "server_tool_use"):
            blocks.append({"type": kind, "id": block["id"], "name": block["name"], "input": block["input"]})
        elif kind == "web_search_tool_result":
            blocks.append(block)
    return {"role": "assistant", "content": blocks} if blocks else None


def failed_error(error: MissiveError) -> dict[str, Any]:
    """The ``response.error`` of a failure (``code``, ``message``)."""
    code = envelope(error)["error"]["code"]
    if status_of(error) >= 500 or code is None:
        code = "server_error" if status_of(error) >= 500 else "invalid_prompt"
    if status_of(error) == 429:
        code = "rate_limit_exceeded"
    return {"code": code, "message": error.message}


class ResponseConverter:
    """Turns Missive's Messages events into Responses stream events, one
    event at a time (:meth:`feed`), numbering them; :attr:`final` is the
    last ``response`` object sent and :attr:`content` the answer's blocks
    (as a folded ``Message`` holds them), for the store."""

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.content: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None
        self._items: dict[int, tuple[int, dict[str, Any]]] = {}  # block index -> (output index, block)
        self._usage: dict[str, Any] = {}
        self._stop_reason: str | None = None
        self._held: tuple[int, dict[str, Any]] | None = None  # a call that may be cut: its end waits
        self._search = SearchEvents(self._event, self.output, lambda index: shape.item_id("ws", index))
        self._search.sources = shape.search_sources

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _start(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        kind = block.get("type")
        if self.shape.web_search and _is_search(block):
            return self._search.start(index, block)
        if self.shape.web_search and kind == "web_search_tool_result":
            self.content.append(block)  # arrives whole
            return self._search.result(block)
        if kind == "tool_use":
            block = {"type": "tool_use", "id": block["id"], "name": block["name"], "arguments": ""}
        elif kind == "text":
            block = {"type": "text", "text": ""}
        elif kind == "thinking":
            block = {"type": "thinking", "thinking": "", "signature": ""}
        output_index = len(self.output)
        item = _item(self.shape, output_index, block, "in_progress")
        if item is None:
            return []
        self.output.append(item)
        self._items[index] = (output_index, block)
        events = [self._event("response.output_item.added", output_index=output_index, item=item)]
        where = {"item_id": item["id"], "output_index": output_index, "content_index": 0}
        if kind == "text":
            events.append(self._event("response.content_part.added", **where, part=_text_part("")))
        elif kind == "thinking" and self.shape.summary:
            part = {"type": "summary_text", "text": ""}
            where = {"item_id": item["id"], "output_index": output_index, "summary_index": 0}
            events.append(self._event("response.reasoning_summary_part.added", **where, part=part))
        elif kind == "thinking":
            part = {"type": "reasoning_text", "text": ""}
            events.append(self._event("response.content_part.added", **where, part=part))
        return events

    def _delta(self, index: int, delta: dict[str, Any]) -> list[dict[str, Any]]:
        if delta.get("type") == "input_json_delta" and self._search.delta(index, delta["partial_json"]):
            return []
        if index not in self._items:
            return []
        output_index, block = self._items[index]
        item_id = self.output[output_index]["id"]
        where = {"item_id": item_id, "output_index": output_index}
        dtype = delta.get("type")
        if dtype == "text_delta" and block["type"] == "text" and delta["text"]:
            block["text"] += delta["text"]
            return [
                self._event(
                    "response.output_text.delta", **where, content_index=0, delta=delta["text"], logprobs=[]
                )
            ]
        if dtype == "thinking_delta" and block["type"] == "thinking" and delta["thinking"]:
            block["thinking"] += delta["thinking"]
            if self.shape.summary:
                kind, at = "response.reasoning_summary_text.delta", {"summary_index": 0}
            else:
                kind, at = "response.reasoning_text.delta", {"content_index": 0}
            return [self._event(kind, **where, **at, delta=delta["thinking"])]
        if dtype == "signature_delta" and block["type"] == "thinking":
            block["signature"] += delta["signature"]
        elif dtype == "input_json_delta" and block["type"] == "tool_use" and delta["partial_json"]:
            block["arguments"] += delta["partial_json"]
            return [
                self._event("response.function_call_arguments.delta", **where, delta=delta["partial_json"])
            ]
        return []

    def _stop(self, index: int) -> list[dict[str, Any]]:
        searched, call = self._search.stop(index)
        if call is not None:
            self.content.append(call)
            return searched
        if index not in self._items:
            return []
        output_index, block = self._items.pop(index)
        if block["type"] in CUT_WHOLE or (
            block["type"] == "tool_use" and not is_whole(block["arguments"] or "{}")  # as arguments_of
        ):
            # cut if the answer ends here at its token limit (.calls.cut_item):
            # known at the next block or the message_delta, which release it (_release)
            events = self._release("completed")
            self._held = (output_index, block)
            return events
        return self._done(output_index, block, "completed")

    def _release(self, status: str) -> list[dict[str, Any]]:
        """The end events of the call held by :meth:`_stop`, with ``status``."""
        if self._held is None:
            return []
        (output_index, block), self._held = self._held, None
        return self._done(output_index, block, status)

    def _done(self, output_index: int, block: dict[str, Any], status: str) -> list[dict[str, Any]]:
        """The end events of an item (``status``: ``completed``, ``incomplete``)."""
        if block["type"] == "tool_use" and not block["arguments"]:
            block["arguments"] = "{}"
        item = _item(self.shape, output_index, block, status)
        assert item is not None
        self.output[output_index] = item
        where = {"item_id": item["id"], "output_index": output_index}
        events = []
        if block["type"] == "text":
            part = item["content"][0]
            events += [
                self._event(
                    "response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[]
                ),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
            self.content.append(block)
        elif block["type"] == "thinking" and self.shape.summary:
            part, at = item["summary"][0], {**where, "summary_index": 0}
            events += [
                self._event("response.reasoning_summary_text.done", **at, text=part["text"]),
                self._event("response.reasoning_summary_part.done", **at, part=part),
            ]
            self.content.append(block)
        elif block["type"] == "thinking":
            part = item["content"][0]
            events += [
                self._event("response.reasoning_text.done", **where, content_index=0, text=part["text"]),
                self._event("response.content_part.done", **where, content_index=0, part=part),
            ]
            self.content.append(block)
        else:
            events.append(
                self._event("response.function_call_arguments.done", **where, arguments=block["arguments"])
            )
            args = input_of(block["arguments"])
            self.content.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": args})
        events.append(self._event("response.output_item.done", output_index=output_index, item=item))
        return events

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The stream events ``event`` gives (none, one or several)."""
        kind = event.get("type")
        if kind == "message_start":
            self._usage = dict(event["message"].get("usage") or {})
            response = self.shape.response("in_progress", [], None)
            return [
                self._event("response.created", response=response),
                self._event("response.in_progress", response=response),
            ]
        if kind == "content_block_start":
            block = event["content_block"]
            events = [*self._release("completed"), *self._start(event["index"], block)]
            if block.get("type") == "text" and block.get("text"):
                events += self._delta(event["index"], {"type": "text_delta", "text": block["text"]})
            return events
        if kind == "content_block_delta":
            return self._delta(event["index"], event["delta"])
        if kind == "content_block_stop":
            return self._stop(event["index"])
        if kind == "message_delta":
            self._usage = {**self._usage, **(event.get("usage") or {})}
            self._stop_reason = event["delta"].get("stop_reason")
            return self._release("incomplete" if self._stop_reason in CUT_STOPS else "completed")
        if kind == "message_stop":
            events = [e for index in list(self._items) for e in self._stop(index)]
            events += self._release("incomplete" if self._stop_reason in CUT_STOPS else "completed")
            status, incomplete = status_of_stop(self._stop_reason)
            self.final = self.shape.response(status, list(self.output), self._usage, incomplete=incomplete)
            return [*events, self._event(f"response.{status}", response=self.final)]
        return []

    def snapshot(self) -> dict[str, Any]:
        """The response as it stands while the answer runs: the items ended,
        and those still written with what they hold so far, ``in_progress``."""
        output = list(self.output)
        open_items = [*self._items.values(), *([self._held] if self._held else [])]
        for output_index, block in open_items:
            item = _item(self.shape, output_index, block, "completed")
            if item is not None:
                output[output_index] = {**item, "status": "in_progress"}
        return self.shape.response("in_progress", output, None)

    def stop(self, status: str, incomplete: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """End an answer stopped before its end (its client gone: ``incomplete``;
        a background response cancelled: ``cancelled``): the items still
        open end ``incomplete``, and :attr:`final` is the response as it
        stands, with ``status`` and no ``usage`` (the answer's count ends
        with it). The events that would end it (no one reads them)."""
        events = [*self._release("incomplete")]
        for index in list(self._items):
            output_index, block = self._items.pop(index)
            events += self._done(output_index, block, "incomplete")
        self.final = self.shape.response(status, list(self.output), None, incomplete=incomplete)
        return [*events, self._event(f"response.{status}", response=self.final)]

    def fail(self, error: MissiveError) -> list[dict[str, Any]]:
        """The last event of a stream that failed with ``error``."""
        self.final = self.shape.response("failed", list(self.output), self._usage, error=failed_error(error))
        return [self._event("response.failed", response=self.final)]
