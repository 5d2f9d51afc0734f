"""MCP connector blocks sent back in history, as the model reads them.

An assistant message's ``mcp_tool_use`` block (SDK ``BetaMCPToolUseBlockParam``)
is rendered as the call it was, a ``tool_use``, and its ``mcp_tool_result``
(``BetaRequestMCPToolResultBlockParam``: text, ``is_error``) as the
``tool_result`` right after it, exactly as a server tool's blocks are
(:func:`missive.tools.server.split_server_blocks`); a call without its
result reads as not run. ``mcp_tool_listing`` blocks are not rendered
(:mod:`missive.tools.mcp` reads them).
"""

from __future__ import annotations

from typing import Any

from ..protocol.schema.blocks import (
    McpToolListingBlock,
    McpToolResultBlock,
    McpToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["MCP_BLOCKS", "mcp_call", "mcp_result"]

#: The connector's blocks, rendered (calls and results) or left out (listings).
MCP_BLOCKS = (McpToolUseBlock, McpToolResultBlock, McpToolListingBlock)


def mcp_call(block: McpToolUseBlock) -> ToolUseBlock:
    """The ``tool_use`` the model made."""
    return ToolUseBlock(type="tool_use", id=block.id, name=block.name, input=block.input)


def mcp_result(call: McpToolUseBlock, blocks: list[Any]) -> ToolResultBlock:
    """The ``tool_result`` of ``call``: its ``mcp_tool_result`` among
    ``blocks`` (text blocks joined), else an error saying it was not run."""
    found = next((b for b in blocks if isinstance(b, McpToolResultBlock) and b.tool_use_id == call.id), None)
    if found is None:
        text, is_error = f"the {call.name} tool of MCP server {call.server_name} was not run", True
    else:
        content = found.content
        if isinstance(content, list):
            text = "\n".join(b.text for b in content if isinstance(b, TextBlock))
        else:
            text = content or ""
        is_error = bool(found.is_error)
    return ToolResultBlock(type="tool_result", tool_use_id=call.id, content=text, is_error=is_error)
