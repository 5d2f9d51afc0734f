"""OpenAI's ``web_search`` tool run by Missive's own web search server tool.

Where the operator turned web search on (``[server_tools] web_search``, a
search provider: docs/tools.md, "Server tools";
:attr:`missive.api.Gateway.server_tools`), a Responses ``web_search`` tool
(the SDK's ``WebSearchToolParam``: ``filters.allowed_domains``,
``user_location``, ``search_context_size``) is offered as the Messages
``web_search_20250305`` server tool (:func:`search_tool`): the model's
searches run inside the answer, as they do on OpenAI's side. Elsewhere it
is left out and reported (:mod:`.responses_tools`).

A search comes back as OpenAI's ``web_search_call`` output item (the SDK's
``ResponseFunctionWebSearch``: ``id``, ``status``, ``action`` ``{"type":
"search", "query", "sources"}``, ``sources`` only when ``include`` asks for
``web_search_call.action.sources``, as OpenAI gives them): the
``server_tool_use`` block is the call, its ``web_search_tool_result`` block
gives the sources (the results' URLs) and ends it. Streamed
(:class:`SearchEvents`): ``response.output_item.added``,
``response.web_search_call.in_progress`` when the call starts,
``response.web_search_call.searching`` once its query is whole,
``response.web_search_call.completed`` and ``response.output_item.done``
with the result (the SDK's ``ResponseWebSearchCall*Event`` types:
``item_id``, ``output_index``, ``sequence_number``).

A ``web_search_call`` item sent back as input holds no results to show the
model again: it is left out and reported (:mod:`.responses_items`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .common import checked, optional, report_unknown

__all__ = ["SEARCH_TOOL", "search_tool", "call_item", "sources_of", "SearchEvents"]

#: The Messages server tool a Responses ``web_search`` tool becomes.
SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search"}
_FIELDS = frozenset({"type", "filters", "user_location", "search_context_size", "external_web_access"})
_LOCATION = ("type", "city", "region", "country", "timezone")


def search_tool(tool: dict[str, Any], where: str, ignored: list[str]) -> dict[str, Any]:
    """The Messages ``web_search`` server tool of a Responses ``web_search`` tool."""
    out: dict[str, Any] = dict(SEARCH_TOOL)
    filters = optional(tool, "filters", "object", f"{where}.filters") or {}
    domains = filters.get("allowed_domains")
    if domains:
        out["allowed_domains"] = checked(domains, "list", f"{where}.filters.allowed_domains")
    report_unknown(filters, frozenset({"allowed_domains"}), f"{where}.filters", ignored)
    location = optional(tool, "user_location", "object", f"{where}.user_location")
    if location:
        out["user_location"] = {k: location[k] for k in _LOCATION if location.get(k) is not None}
    if tool.get("search_context_size") not in (None, "medium"):
        ignored.append(f"{where}.search_context_size")
    report_unknown(tool, _FIELDS, where, ignored)
    return out


def sources_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``sources`` of a ``web_search_tool_result`` block (none for an error)."""
    content = result.get("content")
    if not isinstance(content, list):
        return []
    return [{"type": "url", "url": r["url"]} for r in content if isinstance(r, dict) and r.get("url")]


def call_item(
    item_id: str, block: dict[str, Any], status: str, sources: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The ``web_search_call`` item of a ``server_tool_use`` block (its
    ``input``, or its ``arguments`` text while streamed); ``sources`` None:
    not asked for."""
    query = (block.get("input") or {}).get("query")
    if query is None and block.get("arguments"):
        try:
            query = json.loads(block["arguments"]).get("query")
        except (ValueError, AttributeError):
            query = None
    action: dict[str, Any] = {"type": "search", "query": query or ""}
    if sources is not None:
        action["sources"] = sources
    return {"id": item_id, "type": "web_search_call", "status": status, "action": action}


Event = Callable[..., dict[str, Any]]


class SearchEvents:
    """The stream events of web searches, for :class:`.responses_stream.ResponseConverter`:
    ``event(kind, **fields)`` numbers an event, ``output`` is the response's
    output so far, ``item_id(index)`` an output item's id."""

    def __init__(self, event: Event, output: list[dict[str, Any]], item_id: Callable[[int], str]) -> None:
        self._event = event
        self._output = output
        self._item_id = item_id
        self.sources = False
        #: a call's block index -> (output index, block); a call's id -> its output index
        self._calls: dict[int, tuple[int, dict[str, Any]]] = {}
        self._by_id: dict[str, int] = {}

    def start(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        output_index = len(self._output)
        call = {"type": "server_tool_use", "id": block["id"], "name": block["name"], "arguments": ""}
        item = call_item(self._item_id(output_index), call, "in_progress", None)
        self._output.append(item)
        self._calls[index] = (output_index, call)
        self._by_id[block["id"]] = output_index
        where = {"item_id": item["id"], "output_index": output_index}
        return [
            self._event("response.output_item.added", output_index=output_index, item=item),
            self._event("response.web_search_call.in_progress", **where),
        ]

    def delta(self, index: int, partial_json: str) -> bool:
        """Take a fragment of a call's input; whether ``index`` is a call."""
        if index not in self._calls:
            return False
        self._calls[index][1]["arguments"] += partial_json
        return True

    def stop(self, index: int) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """``(events, the call's block as the answer holds it)`` at the end of block ``index``."""
        if index not in self._calls:
            return [], None
        output_index, call = self._calls.pop(index)
        item = call_item(self._item_id(output_index), call, "searching", None)
        self._output[output_index] = item
        where = {"item_id": item["id"], "output_index": output_index}
        try:
            arguments = json.loads(call["arguments"] or "{}")
        except ValueError:
            arguments = {}
        block = {"type": "server_tool_use", "id": call["id"], "name": call["name"], "input": arguments}
        return [self._event("response.web_search_call.searching", **where)], block

    def result(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        """The events that end the call a ``web_search_tool_result`` block answers."""
        output_index = self._by_id.pop(block.get("tool_use_id", ""), None)
        if output_index is None:
            return []
        item = dict(self._output[output_index])
        item["status"] = "completed"
        if self.sources:
            item["action"] = {**item["action"], "sources": sources_of(block)}
        self._output[output_index] = item
        where = {"item_id": item["id"], "output_index": output_index}
        return [
            self._event("response.web_search_call.completed", **where),
            self._event("response.output_item.done", output_index=output_index, item=item),
        ]
