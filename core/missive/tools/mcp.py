"""The MCP connector: the tools of the request's ``mcp_servers``, offered and run.

The API's behaviour (Anthropic docs, "MCP connector"; SDK 2.16 beta types
``BetaRequestMCPServerURLDefinitionParam``, ``BetaMCPToolsetParam``,
``BetaMCPToolUseBlock``, ``BetaMCPToolResultBlock``, ``BetaMCPToolListingBlock``):
the request names remote MCP servers (streamable HTTP: ``url``, ``name``,
``authorization_token``); the API lists their tools, offers them to the
model, runs the model's calls on the server itself and puts an
``mcp_tool_use`` block (``id`` ``mcptoolu_...``, ``name``, ``server_name``,
``input``) and its ``mcp_tool_result`` (``content``: text blocks,
``is_error``) in the assistant message, then the model goes on, as with the
other server tools (:mod:`missive.messages.stream.server_tools`).

Missive's rules:

* off unless the operator turns it on (``server_tools.mcp``) and the ``mcp``
  library is installed; off, ``mcp_servers`` and ``mcp_toolset`` entries are
  reported as ignored;
* a server's URL must match one of the key's ``mcp_servers`` globs
  (``[keys.NAME]``), else the server-wide ``server_tools.mcp_servers``;
  none matching: 403 ``permission_error`` naming the entry;
* the connection follows the media fetcher's address rules
  (:mod:`missive.tools.mcp_client`): a private or loopback address is
  refused unless listed in ``media.fetch_allow``;
* which tools are offered: an ``mcp_toolset`` naming the server
  (``default_config`` / ``configs``: ``enabled``, ``defer_loading``), else
  the server's ``tool_configuration`` (``enabled``, ``allowed_tools``), else
  all. A toolset naming a server not in ``mcp_servers`` is a 400, as are two
  servers of one name, or a tool name that another tool of the request
  already has;
* the server's tools join the request's ``tools`` (:class:`McpTool`, after
  the request's own), so a ``defer_loading`` one is what a deferred tool of
  ``tools`` is (:mod:`missive.tools.deferred`): withheld until a
  ``tool_reference`` loads it, found by the tool search tools
  (:mod:`missive.tools.tool_search`), named by a ``tool_addition``;
* the listing: the toolset's pinned ``tools``, else the latest
  ``mcp_tool_listing`` block of the history for that server, else the
  server is asked (``tools/list``); a server that cannot be listed is a 400
  naming it (nothing has been generated yet; the API's is a 400 "Connection
  error while communicating with MCP server", anthropic-sdk-typescript
  issue 1027). A listing the server was
  asked for is returned as an ``mcp_tool_listing`` block opening the answer
  (``BetaMCPToolListingBlock``: "Send the assistant message back unchanged,
  this block included, so later requests use this listing instead of asking
  the MCP server again"): every tool the server listed, as it listed them;
* a call that fails (unreachable, timeout, protocol error) or a tool that
  reports an error is an ``mcp_tool_result`` with ``is_error: true`` and the
  reason as its text: the model reads it and goes on.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ConfigDict

from ..config import ServerToolsConfig
from ..driver.tools import ServerTool
from ..media.fetch import FetchPolicy
from ..protocol.errors import InvalidRequestError, PermissionDeniedError
from ..protocol.ids import server_tool_use_id
from ..protocol.schema.blocks import McpToolListingBlock
from ..protocol.schema.mcp import McpServer, McpToolset
from ..protocol.schema.request import CountTokensRequest, Tool
from .mcp_client import ListedTool, McpEndpoint, McpFailure, call_tool, list_tools, mcp_available

__all__ = ["McpConnector", "McpOffer", "McpTool", "mcp_tool_use_block", "with_mcp_tools", "RESULT_TYPE"]

#: The result block of a call (SDK ``BetaMCPToolResultBlock``).
RESULT_TYPE = "mcp_tool_result"


def mcp_tool_use_block(tool: ServerTool) -> dict[str, Any]:
    """The ``content_block_start`` block of a call of MCP tool ``tool``
    (input streamed as ``input_json_delta``, like ``tool_use``)."""
    call_id = "mcptoolu_" + server_tool_use_id().removeprefix("srvtoolu_")
    return {
        "type": "mcp_tool_use",
        "id": call_id,
        "name": tool.name,
        "server_name": tool.server_name,
        "input": {},
    }


class McpTool(Tool):
    """A tool of an MCP server, joined to the request's ``tools`` (module
    doc); ``server_tool`` makes its calls ``mcp_tool_use`` blocks the server
    runs (:func:`missive.tools.definitions.definition_of`). Built with
    ``model_construct``: the schema is the MCP server's, as it listed it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    server_tool: ServerTool | None = None


