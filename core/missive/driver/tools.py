"""The tools a driver offers the model, and ``tool_choice`` reduced to what generation needs.

Values only: :func:`missive.tools.definitions.offered_tools` makes them from
the request's ``tools`` (its rules are listed there), and
:data:`missive.tools.server.SERVER_TOOLS` holds the server tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ToolDefinition", "ToolChoice", "ServerTool"]


@dataclass(frozen=True)
class ServerTool:
    """One family of server tools (all versions of ``web_search_*`` or ``web_fetch_*``).

    Attributes:
        name: the name the API gives the tool and its calls (``web_search``).
        description: offered to the model when the request gives none.
        input_schema: the arguments the model writes.
        result_type: the result block's ``type`` (``web_search_tool_result``).
        error_type: its error content's ``type`` (``web_search_tool_result_error``).
        server_name: for a tool of an MCP server (:mod:`missive.tools.mcp`),
            the server's name in ``mcp_servers``: its calls are
            ``mcp_tool_use`` blocks answered by ``mcp_tool_result``.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    result_type: str
    error_type: str
    server_name: str | None = None


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the model sees it.

    Attributes:
        name: the tool name (``^[a-zA-Z0-9_-]{1,64}$``).
        description: text for the model, "" if none.
        input_schema: JSON Schema of the arguments object.
        strict: the request asked for schema-exact arguments (``strict: true``).
        server: the server tool this is (``web_search``...), None for tools
            the client runs; its calls become ``server_tool_use`` blocks.
        deferred: declared ``defer_loading: true`` and loaded by a
            ``tool_reference``: callable, but its definition is rendered
            where the reference stands, not in the prompt's tool list
            (:mod:`missive.tools.deferred`).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    strict: bool = False
    server: ServerTool | None = None
    deferred: bool = False

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
