"""``context_management`` edits, applied before the prompt is rendered.

The API (Anthropic docs, "Context editing"; shapes from the SDK 2.15 types
``BetaClearToolUses20250919EditParam``, ``BetaClearThinking20251015EditParam``,
``BetaContextManagementResponse``) edits the prompt the model sees, never the
client's history, and reports each edit it applied in the response's
``context_management.applied_edits``:

* ``clear_tool_uses_20250919``: once the prompt is larger than ``trigger``
  (default ``{"type": "input_tokens", "value": 100000}``; or a count of
  ``tool_uses``), the results of the oldest tool uses are replaced by a
  placeholder, all but the latest ``keep`` (default 3 tool uses), never
  those of ``exclude_tools``; ``clear_tool_inputs`` also clears the calls'
  inputs (``true``: every cleared call; a list: the calls of those tools);
  with ``clear_at_least``, nothing is cleared unless that many tokens are
  freed. Reported as ``{"type", "cleared_tool_uses", "cleared_input_tokens"}``.
* ``clear_thinking_20251015``: the thinking blocks of all but the latest
  ``keep`` assistant turns (default ``{"type": "thinking_turns", "value": 1}``;
  ``"all"`` keeps every one) are left out of the prompt. Reported as
  ``{"type", "cleared_thinking_turns", "cleared_input_tokens"}``.

Edits run in the order given (``clear_thinking_20251015`` first, a rule of
the schema). Token counts are the driver's own count of the rendered prompt
(:meth:`missive.driver.interface.Driver.count_tokens`), before and after each edit, so
``cleared_input_tokens`` is exact and the answer's usage, ``count_tokens``
and the edits agree. A request whose edits have nothing to clear costs no
extra count: Claude Code sends ``clear_thinking_20251015`` on every request.

A cleared result's content becomes :data:`PLACEHOLDER` (the API's text is not
published; this one says what happened); a cleared input becomes ``{}`` (a
tool_use input is always an object). An assistant turn is one assistant
message. Thinking is cleared by leaving verified blocks out of the prompt
(:mod:`missive.thinking.replay`), so the positions that signatures bind stay
as the client sent them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..protocol.schema.blocks import RedactedThinkingBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from ..protocol.schema.management import (
    DEFAULT_KEEP_TOOL_USES,
    DEFAULT_TRIGGER_TOKENS,
    ClearThinkingEdit,
    ClearToolUsesEdit,
    InputTokens,
)
from ..protocol.schema.request import CountTokensRequest

__all__ = ["PLACEHOLDER", "Edited", "Counter", "apply_edits"]

#: What a cleared tool result says instead of its content.
PLACEHOLDER = "[tool result cleared to save context]"

#: ``count(request, cleared_thinking)``: prompt tokens of ``request`` with
#: the thinking of those message indices left out.
Counter = Callable[[CountTokensRequest, frozenset[int]], Awaitable[int]]


@dataclass
class Edited:
    """The request after its edits.

    Attributes:
        request: tool results and inputs cleared.
        cleared_thinking: indices of messages whose thinking is left out.
        applied: the response's ``applied_edits``.
        original_tokens: prompt tokens before any edit, when they were counted.
        tokens: prompt tokens after the edits, when they were counted.
    """

    request: CountTokensRequest
    cleared_thinking: frozenset[int] = frozenset()
    applied: list[dict[str, Any]] = field(default_factory=list)
    original_tokens: int | None = None
    tokens: int | None = None


async def apply_edits(req: CountTokensRequest, count: Counter) -> Edited:
    """Apply ``req.context_management.edits`` in order (see the module doc)."""
    state = Edited(req)
    edits = req.context_management.edits if req.context_management else None
    for edit in edits or ():
        if isinstance(edit, ClearThinkingEdit):
            await _clear_thinking(state, edit, count)
        elif isinstance(edit, ClearToolUsesEdit):
            await _clear_tool_uses(state, edit, count)
    return state


async def _measure(state: Edited, count: Counter) -> int:
    if state.tokens is None:
        state.tokens = await count(state.request, state.cleared_thinking)
        if state.original_tokens is None:
            state.original_tokens = state.tokens
    return state.tokens


async def _clear_thinking(state: Edited, edit: ClearThinkingEdit, count: Counter) -> None:
    keep = edit.kept_turns()
    if keep is None:
        return
    messages = state.request.messages
    assistants = [m for m, message in enumerate(messages) if message.role == "assistant"]
    older = assistants[: max(0, len(assistants) - keep)]
    turns = [
        m
        for m in older
        if m not in state.cleared_thinking
        and any(isinstance(b, (ThinkingBlock, RedactedThinkingBlock)) for b in messages[m].blocks())
    ]
    if not turns:
        return
    before = await _measure(state, count)
    cleared = state.cleared_thinking | frozenset(turns)
    after = await count(state.request, cleared)
    state.cleared_thinking, state.tokens = cleared, after
    state.applied.append(
        {"type": edit.type, "cleared_thinking_turns": len(turns), "cleared_input_tokens": before - after}
    )


def _tool_uses(req: CountTokensRequest) -> list[ToolUseBlock]:
    return [
        b for m in req.messages if m.role == "assistant" for b in m.blocks() if isinstance(b, ToolUseBlock)
    ]


async def _triggered(state: Edited, edit: ClearToolUsesEdit, uses: int, count: Counter) -> bool:
    trigger = edit.trigger or InputTokens(type="input_tokens", value=DEFAULT_TRIGGER_TOKENS)
    if isinstance(trigger, InputTokens):
        return await _measure(state, count) > trigger.value
    return uses > trigger.value


async def _clear_tool_uses(state: Edited, edit: ClearToolUsesEdit, count: Counter) -> None:
    uses = _tool_uses(state.request)
    excluded = set(edit.exclude_tools or ())
    keep = edit.keep.value if edit.keep is not None else DEFAULT_KEEP_TOOL_USES
    clearable = [u for u in uses if u.name not in excluded]
    chosen = clearable[: max(0, len(clearable) - keep)]
    if not chosen or not await _triggered(state, edit, len(uses), count):
        return
    inputs = edit.clear_tool_inputs
    clear_input = {u.id for u in chosen if inputs is True or (isinstance(inputs, list) and u.name in inputs)}
    edited = _cleared(state.request, {u.id for u in chosen}, clear_input)
    before = await _measure(state, count)
    after = await count(edited, state.cleared_thinking)
    if edit.clear_at_least is not None and before - after < edit.clear_at_least.value:
        return
    state.request, state.tokens = edited, after
    state.applied.append(
        {"type": edit.type, "cleared_tool_uses": len(chosen), "cleared_input_tokens": before - after}
    )


def _cleared(req: CountTokensRequest, results: set[str], inputs: set[str]) -> CountTokensRequest:
    """``req`` with the results of the tool uses ``results`` (ids) replaced
    by :data:`PLACEHOLDER` and the inputs of ``inputs`` by ``{}``."""
    messages = []
    for message in req.messages:
        if isinstance(message.content, str):
            messages.append(message)
            continue
        blocks: list[Any] = []
        for block in message.content:
            if isinstance(block, ToolResultBlock) and block.tool_use_id in results:
                block = block.model_copy(update={"content": PLACEHOLDER})
            elif isinstance(block, ToolUseBlock) and block.id in inputs:
                block = block.model_copy(update={"input": {}})
            blocks.append(block)
        messages.append(message.model_copy(update={"content": blocks}))
    return req.model_copy(update={"messages": messages})
