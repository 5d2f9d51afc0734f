"""The tools a model is offered, from the request's ``tools`` list.

* Custom tools (no ``type``, or ``type: "custom"``) are offered as they are:
  name, description, ``input_schema`` (full JSON Schema, kept byte for byte).
* Anthropic-defined client tools carry a versioned ``type`` and no schema;
  the client runs them, the model needs a schema to call them. Missive
  synthesizes the schema the API documents for them (Anthropic docs, "Bash
  tool" and "Text editor tool"): ``bash_20241022``/``bash_20250124`` and
  ``text_editor_*`` (``str_replace_editor`` / ``str_replace_based_edit_tool``).
* Server tools ``web_search_*`` and ``web_fetch_*`` run on Anthropic's
  servers. They are offered to the model with the input the API documents
  for their calls (``{"query"}``, ``{"url"}``; :mod:`missive.tools.server`),
  and every call is answered with the API's ``unavailable`` tool-result
  error (:mod:`missive.messages.stream`). For a model that cannot call tools at all
  they are reported as ignored instead, unless ``tool_choice`` forces a call
  (then the capability check refuses the request).
* Other server tools (``code_execution_*``...) and unknown tool types are not
  offered and are reported as ignored (``missive-ignored``).
* Server tools ``tool_search_tool_regex_*``/``_bm25_*`` are offered the same
  way and always run (:mod:`missive.tools.tool_search`).
* A tool with ``defer_loading: true`` is offered only once a
  ``tool_reference`` block of the history has loaded it, marked
  :attr:`ToolDefinition.deferred` (:mod:`missive.tools.deferred`).
"""

from __future__ import annotations

from typing import Any

from ..driver.capabilities import Capabilities
from ..driver.tools import ToolChoice, ToolDefinition
from ..protocol.errors import InvalidRequestError
from ..protocol.schema.request import CountTokensRequest, Tool
from .deferred import is_deferred, loaded_names
from .server import KNOWN_SERVER_TOOL_TYPES, server_tool_of

__all__ = [
    "ToolDefinition",
    "ToolChoice",
    "offered_tools",
    "definition_of",
    "tool_choice_of",
    "choice_after_server_call",
]

_BASH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The bash command to run."},
        "restart": {"type": "boolean", "description": "Set to true to restart the bash session."},
    },
}

_TEXT_EDITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        "path": {"type": "string", "description": "Absolute path to the file or directory."},
        "file_text": {"type": "string", "description": "Content of the file to create."},
        "old_str": {"type": "string", "description": "Exact text to replace."},
        "new_str": {"type": "string", "description": "Replacement text, or text to insert."},
        "insert_line": {"type": "integer", "description": "Line after which to insert new_str."},
        "view_range": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "[start, end] lines to view.",
        },
    },
    "required": ["command", "path"],
}

#: Anthropic-defined client tools: type prefix -> (description, schema).
CLIENT_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "bash_": ("Run commands in a bash shell. State persists between calls.", _BASH_SCHEMA),
    "text_editor_": ("View, create and edit text files.", _TEXT_EDITOR_SCHEMA),
}


def offered_tools(
    request: CountTokensRequest, *, server_tools: bool = True, also_loaded: frozenset[str] = frozenset()
) -> tuple[tuple[ToolDefinition, ...], list[str]]:
    """Tools offered to the model, and the paths of tools that are not (for ``missive-ignored``).

    Args:
        server_tools: offer ``web_search_*``/``web_fetch_*`` (False for a
            model that cannot call tools: they are reported as
            ``tools.N (tool type "...": this model cannot call tools)``).
        also_loaded: deferred tools loaded besides those the history loads
            (a server-side tool search of the message being answered).

    Deferred tools (``defer_loading: true``) not loaded yet are left out,
    not reported: the API does not show them to the model either.

    A server tool's ``name`` is its fixed name (``web_search``; the SDK's
    params allow no other); a dated ``type`` SDK 2.16 does not define is
    served as its family and reported.

    Raises:
        InvalidRequestError: two tools share a name; a server tool named
            otherwise; every tool deferred (the API's rule: "at least one
            tool must be non-deferred"); a ``tool_reference`` names no tool
            of the request.
    """
    offered: list[ToolDefinition] = []
    skipped: list[str] = []
    seen: set[str] = set()
    loaded = loaded_names(request) | also_loaded
    tools = request.tools or []
    if tools and all(is_deferred(tool) for tool in tools):
        raise InvalidRequestError(
            "tools: every tool has `defer_loading: true`; at least one tool must not be deferred (the tool "
            "search tool that loads the others, or a tool the model always has)"
        )
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise InvalidRequestError(f"tools: Tool names must be unique (duplicate: {tool.name!r})")
        seen.add(tool.name)
        server = server_tool_of(tool.type)
        if server is not None and tool.name != server.name:
            raise InvalidRequestError(f"tools.{i}.name: Input should be '{server.name}' (got {tool.name!r})")
        if server is not None and tool.type not in KNOWN_SERVER_TOOL_TYPES:
            skipped.append(
                f'tools.{i} (tool type "{tool.type}": a version Missive does not know, served as '
                f"{server.name})"
            )
        if is_deferred(tool) and tool.name not in loaded:
            continue
        definition = definition_of(tool, server_tools=server_tools)
        if isinstance(definition, str):
            skipped.append(f"tools.{i} ({definition})")
        else:
            offered.append(definition)
    return tuple(offered), skipped


