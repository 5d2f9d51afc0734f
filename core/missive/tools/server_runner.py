"""Running the server tools Missive can run: ``web_fetch``, ``web_search`` and tool search.

One :class:`ServerToolRunner` per app, built from ``[server_tools]``
(:class:`~missive.config.ServerToolsConfig`) and ``[media]`` (the fetcher's
address rules). The pipeline (:mod:`missive.messages.stream`) asks it to answer
each ``server_tool_use`` call; a tool it does not run (not configured) keeps
the API's ``unavailable`` answer (:func:`missive.tools.server.error_result`).
The tool search tools (:mod:`missive.tools.tool_search`) need no setting:
they search the request's own deferred tools, and always run.

A request that forces a server tool the server runs (``tool_choice: {"type":
"tool", "name": "web_search"}``, as Claude Code's WebSearch sends it) on a
driver that cannot force that tool is satisfied by the server itself
(:func:`forced_call_input`): the call's input is taken from the last user
message, the tool runs, and the model answers after the result.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from ..config import ConfigError, ServerToolsConfig
from ..driver.capabilities import Capabilities
from ..driver.tools import ServerTool, ToolChoice, ToolDefinition
from ..kernel.specs import SearchProviderSpec, load_object
from ..media.fetch import FetchPolicy
from ..protocol.schema.blocks import TextBlock
from ..protocol.schema.request import CountTokensRequest
from .definitions import choice_after_server_call
from .mcp import McpConnector
from .search import MAX_QUERY_CHARS, SearchError, SearchProvider, SearchQuery, search_result_blocks
from .server import error_result
from .tool_search import TOOL_SEARCH_TOOLS, run_tool_search
from .web_fetch import run_web_fetch

__all__ = ["ServerToolRunner", "forced_call_input", "build_search_provider", "server_first", "prior_context"]

log = logging.getLogger("missive.server_tools")

#: Claude Code's WebSearch request says "Perform a web search for the query: X".
_QUERY_PREFIX = re.compile(r"^\s*perform a web search for the query:\s*", re.IGNORECASE)
_URL = re.compile(r"https?://[^\s<>\"'`)\]]+")


def build_search_provider(
    config: ServerToolsConfig, specs: Mapping[str, SearchProviderSpec]
) -> SearchProvider | None:
    """The provider ``server_tools.web_search`` names, built with its settings.

    Raises:
        ConfigError: no plugin registers it, or it refuses its settings.
    """
    name = config.web_search
    if name is None:
        return None
    spec = specs.get(name)
    if spec is None:
        known = ", ".join(sorted(specs)) or "none"
        raise ConfigError(f"server_tools.web_search: no search provider named {name!r} (registered: {known})")
    try:
        cls = load_object(spec.factory)
        provider = cls(config.search)
    except (ImportError, AttributeError, ValueError, TypeError) as exc:
        raise ConfigError(f"server_tools.web_search: the {name!r} provider cannot start: {exc}") from None
    if not isinstance(provider, SearchProvider):
        raise ConfigError(f"server_tools.web_search: {spec.factory} is not a SearchProvider")
    return provider


def _tool_options(request: CountTokensRequest, name: str) -> dict[str, Any]:
    """The request's definition fields of server tool ``name`` (domain lists...)."""
    for tool in request.tools or []:
        if tool.name == name:
            return dict(tool.model_extra or {})
    return {}


def prior_context(request: CountTokensRequest, answer: list[dict[str, Any]]) -> str:
    """Every text a fetched URL may come from: the system prompt, the
    messages (user text, tool results, earlier search and fetch results) and
    the answer so far (results of this message's earlier calls)."""
    return request.model_dump_json(include={"system", "messages"}) + json.dumps(answer, ensure_ascii=False)


