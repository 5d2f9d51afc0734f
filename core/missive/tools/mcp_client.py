"""Talking to one remote MCP server: list its tools, call one.

Built on the official ``mcp`` library (``missive-server[mcp]``): its
``Client`` over the streamable HTTP transport. What Missive adds:

* the request's ``authorization_token`` is sent as ``Authorization: Bearer``,
  as the API does (Anthropic docs, "MCP connector");
* every connection goes to an address checked by the media fetcher's rules
  (:func:`missive.media.fetch.checked_address`: private and loopback
  addresses refused unless listed in ``media.fetch_allow``), and to that
  address itself (the host's name kept in ``Host`` and the TLS server name),
  so DNS rebinding cannot reach an address the check refused;
* proxies from the environment are not used, and each listing or call has
  ``server_tools.mcp_timeout`` seconds in all.

Failures are :class:`McpFailure`, whose message names the server and says
what went wrong without the token.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2

from ..media.fetch import FetchPolicy, checked_address
from ..protocol.errors import MediaError

__all__ = ["McpFailure", "McpEndpoint", "ListedTool", "list_tools", "call_tool", "mcp_available"]

log = logging.getLogger("missive.mcp")


def mcp_available() -> bool:
    """Whether the ``mcp`` library is installed (``missive-server[mcp]``)."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return False
    return True


class McpFailure(Exception):
    """A listing or call that failed; the message is for the model or the client."""


@dataclass(frozen=True)
class McpEndpoint:
    """One ``mcp_servers`` entry, as connected to.

    Attributes:
        name: the server's name in the request.
        url: its streamable HTTP endpoint.
        token: the ``authorization_token`` (sent as a Bearer token), or None.
    """

    name: str
    url: str
    token: str | None = None


@dataclass(frozen=True)
class ListedTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Sends each request to the checked address of its host (module doc)."""

    def __init__(self, policy: FetchPolicy) -> None:
        self._policy = policy
        self._inner = httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = httpx.URL(str(request.url))
        try:
            ip = await checked_address(url, self._policy, "mcp_servers")
        except MediaError as exc:
            raise McpFailure(exc.message.removeprefix("mcp_servers: ")) from None
        host_header = url.netloc.decode("ascii")
        request.url = request.url.copy_with(host=ip)
        request.headers["host"] = host_header
        if url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": url.host}
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def _session(endpoint: McpEndpoint, policy: FetchPolicy, timeout: float) -> AsyncIterator[Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
    async with httpx2.AsyncClient(
        headers=headers, transport=_PinnedTransport(policy), timeout=timeout, trust_env=False
    ) as http:
        transport = streamable_http_client(endpoint.url, http_client=http)
        async with Client(transport, read_timeout_seconds=timeout, cache=None) as client:
            yield client


def _failure(endpoint: McpEndpoint, what: str, exc: BaseException) -> McpFailure:
    """The :class:`McpFailure` of ``exc`` (an exception group: its first leaf)."""
    leaves = getattr(exc, "exceptions", None)  # an exception group's
    while isinstance(leaves, tuple) and leaves:
        exc = leaves[0]
        leaves = getattr(exc, "exceptions", None)
    if isinstance(exc, McpFailure):
        return McpFailure(f"MCP server '{endpoint.name}': {exc}")
    if isinstance(exc, TimeoutError):
        return McpFailure(f"MCP server '{endpoint.name}' did not answer {what} in time")
    log.info("MCP server %s: %s failed", endpoint.name, what, exc_info=exc)
    detail = str(exc).strip() or type(exc).__name__
    return McpFailure(f"MCP server '{endpoint.name}' failed {what}: {detail[:300]}")


async def list_tools(endpoint: McpEndpoint, policy: FetchPolicy, timeout: float) -> list[ListedTool]:
    """Every tool the server lists (all pages).

    Raises:
        McpFailure: unreachable, refused address, protocol error, timeout.
    """
    try:
        with anyio.fail_after(timeout):
            async with _session(endpoint, policy, timeout) as client:
                tools: list[ListedTool] = []
                cursor: str | None = None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += [
                        ListedTool(t.name, t.description or "", dict(t.input_schema)) for t in page.tools
                    ]
                    cursor = page.next_cursor
                    if not cursor:
                        return tools
    except Exception as exc:  # noqa: BLE001 - any failure of a remote server is the client's to see
        raise _failure(endpoint, "to list its tools", exc) from None


async def call_tool(
    endpoint: McpEndpoint, policy: FetchPolicy, timeout: float, name: str, arguments: dict[str, Any]
) -> tuple[list[dict[str, Any]], bool]:
    """Run tool ``name``: its result as ``text`` blocks, and whether it is an error.

    Text content is kept; other content (images, resources) is named, not
    shown (an ``mcp_tool_result`` holds text blocks only).

    Raises:
        McpFailure: unreachable, refused address, protocol error, timeout.
    """
    try:
        with anyio.fail_after(timeout):
            async with _session(endpoint, policy, timeout) as client:
                result = await client.call_tool(name, arguments)
    except Exception as exc:  # noqa: BLE001 - see list_tools
        raise _failure(endpoint, f"to run {name}", exc) from None
    blocks: list[dict[str, Any]] = []
    for item in result.content:
        text = getattr(item, "text", None)
        if isinstance(text, str):
            blocks.append({"type": "text", "text": text})
        else:
            blocks.append({"type": "text", "text": f"({getattr(item, 'type', 'binary')} content, not shown)"})
    return blocks, bool(result.is_error)
