"""Chat completion stream chunks -> Missive generation events.

One :class:`ChunkTranslator` per answer. Wire format (OpenAI chat completions
streaming; vLLM ``serving_chat.py`` ``chat_completion_stream_generator``):

* a first chunk with ``delta: {role: "assistant", content: ""}``;
* ``delta.content`` text; ``delta.reasoning_content`` (vLLM, DeepSeek) or
  ``delta.reasoning`` (newer vLLM, OpenRouter, LM Studio) reasoning text;
* ``delta.tool_calls: [{index, id?, type?, function: {name?, arguments?}}]``:
  a call's first fragment carries ``id`` and ``name`` (vLLM's parsers send
  ``arguments: ""`` there), later ones ``index`` and argument fragments; the
  last chunk may carry the unstreamed rest of the arguments with the
  ``finish_reason``;
* a chunk with ``finish_reason`` (``stop``, ``length``, ``tool_calls``,
  ``content_filter``; vLLM also ``abort``);
* with ``stream_options.include_usage``, a last chunk with ``choices: []``
  and ``usage: {prompt_tokens, completion_tokens,
  prompt_tokens_details?: {cached_tokens}}``;
* ``data: [DONE]``; an error mid-stream is a chunk holding ``error`` (or
  vLLM < 0.10's ``{"object": "error", ...}``).

Tool-call arguments are buffered per call and validated as one JSON object
when the call is complete (its arguments parse as one object, other output
follows, or the stream finishes): backends' fragments are not always valid
prefixes (vLLM's ``required`` mode filters brackets; some servers send the
whole call at once), and Missive's fragments must concatenate to exactly one
object. Malformed arguments are a 502, never repaired. Calls are emitted in
``index`` order however the backend interleaves their fragments (see
:class:`ChunkTranslator`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from missive.api import (
    BadGatewayError,
    Finished,
    GenerationEvent,
    StopReason,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

__all__ = ["ChunkTranslator", "STOP_REASONS", "Usage"]

log = logging.getLogger("missive.openai")

#: OpenAI ``finish_reason`` -> Anthropic ``stop_reason``. ``tool_calls`` is
#: ``tool_use`` only if a call was emitted (the core sets ``tool_use`` whenever
#: one was, whatever the backend says: vLLM's named tool choice says ``stop``).
STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "eos": "end_turn",
    "length": "max_tokens",
    "tool_calls": "end_turn",
    "function_call": "end_turn",
    "content_filter": "refusal",
}


@dataclass
class Usage:
    """The backend's final usage: ``prompt_tokens`` (all prompt tokens),
    ``cached_tokens`` (of those, served from the prefix cache), ``completion_tokens``."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0


@dataclass
class _Call:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)
    fragments: int = 0  # argument fragments received, empty ones included (a token estimate)
    emitted: bool = False

    def complete(self) -> bool:
        """The arguments so far are one whole JSON object (nothing valid can
        follow the closing brace of a top-level object, so the call is done)."""
        if not self.arguments or not self.arguments[-1].rstrip().endswith("}"):
            return False  # cheap test first: a long argument streams in thousands of fragments
        try:
            return isinstance(json.loads(_paired("".join(self.arguments))), dict)
        except ValueError:
            return False


