"""``cache_control`` breakpoints of a request, checked by the API's rules.

The API's prompt caching rules (Anthropic docs, "Prompt caching"):

* at most 4 blocks with ``cache_control``: ``A maximum of 4 blocks with
  cache_control may be provided. Found N.``;
* TTLs never grow along the prompt, in the order the API processes it:
  ``tools``, ``system``, ``messages`` ("Mixing different TTLs": longer TTLs
  first). A ``ttl: "1h"`` breakpoint after a ``5m`` one (the default when
  ``ttl`` is absent) is the 400 clients quote (cnighswonger/claude-code-cache-fix#44).

Every breakpoint the API reads is walked, where it stands in that order:

* ``tools`` entries, ``mcp_toolset`` ones included (SDK 2.16
  ``BetaMCPToolsetParam.cache_control``), at their index in ``tools``
  (Missive keeps the toolsets apart once read: the raw list gives their places);
* ``system`` text blocks;
* each message's blocks, and the blocks inside a ``tool_result``'s content
  (SDK 2.16: its text, image, document and search result blocks each take
  ``cache_control``), before the ``tool_result``'s own, which ends after them;
* the top-level ``cache_control`` last: it "automatically applies a
  cache_control marker to the last cacheable block in the request" (SDK
  2.16 ``MessageCreateParams.cache_control``), so it stands at the very end.
  It is not counted among the 4: when the last block carries a marker of its
  own, the two are one breakpoint, and Missive does not guess which block the
  API counts as cacheable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .blocks import CacheControl, ToolResultBlock

__all__ = ["MAX_BREAKPOINTS", "check_breakpoints"]

#: Most ``cache_control`` breakpoints a request may set (the API's prompt caching rule).
MAX_BREAKPOINTS = 4


def _tool_controls(request: Any, raw_tools: Any) -> Iterator[tuple[str, CacheControl | None]]:
    """``tools.N`` and each entry's ``cache_control``, custom tools and
    ``mcp_toolset`` entries at their places in the client's ``tools``."""
    tools = list(request.tools or [])
    toolsets = list(request.mcp_toolsets or [])
    if isinstance(raw_tools, list) and len(raw_tools) == len(tools) + len(toolsets):
        sets = iter(toolsets)
        plain = iter(tools)
        for i, raw in enumerate(raw_tools):
            is_set = isinstance(raw, dict) and raw.get("type") == "mcp_toolset"
            entry = next(sets) if is_set else next(plain)
            yield f"tools.{i}", getattr(entry, "cache_control", None)
        return
    for i, entry in enumerate([*tools, *toolsets]):  # no raw list to place them: toolsets last
        yield f"tools.{i}", getattr(entry, "cache_control", None)


def _message_controls(request: Any) -> Iterator[tuple[str, CacheControl | None]]:
    for m, message in enumerate(request.messages):
        for i, block in enumerate(message.content if isinstance(message.content, list) else []):
            path = f"messages.{m}.content.{i}"
            if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                for j, inner in enumerate(block.content):
                    yield f"{path}.content.{j}", getattr(inner, "cache_control", None)
            yield path, getattr(block, "cache_control", None)


def breakpoints(request: Any, raw_tools: Any = None) -> Iterator[tuple[str, CacheControl]]:
    """Each ``cache_control`` breakpoint of ``request`` (a validated
    :class:`~missive.protocol.schema.request.CountTokensRequest`) with its
    field path, in the API's processing order (module doc); ``raw_tools``:
    the client's ``tools`` list as sent."""
    for path, control in _tool_controls(request, raw_tools):
        if control is not None:
            yield path, control
    if isinstance(request.system, list):
        for i, text in enumerate(request.system):
            if text.cache_control is not None:
                yield f"system.{i}", text.cache_control
    for path, control in _message_controls(request):
        if control is not None:
            yield path, control
    if request.cache_control is not None:
        yield "cache_control", request.cache_control


def check_breakpoints(request: Any, raw_tools: Any = None) -> None:
    """The module's two rules, in the API's wording.

    Raises:
        ValueError: more than 4 block breakpoints, or a 1h one after a 5m one.
    """
    controls = list(breakpoints(request, raw_tools))
    blocks = [path for path, _ in controls if path != "cache_control"]
    if len(blocks) > MAX_BREAKPOINTS:
        raise ValueError(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(blocks)}."
        )
    short: str | None = None  # the first 5m breakpoint's path
    for path, control in controls:
        if control.ttl == "1h" and short is not None:
            top = path == "cache_control"  # it marks the last block: after every other one
            field = "cache_control" if top else f"{path}.cache_control"
            note = "; the top-level one marks the last block" if top else ""
            raise ValueError(
                f"{field}.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control "
                "block. Note that blocks are processed in the following order: `tools`, `system`, "
                f"`messages`. (The earlier one: {short}.cache_control, 5m when `ttl` is absent{note}; put "
                "the 1h breakpoints first, or make this one 5m.)"
            )
        if control.ttl != "1h" and short is None:
            short = path
