"""Client tool calls: ``tool_use`` blocks and their checks.

* a call opens a ``tool_use`` block (its id wrapped for the client,
  :func:`missive.protocol.ids.client_tool_id`), its arguments are
  ``input_json_delta`` fragments as the model writes them;
* a complete call whose input breaks its tool's ``input_schema`` is logged
  and returned as generated (:mod:`missive.tools.validate`); so is an answer
  that breaks ``output_config.format``;
* with ``disable_parallel_tool_use`` generation stops after the first call
  (the stream's loop, :mod:`.message`);
* a model that repeats a call it already made ends the answer before the
  repeat (:func:`unrepeated`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from pydantic_core import from_json

from ...driver.events import GenerationEvent, ToolCallDelta, ToolCallEnd, ToolCallStart
from ...driver.interface import GenerationRequest
from ...tools.validate import parsed, schema_violation

__all__ = ["input_object", "check_call", "check_structured_output", "unrepeated"]

log = logging.getLogger("missive.pipeline")


def input_object(raw: str) -> Any:
    """A tool_use block's ``input`` from its concatenated ``partial_json``.

    Parsed as the official SDK's stream accumulator parses the buffer
    (``anthropic`` ``lib/streaming/_messages.py``: jiter's ``from_json`` with
    ``partial_mode=True``; pydantic-core's ``from_json(allow_partial=True)``
    is the same jiter parser), so a non-streamed answer equals what
    ``get_final_message()`` builds from the stream (contract section 4:
    stream and non-stream must be equivalent): a complete call is its
    object; a call cut off by ``max_tokens`` keeps the members written in
    full (``{"city": "Paris", "unit": "cel`` is ``{"city": "Paris"}``), an
    unfinished string or number left out. No fragment, or text that is not
    JSON even cut short, is ``{}`` (where the SDK raises).
    """
    if not raw.strip():
        return {}
    try:
        return from_json(raw, allow_partial=True)
    except ValueError:
        return {}


def check_call(request: GenerationRequest, name: str, fragments: list[str]) -> None:
    """Log a complete tool_use input that breaks its tool's input_schema;
    the call is returned as generated."""
    tool = next((t for t in request.tools if t.name == name), None)
    if tool is None:
        return
    problem = schema_violation(tool.input_schema, input_object("".join(fragments)))
    if problem is not None:
        log.warning(
            "%s: tool_use '%s' input does not match its input_schema: %s", request.request_id, name, problem
        )


def check_structured_output(request: GenerationRequest, text: str) -> None:
    """Log a structured-output answer (``output_config.format``) that is
    not JSON valid against its schema."""
    schema = request.request.output_format_schema()
    if schema is None:
        return
    problem = schema_violation(schema, parsed(text))
    if problem is not None:
        log.warning("%s: the answer does not match output_config.format: %s", request.request_id, problem)


def _canonical(raw: str) -> str:
    """A call's arguments in one spelling (keys sorted, no spaces), so the
    same input written twice compares equal; the text itself if not JSON."""
    try:
        return json.dumps(json.loads(raw or "{}"), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return raw


async def unrepeated(
    source: AsyncIterator[GenerationEvent], request: GenerationRequest, count: Callable[[int], None]
) -> AsyncGenerator[GenerationEvent, None]:
    """``source`` until the model repeats a tool call it already made.

    A small model forced to call a tool (``tool_choice`` ``any``/``tool``
    with parallel calls allowed) may write the same call again and again
    until ``max_tokens``: the answer would then end with ``max_tokens``
    and a client that runs tools on ``stop_reason: "tool_use"`` would run
    none. Every call after the first is therefore held until it is
    complete; one with the same name and the same input as an earlier
    call of this message ends the answer there (``tool_use``), dropped
    (its tokens still count as output: ``count``). A held call cut off by
    the end of the stream is passed on as it came. Server tool calls pass
    through.
    """
    seen: set[tuple[str, str]] = set()
    current: tuple[str, list[str]] | None = None  # a call passing through: name, arguments
    held: list[GenerationEvent] | None = None
    server = {t.name for t in request.tools if t.server}
    try:
        async for event in source:
            if held is not None:
                held.append(event)
                if not isinstance(event, ToolCallEnd):
                    continue
                start = held[0]
                assert isinstance(start, ToolCallStart)
                args = "".join(e.partial_json for e in held if isinstance(e, ToolCallDelta))
                key = (start.name, _canonical(args))
                if key in seen:
                    count(
                        sum(
                            e.tokens
                            for e in held
                            if isinstance(e, (ToolCallStart, ToolCallDelta, ToolCallEnd))
                        )
                    )
                    log.info(
                        "%s: the model repeated its call of '%s'; the answer ends before it",
                        request.request_id,
                        start.name,
                    )
                    return
                seen.add(key)
                events, held = held, None
                for out in events:
                    yield out
                continue
            if isinstance(event, ToolCallStart) and event.name not in server:
                if seen:
                    held = [event]
                    continue
                current = (event.name, [])
            elif isinstance(event, ToolCallDelta) and current is not None:
                current[1].append(event.partial_json)
            elif isinstance(event, ToolCallEnd) and current is not None:
                seen.add((current[0], _canonical("".join(current[1]))))
                current = None
            yield event
        for out in held or ():
            yield out
    finally:
        await source.aclose()  # type: ignore[attr-defined]