@dataclass
class McpOffer:
    """What the connector found for one request.

    Attributes:
        tools: the servers' tools to join the request's ``tools``.
        listings: an ``mcp_tool_listing`` block for each server asked for
            its listing (none for a pinned or replayed listing).
    """

    tools: list[McpTool] = field(default_factory=list)
    listings: list[dict[str, Any]] = field(default_factory=list)


def with_mcp_tools(request: CountTokensRequest, offer: McpOffer) -> CountTokensRequest:
    """``request`` with the offer's tools after its own (itself when none)."""
    if not offer.tools:
        return request
    return request.model_copy(update={"tools": [*(request.tools or []), *offer.tools]})


def _history_listings(request: CountTokensRequest) -> dict[str, list[ListedTool]]:
    """The latest ``mcp_tool_listing`` block of each server in the history."""
    found: dict[str, list[ListedTool]] = {}
    for message in request.messages:
        if message.role != "assistant":
            continue
        for block in message.blocks():
            if isinstance(block, McpToolListingBlock):
                found[block.mcp_server_name] = [
                    ListedTool(
                        str(t.get("name", "")),
                        str(t.get("description") or ""),
                        dict(t.get("input_schema") or {}),
                    )
                    for t in block.tools
                    if isinstance(t, dict) and t.get("name")
                ]
    return found


def _selected(server: McpServer, toolset: McpToolset | None, name: str) -> tuple[bool, bool]:
    """Whether tool ``name`` of ``server`` is offered, and whether it is
    deferred (module doc)."""
    if toolset is not None:
        default = toolset.default_config
        config = (toolset.configs or {}).get(name)
        enabled = default.enabled if default is not None and default.enabled is not None else True
        deferred = bool(default.defer_loading) if default is not None else False
        if config is not None:
            enabled = config.enabled if config.enabled is not None else enabled
            deferred = config.defer_loading if config.defer_loading is not None else deferred
        return enabled, deferred
    selection = server.tool_configuration
    if selection is None:
        return True, False
    if selection.enabled is False:
        return False, False
    return selection.allowed_tools is None or name in selection.allowed_tools, False


def _listing_block(server_name: str, listing: list[ListedTool]) -> dict[str, Any]:
    """The ``mcp_tool_listing`` block of a listing the server was asked for."""
    tools = [
        {"name": t.name, "description": t.description or None, "input_schema": t.input_schema}
        for t in listing
    ]
    return {"type": "mcp_tool_listing", "mcp_server_name": server_name, "tools": tools}


