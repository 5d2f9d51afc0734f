"""The tools a model is offered, from the request's ``tools`` list.

* Custom tools (no ``type``, or ``type: "custom"``) are offered as they are:
  name, description, ``input_schema`` (full JSON Schema, kept byte for byte).
* Anthropic-defined client tools carry a versioned ``type`` and no schema;
  the client runs them, the model needs a schema to call them. Missive
  synthesizes the schema the API documents for them (Anthropic docs, "Bash
  tool" and "Text editor tool"): ``bash_20241022``/``bash_20250124`` and
  ``text_editor_*`` (``str_replace_editor`` / ``str_replace_based_edit_tool``).
* Server tools (``web_search_*``, ``web_fetch_*``, ``code_execution_*`` ...)
  run on Anthropic's servers; a local model cannot use them. They are not
  offered to the model and are reported as ignored (``missive-ignored``),
  like any tool type this version does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequestError
from ..schema.request import CountTokensRequest

__all__ = ["ToolDefinition", "ToolChoice", "offered_tools", "tool_choice_of"]

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
        "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[start, end] lines to view."},
    },
    "required": ["command", "path"],
}

#: Anthropic-defined client tools: type prefix -> (description, schema).
CLIENT_TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "bash_": ("Run commands in a bash shell. State persists between calls.", _BASH_SCHEMA),
    "text_editor_": ("View, create and edit text files.", _TEXT_EDITOR_SCHEMA),
}


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the model sees it.

    Attributes:
        name: the tool name (``^[a-zA-Z0-9_-]{1,64}$``).
        description: text for the model, "" if none.
        input_schema: JSON Schema of the arguments object.
        strict: the request asked for schema-exact arguments (``strict: true``).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    strict: bool = False

    def openai_function(self) -> dict[str, Any]:
        """The OpenAI/Hugging Face ``{"type": "function", "function": {...}}`` form."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.input_schema},
        }


@dataclass(frozen=True)
class ToolChoice:
    """``tool_choice`` reduced to what generation needs.

    Attributes:
        mode: ``auto``, ``any``, ``tool`` or ``none``.
        name: the forced tool for ``tool``.
        parallel: more than one call allowed (``disable_parallel_tool_use`` not set).
    """

    mode: str = "auto"
    name: str | None = None
    parallel: bool = True


def offered_tools(request: CountTokensRequest) -> tuple[tuple[ToolDefinition, ...], list[str]]:
    """Tools offered to the model, and the paths of tools that are not (for ``missive-ignored``).

    Raises:
        InvalidRequestError: two tools share a name.
    """
    offered: list[ToolDefinition] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for i, tool in enumerate(request.tools or []):
        if tool.name in seen:
            raise InvalidRequestError(f"tools: Tool names must be unique (duplicate: {tool.name!r})")
        seen.add(tool.name)
        strict = bool((tool.model_extra or {}).get("strict"))
        if tool.type in (None, "custom"):
            assert tool.input_schema is not None  # checked by the schema
            offered.append(ToolDefinition(tool.name, tool.description or "", tool.input_schema, strict))
            continue
        client = next((spec for prefix, spec in CLIENT_TOOLS.items() if tool.type.startswith(prefix)), None)
        if client is None:
            skipped.append(f'tools.{i} (tool type "{tool.type}": not available on this server)')
            continue
        description, schema = client
        offered.append(ToolDefinition(tool.name, tool.description or description, schema, strict))
    return tuple(offered), skipped


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
    if choice.type in ("any", "tool") and not tools:
        raise InvalidRequestError(f'tool_choice: "{choice.type}" requires at least one tool in `tools`')
    if choice.type == "tool":
        name = choice.name  # type: ignore[union-attr]
        if name not in {t.name for t in tools}:
            raise InvalidRequestError(f"tool_choice.name: tool '{name}' is not among the request's tools")
        return ToolChoice("tool", name, parallel)
    return ToolChoice(choice.type, None, parallel)