class ServerToolRunner:
    """Runs ``web_fetch`` and ``web_search`` calls (see module doc).

    Args:
        config: ``[server_tools]``.
        policy: the media fetcher's rules (``[media]``).
        provider: the search provider, None when none is configured.
        mcp: the MCP connector (:mod:`missive.tools.mcp`; None: off).
    """

    def __init__(
        self,
        config: ServerToolsConfig,
        policy: FetchPolicy,
        provider: SearchProvider | None,
        mcp: McpConnector | None = None,
    ) -> None:
        self.config = config
        self.policy = policy
        self.provider = provider
        self.mcp = mcp or McpConnector(config, policy)

    def runs(self, name: str) -> bool:
        """Whether calls of server tool ``name`` are run here (else ``unavailable``)."""
        if name == "web_fetch":
            return self.config.web_fetch
        if name == "web_search":
            return self.provider is not None
        return name in TOOL_SEARCH_TOOLS

    async def run(
        self,
        tool: ServerTool,
        tool_use_id: str,
        call_input: dict[str, Any],
        request: CountTokensRequest,
        answer: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """The result block answering one call (an error block when it cannot run)."""
        if tool.server_name is not None:
            return await self.mcp.run(tool, tool_use_id, call_input, request)
        options = _tool_options(request, tool.name)
        if tool.name in TOOL_SEARCH_TOOLS:
            content = await run_tool_search(tool, call_input, request)
            return {"type": tool.result_type, "tool_use_id": tool_use_id, "content": content}
        if tool.name == "web_fetch" and self.config.web_fetch:
            content = await run_web_fetch(
                call_input,
                options,
                prior_context(request, answer),
                policy=self.policy,
                max_bytes=self.config.web_fetch_max_bytes,
            )
            return {"type": tool.result_type, "tool_use_id": tool_use_id, "content": content}
        if tool.name == "web_search" and self.provider is not None:
            return {
                "type": tool.result_type,
                "tool_use_id": tool_use_id,
                "content": await self._search(tool, call_input, options),
            }
        return error_result(tool, tool_use_id)

    async def _search(self, tool: ServerTool, call_input: dict[str, Any], options: dict[str, Any]) -> Any:
        assert self.provider is not None
        query = call_input.get("query")
        if not isinstance(query, str) or not query.strip():
            return {"type": tool.error_type, "error_code": "invalid_tool_input"}
        if len(query) > MAX_QUERY_CHARS:
            return {"type": tool.error_type, "error_code": "query_too_long"}
        location = options.get("user_location")
        search = SearchQuery(
            query=query.strip(),
            max_results=self.config.max_results,
            allowed_domains=tuple(d for d in options.get("allowed_domains") or [] if isinstance(d, str)),
            blocked_domains=tuple(d for d in options.get("blocked_domains") or [] if isinstance(d, str)),
            user_location=location if isinstance(location, dict) else {},
        )
        try:
            results = await self.provider.search(search)
        except SearchError as exc:
            log.warning("web_search failed: %s", exc)
            return {"type": tool.error_type, "error_code": "unavailable"}
        except Exception:  # noqa: BLE001 - a provider's bug must not fail the answer
            log.exception("the search provider failed")
            return {"type": tool.error_type, "error_code": "unavailable"}
        return search_result_blocks(results, search)


def forced_call_input(tool: ServerTool, request: CountTokensRequest) -> dict[str, Any] | None:
    """The input of a forced call the server makes itself, from the last user
    message's text: ``{"query": ...}`` for web search (Claude Code's
    "Perform a web search for the query: " left out), ``{"url": ...}``, its
    first URL, for web fetch. None when the message gives nothing to use."""
    user = next((m for m in reversed(request.messages) if m.role == "user"), None)
    if user is None:
        return None
    text = "\n".join(b.text for b in user.blocks() if isinstance(b, TextBlock)).strip()
    if tool.name == "web_search":
        query = _QUERY_PREFIX.sub("", text).strip()
        return {"query": query} if query else None
    if tool.name == "web_fetch":
        match = _URL.search(text)
        return {"url": match.group(0).rstrip(".,;:")} if match else None
    return None


def server_first(
    request: CountTokensRequest,
    capabilities: Capabilities,
    tools: tuple[ToolDefinition, ...],
    choice: ToolChoice,
    runner: ServerToolRunner | None,
) -> tuple[tuple[str, dict[str, Any]] | None, tuple[ToolDefinition, ...], ToolChoice]:
    """``(server_call, tools, tool_choice)`` of a request that forces a
    server tool the server runs on a driver that cannot force it (Claude
    Code's WebSearch: ``tool_choice: {"type": "tool", "name":
    "web_search"}``; the openai driver declares no ``tool`` mode): the call
    the server makes itself (:func:`forced_call_input`), and the tools and
    choice of the answer after its result (:func:`choice_after_server_call`:
    ``auto``, else ``none``, else no tools). Anything else is returned as
    it came, with no call: the model writes the forced call itself."""
    if choice.mode != "tool" or runner is None or "tool" in capabilities.tool_choice:
        return None, tools, choice
    tool = next((t for t in tools if t.name == choice.name), None)
    if tool is None or tool.server is None or not runner.runs(tool.server.name):
        return None, tools, choice
    call_input = forced_call_input(tool.server, request)
    if call_input is None:
        return None, tools, choice
    after = choice_after_server_call(choice, capabilities, tools)
    if after is None:
        return (tool.name, call_input), (), ToolChoice()
    return (tool.name, call_input), tools, after