class McpConnector:
    """The MCP connector of one app (module doc).

    Args:
        config: ``[server_tools]`` (``mcp``, ``mcp_servers``, ``mcp_timeout``).
        policy: the media fetcher's address rules.
        key_servers: each ``[keys.NAME]``'s ``mcp_servers`` globs (None: the
            server-wide list).
    """

    def __init__(
        self,
        config: ServerToolsConfig,
        policy: FetchPolicy,
        key_servers: Mapping[str, list[str] | None] | None = None,
    ) -> None:
        self.config = config
        self.policy = policy
        self.key_servers = dict(key_servers or {})
        self.enabled = config.mcp and mcp_available()

    def ignored(self, request: CountTokensRequest) -> list[str]:
        """``missive-ignored`` paths of the connector's fields when it is off."""
        if self.enabled:
            return []
        paths = [f"mcp_servers.{i}" for i in range(len(request.mcp_servers or []))]
        return paths + [
            f'tools (tool type "mcp_toolset" for {t.mcp_server_name!r})' for t in request.mcp_toolsets or []
        ]

    def _allowed(self, key: str | None, url: str) -> bool:
        globs = self.key_servers.get(key or "")
        if globs is None:
            globs = self.config.mcp_servers
        return any(fnmatch.fnmatchcase(url, pattern) for pattern in globs)

    async def offer(
        self, request: CountTokensRequest, key: str | None, taken: set[str] | frozenset[str] = frozenset()
    ) -> McpOffer:
        """The MCP tools offered to the model and the listings fetched
        (module doc); ``key``: the request's key name (``""``: no key
        configured); ``taken``: names of the request's other tools.

        Raises:
            InvalidRequestError: a bad toolset, a duplicate name, a server
                that cannot be listed.
            PermissionDeniedError: a server the key may not use.
        """
        servers = request.mcp_servers or []
        offer = McpOffer()
        if not self.enabled or not (servers or request.mcp_toolsets):
            return offer
        by_name: dict[str, McpServer] = {}
        for i, server in enumerate(servers):
            if server.name in by_name:
                raise InvalidRequestError(
                    f"mcp_servers.{i}.name: MCP server names must be unique ({server.name!r})"
                )
            by_name[server.name] = server
        toolsets: dict[str, McpToolset] = {}
        for toolset in request.mcp_toolsets or []:
            if toolset.mcp_server_name not in by_name:
                raise InvalidRequestError(
                    f"tools: the mcp_toolset for {toolset.mcp_server_name!r} names no server of mcp_servers"
                )
            if toolset.mcp_server_name in toolsets:
                raise InvalidRequestError(f"tools: two mcp_toolset entries for {toolset.mcp_server_name!r}")
            toolsets[toolset.mcp_server_name] = toolset
        history = _history_listings(request)
        names = set(taken)
        for i, server in enumerate(servers):
            if not self._allowed(key, server.url):
                raise PermissionDeniedError(
                    f"mcp_servers.{i}.url: this API key may not use the MCP server {server.url} (the "
                    "operator lists the MCP servers a key may use: server_tools.mcp_servers, "
                    "keys.NAME.mcp_servers)"
                )
            chosen = toolsets.get(server.name)
            listing, fetched = await self._listing(i, server, chosen, history)
            if fetched:
                offer.listings.append(_listing_block(server.name, listing))
            for tool in listing:
                enabled, deferred = _selected(server, chosen, tool.name)
                if not enabled:
                    continue
                if tool.name in names:
                    raise InvalidRequestError(
                        f"mcp_servers.{i}: tool {tool.name!r} of MCP server {server.name!r} has the name of "
                        "another tool of the request"
                    )
                names.add(tool.name)
                schema = tool.input_schema or {"type": "object", "properties": {}}
                spec = ServerTool(tool.name, tool.description, schema, RESULT_TYPE, RESULT_TYPE, server.name)
                offer.tools.append(
                    McpTool.model_construct(
                        name=tool.name,
                        type=None,
                        description=tool.description,
                        input_schema=schema,
                        cache_control=None,
                        defer_loading=True if deferred else None,
                        server_tool=spec,
                    )
                )
        return offer

    async def _listing(
        self, i: int, server: McpServer, toolset: McpToolset | None, history: dict[str, list[ListedTool]]
    ) -> tuple[list[ListedTool], bool]:
        """The server's listing, and whether the server was asked for it."""
        if toolset is not None and toolset.tools is not None:
            pinned = [ListedTool(t.name, t.description or "", dict(t.input_schema)) for t in toolset.tools]
            return pinned, False
        if server.name in history:
            return history[server.name], False
        endpoint = McpEndpoint(server.name, server.url, server.authorization_token)
        try:
            return await list_tools(endpoint, self.policy, self.config.mcp_timeout), True
        except McpFailure as exc:
            raise InvalidRequestError(f"mcp_servers.{i}: {exc}") from None

    async def run(
        self, tool: ServerTool, tool_use_id: str, call_input: dict[str, Any], request: CountTokensRequest
    ) -> dict[str, Any]:
        """The ``mcp_tool_result`` block answering one call (never raises:
        a failure is the block's ``is_error`` text)."""
        server = next((s for s in request.mcp_servers or [] if s.name == tool.server_name), None)
        if server is None or not self.enabled:
            content, is_error = (
                [{"type": "text", "text": f"MCP server {tool.server_name!r} is not available"}],
                True,
            )
        else:
            endpoint = McpEndpoint(server.name, server.url, server.authorization_token)
            try:
                content, is_error = await call_tool(
                    endpoint, self.policy, self.config.mcp_timeout, tool.name, call_input
                )
            except McpFailure as exc:
                content, is_error = [{"type": "text", "text": str(exc)}], True
        return {"type": RESULT_TYPE, "tool_use_id": tool_use_id, "is_error": is_error, "content": content}