def definition_of(tool: Tool, *, server_tools: bool = True) -> ToolDefinition | str:
    """The definition the model is offered for one ``tools`` entry (the
    module doc's rules), or why it is not offered (``tool type "...": not
    available on this server``). Also used for a tool added mid-conversation
    (:mod:`missive.tools.changes`)."""
    deferred = is_deferred(tool)
    strict = bool((tool.model_extra or {}).get("strict"))
    mcp = getattr(tool, "server_tool", None)  # a tool of an MCP server (missive.tools.mcp.McpTool)
    if mcp is not None:
        assert tool.input_schema is not None
        return ToolDefinition(tool.name, tool.description or "", tool.input_schema, False, mcp, deferred)
    if tool.type in (None, "custom"):
        assert tool.input_schema is not None  # checked by the schema
        return ToolDefinition(tool.name, tool.description or "", tool.input_schema, strict, deferred=deferred)
    server = server_tool_of(tool.type)
    if server is not None:
        if not server_tools:
            return f'tool type "{tool.type}": this model cannot call tools'
        description = tool.description or server.description
        return ToolDefinition(tool.name, description, server.input_schema, strict, server, deferred)
    client = next((spec for prefix, spec in CLIENT_TOOLS.items() if tool.type.startswith(prefix)), None)
    if client is None:
        return f'tool type "{tool.type}": not available on this server'
    description, schema = client
    return ToolDefinition(tool.name, tool.description or description, schema, strict, deferred=deferred)


def tool_choice_of(request: CountTokensRequest, tools: tuple[ToolDefinition, ...]) -> ToolChoice:
    """The request's ``tool_choice`` (default ``auto``), checked against ``tools``.

    Raises:
        InvalidRequestError: ``tool`` names a tool that is not offered, or
            ``any``/``tool`` with no tools.
    """
    choice = request.tool_choice
    if choice is None:
        return ToolChoice()
    parallel = not bool(getattr(choice, "disable_parallel_tool_use", False))
    if choice.type in ("any", "tool") and not request.tools:
        raise InvalidRequestError(f'tool_choice: "{choice.type}" requires at least one tool in `tools`')
    if choice.type == "tool":
        name = choice.name
        if name not in {t.name for t in tools}:
            sent = next((t for t in request.tools or [] if t.name == name), None)
            why = "is not among the request's tools" if sent is None else _not_offered(sent)
            raise InvalidRequestError(f"tool_choice.name: tool '{name}' {why}")
        return ToolChoice("tool", name, parallel)
    if choice.type == "any" and not tools:
        held = "; ".join(f"'{t.name}' {_not_offered(t)}" for t in request.tools or [])
        raise InvalidRequestError(
            f'tool_choice: "any" requires a tool the model can call, and none is: {held}'
        )
    return ToolChoice(choice.type, None, parallel)


def _not_offered(tool: Tool) -> str:
    """Why a tool of the request is not offered to the model: deferred and
    not loaded yet, or of a type this server does not run (reported in
    ``missive-ignored``, :func:`offered_tools`)."""
    if is_deferred(tool):
        return "has `defer_loading: true` and no tool_reference has loaded it yet"
    return f'is of type "{tool.type}", which this server does not run (see the missive-ignored header)'


def choice_after_server_call(
    choice: ToolChoice, capabilities: Capabilities, tools: tuple[ToolDefinition, ...]
) -> ToolChoice | None:
    """The ``tool_choice`` of the generation that goes on after a server tool's result.

    A forced choice (``any``/``tool``) is honoured by the first call; forcing
    again would make the model repeat it, so the turn goes on in ``auto``
    (as a client's next request would), with ``disable_parallel_tool_use``
    kept. Where the driver cannot honour ``auto`` exactly (the mode is not
    declared, or a ``strict`` tool is not enforced in it), ``none``: the model
    answers in text and cannot call a tool. None when the driver declares
    neither: the turn cannot go on here (the caller pauses it).
    """
    strict = any(t.strict for t in tools)
    if "auto" in capabilities.tool_choice and (not strict or "auto" in capabilities.strict_tools):
        return ToolChoice("auto", None, choice.parallel)
    if "none" in capabilities.tool_choice:
        return ToolChoice("none", None, choice.parallel)
    return None
