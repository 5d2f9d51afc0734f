"""The MCP connector's request fields: ``mcp_servers`` and ``mcp_toolset`` tools.

Shapes are the SDK's (anthropic 2.16, beta ``mcp-client-2025-11-20``):
``BetaRequestMCPServerURLDefinitionParam`` (``{"type": "url", "url": ...,
"name": ..., "authorization_token": ..., "tool_configuration":
{"enabled": ..., "allowed_tools": [...]}}``) and ``BetaMCPToolsetParam``
(``{"type": "mcp_toolset", "mcp_server_name": ..., "default_config":
{"enabled": ..., "defer_loading": ...}, "configs": {tool: {...}}, "tools":
[pinned listing]}``). They are run by :mod:`missive.tools.mcp`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import StrictBool

from .blocks import CacheControl, Open

__all__ = ["McpServer", "McpToolConfiguration", "McpToolConfig", "McpToolset", "McpListedTool"]


class McpToolConfiguration(Open):
    """``mcp_servers[].tool_configuration`` (the older beta's tool selection)."""

    enabled: StrictBool | None = None
    allowed_tools: list[str] | None = None


class McpServer(Open):
    """One ``mcp_servers`` entry: a streamable HTTP MCP server."""

    type: Literal["url"]
    url: str
    name: str
    authorization_token: str | None = None
    tool_configuration: McpToolConfiguration | None = None


class McpToolConfig(Open):
    """``default_config`` or one ``configs`` entry of an ``mcp_toolset``."""

    enabled: StrictBool | None = None
    defer_loading: StrictBool | None = None


class McpListedTool(Open):
    """A tool as an MCP server lists it (SDK ``BetaMCPToolParamParam``)."""

    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class McpToolset(Open):
    """A ``tools`` entry of type ``mcp_toolset``: which tools of server
    ``mcp_server_name`` are offered, and how."""

    type: Literal["mcp_toolset"]
    mcp_server_name: str
    default_config: McpToolConfig | None = None
    configs: dict[str, McpToolConfig] | None = None
    tools: list[McpListedTool] | None = None
    cache_control: CacheControl | None = None