class ChunkTranslator:
    """Feed parsed chunks with :meth:`feed`, then call :meth:`finish`.

    Tool calls are emitted whole and strictly one after another, in the
    order of their ``index``: a call is emitted once its name is known and
    its arguments form one JSON object, and only after every call of a
    lower index; text, reasoning or the end of the stream emit whatever is
    left. So backends that open several calls in one chunk and then
    interleave their argument fragments (0, 1, 0, 1), or send the name or
    id only in a later fragment, give the same blocks as backends that
    stream calls one by one. A fragment with a new ``id`` on an index whose
    call is already complete starts a new call (servers that number every
    call ``0``).

    Args:
        tool_choice: the Anthropic ``tool_choice`` mode of the request
            (``auto``, ``any``, ``tool``, ``none``) and ``forced_name`` for
            ``tool``: a call under ``none`` or to another tool under ``tool``
            means the backend did not enforce the choice: a 502.
    """

    def __init__(self, *, tool_choice: str | None = None, forced_name: str | None = None) -> None:
        self.tool_choice = tool_choice
        self.forced_name = forced_name
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.calls_emitted = 0
        self._calls: dict[int, _Call] = {}  # by order key: the wire index, or a later one for a reused index
        self._current: dict[int, int] = {}  # wire index -> order key of the call it continues

    def feed(self, chunk: Any) -> list[GenerationEvent]:
        """Events of one parsed ``data:`` chunk.

        Raises:
            BadGatewayError: not a chunk object, or tool arguments that are not
                one JSON object.
        """
        if not isinstance(chunk, dict):
            raise BadGatewayError(f"malformed chunk from the backend: {json.dumps(chunk)[:200]}")
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = _usage(usage)
        events: list[GenerationEvent] = []
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise BadGatewayError("malformed chunk from the backend: choices is not a list")
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # Missive asks for one choice
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise BadGatewayError("malformed chunk from the backend: delta is not an object")
            events.extend(self._delta(delta))
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return events

    def _delta(self, delta: dict[str, Any]) -> list[GenerationEvent]:
        events: list[GenerationEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.extend(self._flush())
            events.append(ThinkingDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.extend(self._flush())
            events.append(TextDelta(content))
        calls = delta.get("tool_calls")
        if calls:  # ``[]`` on content chunks (some servers) is nothing
            if not isinstance(calls, list):
                raise BadGatewayError("malformed chunk from the backend: tool_calls is not a list")
            for fragment in calls:
                self._tool_fragment(fragment)
            events.extend(self._ready())
        return events

    def _tool_fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise BadGatewayError("malformed tool call fragment from the backend")
        index = fragment.get("index", 0)
        if not isinstance(index, int) or isinstance(index, bool):
            raise BadGatewayError("malformed tool call fragment from the backend: index is not an integer")
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise BadGatewayError("malformed tool call fragment from the backend: function is not an object")
        new_id = str(fragment["id"]) if fragment.get("id") else None
        key = self._current.get(index)
        call = self._calls.get(key) if key is not None else None
        if call is None or (
            new_id is not None and call.id is not None and new_id != call.id and call.complete()
        ):
            key = index if call is None and index not in self._calls else max([*self._calls, index]) + 1
            call = self._calls[key] = _Call(index)
            self._current[index] = key
        if new_id is not None and call.id is None:
            call.id = new_id
        if function.get("name") and call.name is None:
            call.name = str(function["name"])
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send the object itself
            arguments = json.dumps(arguments, ensure_ascii=False)
        elif arguments is not None and not isinstance(arguments, str):
            raise BadGatewayError("malformed tool call fragment from the backend: arguments is not a string")
        if arguments is None:
            return
        call.fragments += 1
        if not arguments:
            return
        if call.emitted:
            if arguments.strip():
                raise BadGatewayError(
                    f"the backend sent more arguments for tool '{call.name}' after its JSON object was "
                    "complete"
                )
            return
        call.arguments.append(arguments)

    def _ready(self) -> list[GenerationEvent]:
        """Emit, in order, the calls that are complete, up to the first that is
        not or has not been seen (index 1 waits for index 0)."""
        events: list[GenerationEvent] = []
        for key in range(len(self._calls)):
            call = self._calls.get(key)
            if call is None:
                break  # a lower index has not been seen yet: it may still come
            if call.emitted:
                continue
            if not (call.name and call.complete()):
                break
            events.extend(self._emit(call))
        return events

    def _flush(self) -> list[GenerationEvent]:
        """Emit every call not yet emitted, validated, in order."""
        events: list[GenerationEvent] = []
        for key in sorted(self._calls):
            call = self._calls[key]
            if not call.emitted:
                events.extend(self._emit(call))
        return events

    def _emit(self, call: _Call) -> list[GenerationEvent]:
        call.emitted = True
        if not call.name:
            raise BadGatewayError(
                f"the backend sent a tool call (index {call.index}) without a function name"
            )
        raw = _paired("".join(call.arguments)).strip()
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                raise BadGatewayError(
                    f"the backend sent malformed JSON arguments for tool '{call.name}': {raw[:200]!r}"
                ) from None
            if not isinstance(parsed, dict):
                raise BadGatewayError(
                    f"the backend sent tool arguments for '{call.name}' that are not a JSON object: "
                    f"{raw[:200]!r}"
                )
        if self.tool_choice == "none":
            raise BadGatewayError(f"the backend called tool '{call.name}' although tool_choice was none")
        if self.forced_name is not None and call.name != self.forced_name:
            raise BadGatewayError(
                f"the backend called tool '{call.name}' although tool_choice named '{self.forced_name}'"
            )
        self.calls_emitted += 1
        events: list[GenerationEvent] = [ToolCallStart(name=call.name, id=call.id)]
        if raw:
            events.append(ToolCallDelta(raw, tokens=call.fragments))
        events.append(ToolCallEnd())
        return events

    def finish(self, *, ended_cleanly: bool) -> list[GenerationEvent]:
        """The remaining calls and :class:`Finished`.

        Args:
            ended_cleanly: the stream ended with ``[DONE]`` or at least a
                ``finish_reason``.

        Raises:
            BadGatewayError: the stream stopped before a ``finish_reason``;
                vLLM's ``abort``; a failed tool-call validation.
        """
        if not ended_cleanly or self.finish_reason is None:
            raise BadGatewayError("the backend closed the stream before the answer finished")
        events = self._flush()
        reason = self.finish_reason
        if reason == "abort":
            raise BadGatewayError("the backend aborted the generation")
        stop_reason = STOP_REASONS.get(reason)
        if stop_reason is None:
            log.warning("unknown finish_reason %r from the backend; reporting end_turn", reason)
            stop_reason = "end_turn"
        if self.calls_emitted and stop_reason == "end_turn":
            stop_reason = "tool_use"
        usage = self.usage
        if usage is None:
            events.append(Finished(stop_reason))
        else:
            events.append(
                Finished(
                    stop_reason,
                    output_tokens=usage.completion_tokens,
                    input_tokens=usage.prompt_tokens - usage.cached_tokens,
                    cache_read_input_tokens=usage.cached_tokens,
                )
            )
        return events


def _paired(text: str) -> str:
    """``text`` with surrogate halves joined into their character: a JSON
    string escape split between two fragments (``"\\ud83d"`` then
    ``"\\ude00"``) decodes as two lone surrogates, which cannot be encoded
    for the client. Halves with no partner become U+FFFD."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _usage(raw: dict[str, Any]) -> Usage:
    def number(value: Any, name: str) -> int:
        if not isinstance(value, int) or value < 0:
            raise BadGatewayError(f"malformed usage from the backend: {name} = {value!r}")
        return value

    details = raw.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = number(raw.get("prompt_tokens"), "prompt_tokens")
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=number(raw.get("completion_tokens", 0), "completion_tokens"),
        cached_tokens=min(prompt, number(cached, "cached_tokens")) if cached is not None else 0,
    )
