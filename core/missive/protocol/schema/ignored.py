"""Find what a validated request carries that Missive does not act on.

Reported paths look like ``context_management``, ``tools.0.defer_loading``,
``messages.1.content.0 (block type "container_upload")``,
``context_management.edits.0 (edit type "compact_20260112")``.  The app puts them in
the ``missive-ignored`` response header and the log, or answers 400 in strict
mode (contract section 2, "forward compatibility").

Restriction fields of ``web_search``/``web_fetch`` tool definitions
(``max_uses``, domain lists...) are honoured, not reported (see
:data:`missive.tools.server.LIMIT_FIELDS`). Blocks of the server tools Missive answers (``server_tool_use`` of
``web_search``/``web_fetch``/``tool_search_tool_*`` and their result blocks) are rendered when they
are in an assistant message, their place in the API, and reported here when
they are anywhere else.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .blocks import (
    McpToolListingBlock,
    McpToolResultBlock,
    McpToolUseBlock,
    ServerToolBlock,
    ServerToolUseBlock,
    ToolSearchToolResultBlock,
    UnknownBlock,
    WebFetchToolResultBlock,
    WebSearchToolResultBlock,
)
from .management import CompactEdit, UnknownEdit
from .unhonoured import unhonoured

_ASSISTANT_ONLY = (
    McpToolUseBlock,
    McpToolResultBlock,
    McpToolListingBlock,
    ServerToolUseBlock,
    WebSearchToolResultBlock,
    WebFetchToolResultBlock,
    ToolSearchToolResultBlock,
)


def _server_tool_limits(value: BaseModel) -> frozenset[str]:
    """The restriction fields honoured on a ``web_search_*``/``web_fetch_*``
    tool definition (:data:`missive.tools.server.LIMIT_FIELDS`), else none."""
    from ...tools.server import LIMIT_FIELDS, server_tool_of

    if "input_schema" in type(value).model_fields and server_tool_of(getattr(value, "type", None)):
        return LIMIT_FIELDS
    return frozenset()


#: Undeclared keys whose value says what Missive does anyway: a tool call made
#: by the model itself (SDK 2.16 ``caller: {"type": "direct"}`` on
#: ``tool_use``/``server_tool_use``/results; ``allowed_callers: ["direct"]``
#: on a tool). Another caller (``code_execution_*``: programmatic tool calling)
#: is reported.
_DIRECT = {"caller": {"type": "direct"}, "allowed_callers": ["direct"]}


def _says_direct(key: str, value: Any) -> bool:
    return key in _DIRECT and value == _DIRECT[key]


__all__ = ["collect_ignored"]


def collect_ignored(model: BaseModel, prefix: str = "") -> list[str]:
    """Paths of unknown keys and unknown block types under ``model``, in
    order, then declared fields whose value is not acted on
    (:mod:`missive.protocol.schema.unhonoured`)."""
    found: list[str] = []
    _walk(model, prefix, found)
    if not prefix:
        found += unhonoured(model)
    return found


def _join(prefix: str, key: object) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _walk(value: Any, path: str, found: list[str], role: str | None = None) -> None:
    if isinstance(value, (CompactEdit, UnknownEdit)):
        # context_management edits Missive does not apply (missive.context_management.editing).
        found.append(f'{path} (edit type "{value.type}")')
        return
    if isinstance(value, (UnknownBlock, ServerToolBlock)) or (
        isinstance(value, _ASSISTANT_ONLY) and role != "assistant"
    ):
        found.append(f'{path} (block type "{value.type}")')
        return
    if isinstance(value, BaseModel):
        if "role" in type(value).model_fields:  # a message: its blocks' place
            role = getattr(value, "role")  # noqa: B009 (mypy knows BaseModel only)
        limits = _server_tool_limits(value)
        for key, extra in (value.model_extra or {}).items():
            if key not in limits and not _says_direct(key, extra):
                found.append(_join(path, key))
        for name in type(value).model_fields:
            _walk(getattr(value, name), _join(path, name), found, role)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(item, _join(path, i), found, role)
