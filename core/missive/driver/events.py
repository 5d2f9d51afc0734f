"""Generation events: the one stream a driver produces.

A driver's :meth:`~missive.driver.interface.Driver.generate` yields these; the core's
:mod:`missive.messages.stream` turns the same stream into SSE events or into a
non-streaming ``Message``, so the two can never drift.

Order a driver must follow:

1. exactly one :class:`Started` first, as soon as the prompt is tokenized and
   before any slow work (prefill, queueing), carrying the real prompt size;
2. any number of :class:`TextDelta`, :class:`ThinkingDelta` and tool call events
   (:class:`ToolCallStart`, then :class:`ToolCallDelta` fragments, then
   :class:`ToolCallEnd`);
3. optionally :class:`Finished` with the stop reason and final usage.

Errors are raised as :class:`~missive.protocol.errors.MissiveError`. A driver raising
before ``Started`` produces an HTTP error status; after it, an SSE ``error`` event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Started",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallStart",
    "ToolCallDelta",
    "ToolCallEnd",
    "Finished",
    "GenerationEvent",
    "StopReason",
]

StopReason = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "model_context_window_exceeded", "refusal"
]


@dataclass(frozen=True, slots=True)
class Started:
    """Prompt accepted.

    Attributes:
        input_tokens: uncached prompt tokens (the API's ``input_tokens``).
        cache_read_input_tokens: prompt tokens served from a reused prefix.
        cache_creation_input_tokens: tokens written to a cache (0 for automatic
            prefix caching, which has no separate write charge).
    """

    input_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Answer text. ``tokens``: output tokens this piece accounts for."""

    text: str
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """Reasoning text, shown as a thinking block."""

    thinking: str
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """A tool call begins; ``id`` None lets the core assign ``toolu_...``."""

    name: str
    id: str | None = None
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of the call's JSON arguments (fragments concatenate to one object)."""

    partial_json: str
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """The current tool call is complete."""

    tokens: int = 0


@dataclass(frozen=True, slots=True)
class Finished:
    """Generation ended.

    Attributes:
        stop_reason: why; ``tool_use`` is set by the core whenever a call was
            emitted, whatever the driver says.
        output_tokens: total output tokens if the driver knows them exactly;
            None lets the core use the sum of the deltas' ``tokens``.
        input_tokens, cache_read_input_tokens, cache_creation_input_tokens:
            corrected prompt usage, when the backend reports the exact split
            only at the end (a remote server's ``usage`` chunk: cached prefix
            tokens, or an exact count where ``Started`` carried an estimate).
            None keeps the :class:`Started` value. ``message_start`` has
            already been sent, so the correction appears in ``message_delta``
            (and in the non-streaming body, which is folded from it).
    """

    stop_reason: StopReason = "end_turn"
    output_tokens: int | None = None
    input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


GenerationEvent = Started | TextDelta | ThinkingDelta | ToolCallStart | ToolCallDelta | ToolCallEnd | Finished
