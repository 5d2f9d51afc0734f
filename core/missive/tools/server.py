"""Server tools: ``web_search_*``, ``web_fetch_*`` and ``tool_search_tool_*``, offered and answered.

The real API runs these tools itself (Anthropic docs, "Server tools", "Web
search tool", "Web fetch tool"): the model's call arrives as a
``server_tool_use`` block (id ``srvtoolu_...``), the API runs it, the result
block follows in the same assistant turn, and the model goes on reading it.
Missive runs them where the operator turned them on (``[server_tools]``:
:mod:`missive.tools.server_runner`); every other call gets the API's
tool-result error shape with ``error_code: "unavailable"``::

    {"type": "server_tool_use", "id": "srvtoolu_...", "name": "web_search", "input": {"query": "..."}}
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_...",
     "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"}}

(``web_fetch``: ``web_fetch_tool_result`` with ``web_fetch_tool_result_error``;
the tool search tools, which the server always runs:
:mod:`missive.tools.tool_search`.)

What this module holds:

* :data:`SERVER_TOOLS`: each tool's fixed name, the input schema the model is
  offered (the API documents the model's input as ``{"query"}`` for web
  search and ``{"url"}`` for web fetch), and its result block type;
* :func:`error_result`: the result block of a call;
* :func:`result_text`: what the model reads for a result block in history
  (the error, or the titles/URLs and text of a real API's results);
* :func:`split_server_blocks`: an assistant message's server-tool blocks as
  the ``tool_use`` / ``tool_result`` pair every driver already renders (the
  call in the assistant turn, its result in a user turn right after, the
  rest of the message in a new assistant turn). A call without its result
  block (the API leaves it unanswered when the model also called a client
  tool) is rendered with an ``unavailable`` result: Missive never runs it.

Other server tools (``code_execution_*``, MCP) are not offered and their
blocks are reported as ignored (:mod:`missive.protocol.schema.ignored`).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from ..driver.tools import ServerTool
from ..protocol.ids import server_tool_use_id
from ..protocol.schema.blocks import (
    ContentBlock,
    McpToolUseBlock,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolSearchToolResultBlock,
    ToolUseBlock,
    WebFetchToolResultBlock,
    WebSearchToolResultBlock,
)
from ..protocol.schema.request import CountTokensRequest
from .mcp_history import MCP_BLOCKS, mcp_call, mcp_result
from .search import decode_content
from .tool_search import TOOL_SEARCH_TOOLS, result_content

__all__ = [
    "ServerTool",
    "SERVER_TOOLS",
    "KNOWN_SERVER_TOOL_TYPES",
    "UNAVAILABLE",
    "server_tool_of",
    "server_tool_use_block",
    "error_result",
    "result_text",
    "split_server_blocks",
    "is_server_block",
    "server_block_paths",
    "answer_blocks",
    "MAX_SERVER_CALLS",
    "LIMIT_FIELDS",
    "max_uses_of",
]

#: The error code of every call Missive answers (the API's code for a tool
#: that cannot run now).
UNAVAILABLE = "unavailable"

#: Server tool calls answered in one message before the turn is paused
#: (``stop_reason: "pause_turn"``; the client sends the answer back to go on,
#: as with the API's long-running turns). Missive's choice: a small model
#: that keeps calling a tool that never works must not loop for long.
MAX_SERVER_CALLS = 5

#: Fields of a server tool definition that only restrict what its searches
#: or fetches may do (Anthropic docs, "Web search tool", "Web fetch tool"):
#: ``max_uses``, domain lists, ``user_location``, ``max_content_tokens``,
#: ``citations``. Honoured when the server runs the tool
#: (:mod:`missive.tools.server_runner`: domain lists, ``max_content_tokens``,
#: ``citations``, ``user_location`` passed to the search provider), and
#: trivially when it answers ``unavailable``; not reported as ignored.
#: ``max_uses`` is enforced on the calls: one beyond it is answered
#: ``max_uses_exceeded``, as the API does.
LIMIT_FIELDS = frozenset(
    {"max_uses", "allowed_domains", "blocked_domains", "user_location", "max_content_tokens", "citations"}
)

_CONTENT_BLOCK: TypeAdapter[Any] = TypeAdapter(ContentBlock)

_SERVER_BLOCKS = (
    ServerToolUseBlock,
    WebSearchToolResultBlock,
    WebFetchToolResultBlock,
    ToolSearchToolResultBlock,
)
_RESULT_BLOCKS = (WebSearchToolResultBlock, WebFetchToolResultBlock, ToolSearchToolResultBlock)


#: Tool ``type`` prefix -> the tool. Schemas: the inputs the API documents for
#: the model's calls (``"input": {"query": ...}``, ``"input": {"url": ...}``).
SERVER_TOOLS: dict[str, ServerTool] = {
    "web_search_": ServerTool(
        name="web_search",
        description="Search the web. Returns result titles and URLs.",
        input_schema={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The search query."}},
            "required": ["query"],
        },
        result_type="web_search_tool_result",
        error_type="web_search_tool_result_error",
    ),
    "web_fetch_": ServerTool(
        name="web_fetch",
        description="Fetch the content of a web page or PDF at a URL.",
        input_schema={
            "type": "object",
            "properties": {"url": {"type": "string", "description": "The URL to fetch."}},
            "required": ["url"],
        },
        result_type="web_fetch_tool_result",
        error_type="web_fetch_tool_result_error",
    ),
    **TOOL_SEARCH_TOOLS,
}


#: The server tool ``type`` values SDK 2.16 defines (its ``Beta*ToolParam``
#: literals). Another dated version of a family Missive runs is served as the
#: family and reported (``missive-ignored``): a newer client keeps working.
KNOWN_SERVER_TOOL_TYPES = frozenset(
    {
        "web_search_20250305",
        "web_search_20260209",
        "web_search_20260318",
        "web_fetch_20250910",
        "web_fetch_20260209",
        "web_fetch_20260309",
        "web_fetch_20260318",
        "tool_search_tool_regex_20251119",
        "tool_search_tool_regex",
        "tool_search_tool_bm25_20251119",
        "tool_search_tool_bm25",
    }
)


def server_tool_of(tool_type: str | None) -> ServerTool | None:
    """The server tool a ``tools[i].type`` names (``web_search_20250305`` ->
    web search), None for any other type."""
    if tool_type is None:
        return None
    return next((tool for prefix, tool in SERVER_TOOLS.items() if tool_type.startswith(prefix)), None)


def is_server_block(block: object) -> bool:
    """Whether ``block`` is a server-tool block Missive renders (call or
    result), MCP connector blocks included (:mod:`missive.tools.mcp_history`)."""
    return isinstance(block, _SERVER_BLOCKS) or isinstance(block, MCP_BLOCKS)


def server_tool_use_block(name: str) -> dict[str, Any]:
    """The ``content_block_start`` block of a call: ``{"type": "server_tool_use",
    "id": "srvtoolu_...", "name": name, "input": {}}`` (input streamed as
    ``input_json_delta``, like ``tool_use``)."""
    return {"type": "server_tool_use", "id": server_tool_use_id(), "name": name, "input": {}}


def error_result(tool: ServerTool, tool_use_id: str, error_code: str = UNAVAILABLE) -> dict[str, Any]:
    """The result block answering call ``tool_use_id`` with ``error_code``.

    Shape (Anthropic docs, "Web search tool" / "Web fetch tool", errors):
    ``{"type": "web_search_tool_result", "tool_use_id": ..., "content":
    {"type": "web_search_tool_result_error", "error_code": "unavailable"}}``.
    """
    return {
        "type": tool.result_type,
        "tool_use_id": tool_use_id,
        "content": {"type": tool.error_type, "error_code": error_code},
    }


def _error_text(name: str, code: object) -> str:
    return f"the {name} tool returned an error: {code}"


def result_text(
    name: str, block: WebSearchToolResultBlock | WebFetchToolResultBlock | None
) -> tuple[str, bool]:
    """What the model reads for the result of call ``name``, and whether it is an error.

    * no block (a call left unanswered): the ``unavailable`` error;
    * an error object: ``the web_search tool returned an error: unavailable``;
    * web search results: one ``[title](url)`` line each, then the
      result's snippet when Missive's own search wrote it
      (:func:`missive.tools.search.decode_content`; the API's encrypted
      page content is opaque);
    * a web fetch result: the URL, the document's title and, for a text
      source, its text; other sources (PDF) are named, not shown.
    """
    if block is None:
        return _error_text(name, UNAVAILABLE), True
    content = block.content
    if isinstance(content, dict) and str(content.get("type", "")).endswith("_error"):
        return _error_text(name, content.get("error_code", "unknown")), True
    if isinstance(content, list):
        lines = []
        for item in content:
            if isinstance(item, dict) and item.get("type") == "web_search_result":
                lines.append(f"[{item.get('title', '')}]({item.get('url', '')})")
                snippet = decode_content(item.get("encrypted_content"))
                if snippet:
                    lines.append(snippet)
        return "\n".join(lines) if lines else "no results", False
    if isinstance(content, dict):
        parts = [str(content.get("url", ""))]
        document = content.get("content")
        if isinstance(document, dict):
            if document.get("title"):
                parts.append(str(document["title"]))
            source = document.get("source")
            if isinstance(source, dict) and source.get("type") == "text":
                parts.append(str(source.get("data", "")))
            elif isinstance(source, dict):
                parts.append(f"(a {source.get('media_type', 'binary')} document, not shown)")
        return "\n".join(p for p in parts if p), False
    return _error_text(name, "unknown"), True


def split_server_blocks(
    role: str, blocks: list[Any], *, answered: bool = True
) -> list[tuple[str, list[Any]]]:
    """One message's blocks as ``(role, blocks)`` turns with server-tool blocks rendered.

    Args:
        role: the message's role; server-tool blocks count only in
            ``assistant`` messages (the API's place for them) and are dropped
            from others.
        blocks: the message's blocks, in order.
        answered: False for a model that cannot call tools (its driver
            declares no tool use): server-tool blocks are dropped, as they
            cannot be rendered.

    Returns:
        ``[(role, blocks)]`` unchanged when there is no server-tool block.
        Otherwise each ``server_tool_use`` becomes a ``tool_use`` block ending
        an assistant turn, followed by a ``user`` turn holding its result as a
        ``tool_result`` (:func:`result_text`; ``is_error`` for errors; a
        tool search's ``tool_reference`` blocks as they are,
        :func:`missive.tools.tool_search.result_content`); the
        blocks after it start a new assistant turn. Result blocks are placed
        with their call (matched by ``tool_use_id``); one without a call is
        dropped. Empty turns are left out.
    """
    if not any(is_server_block(b) for b in blocks):
        return [(role, blocks)]
    if role != "assistant" or not answered:
        return [(role, [b for b in blocks if not is_server_block(b)])]
    results = {b.tool_use_id: b for b in blocks if isinstance(b, _RESULT_BLOCKS)}
    turns: list[tuple[str, list[Any]]] = [("assistant", [])]
    for block in blocks:
        if isinstance(block, McpToolUseBlock):
            turns[-1][1].append(mcp_call(block))
            turns += [("user", [mcp_result(block, blocks)]), ("assistant", [])]
        elif isinstance(block, ServerToolUseBlock):
            call = ToolUseBlock(type="tool_use", id=block.id, name=block.name, input=block.input)
            found = results.get(block.id)
            if isinstance(found, ToolSearchToolResultBlock):
                content, is_error = result_content(found)
            else:
                content, is_error = result_text(block.name, found)
            result = ToolResultBlock(
                type="tool_result", tool_use_id=block.id, content=content, is_error=is_error
            )
            turns[-1][1].append(call)
            turns += [("user", [result]), ("assistant", [])]
        elif not is_server_block(block):
            turns[-1][1].append(block)
    return [(r, b) for r, b in turns if b]


def server_block_paths(request: CountTokensRequest) -> list[str]:
    """``missive-ignored`` paths of the server-tool blocks in assistant
    messages, for a model that cannot call tools (they are left out of its
    prompt): ``messages.1.content.0 (block type "server_tool_use": this model
    cannot call tools)``."""
    return [
        f'messages.{i}.content.{j} (block type "{block.type}": this model cannot call tools)'
        for i, message in enumerate(request.messages)
        if message.role == "assistant"
        for j, block in enumerate(message.blocks())
        if is_server_block(block)
    ]


def answer_blocks(text: str, call: dict[str, Any], result: dict[str, Any]) -> list[Any]:
    """The validated content blocks of an answer that ends with a server tool
    call and its result: ``text`` (if any), the ``server_tool_use`` block
    ``call`` (with its complete ``input``) and the result block ``result``,
    for :func:`missive.messages.conversation.continue_after`."""
    blocks: list[Any] = [TextBlock(type="text", text=text)] if text else []
    return blocks + [_CONTENT_BLOCK.validate_python(call), _CONTENT_BLOCK.validate_python(result)]


def max_uses_of(request: CountTokensRequest, name: str) -> int | None:
    """``max_uses`` of the request's server tool named ``name``, None if unset."""
    for tool in request.tools or []:
        if tool.name == name:
            value = (tool.model_extra or {}).get("max_uses")
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None
