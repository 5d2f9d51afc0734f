"""A stdio MCP server whose tool list grows: calling ``open_harbour`` adds
``harbour_master`` and sends ``notifications/tools/list_changed`` (the MCP
specification's list-changed notification), so a client learns of a tool
mid-conversation. Run by Claude Code from an ``--mcp-config`` file in
tests/clients/test_claude_code_tool_changes.py; written with the ``mcp``
library (2.x: ``MCPServer`` is what 1.x called ``FastMCP``)."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("tides")


def harbour_master(question: str) -> str:
    """Ask the harbour master about the tides."""
    return f"The harbour master answers {question!r}: HARBOUR-OK"


@app.tool()
async def open_harbour(ctx: Context) -> str:
    """Open the harbour: the harbour_master tool becomes available."""
    app.add_tool(harbour_master)
    await ctx.notify_tools_changed()
    return "The harbour is open: OPEN-OK"


if __name__ == "__main__":
    app.run()
