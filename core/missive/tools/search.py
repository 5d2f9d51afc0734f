"""The ``web_search`` server tool, run by a search provider plugin.

A provider (hook ``register_search_providers``, docs/hooks.md) is a
:class:`SearchProvider` subclass built once with the ``[server_tools.search]``
settings; the server calls :meth:`SearchProvider.search` for every
``web_search`` call the model makes, when ``server_tools.web_search`` names
it. Unconfigured, every call is answered ``unavailable``
(:mod:`missive.tools.server`).

The answer is the API's result block (Anthropic docs, "Web search tool";
the SDK's ``WebSearchResultBlock``)::

    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_...",
     "content": [{"type": "web_search_result", "url": "...", "title": "...",
                  "page_age": "...", "encrypted_content": "..."}]}

``encrypted_content`` is opaque to clients in the API: the page content the
model reads when the block comes back. Missive puts the result's snippet
there, base64-encoded (:func:`encode_content`), and renders it under the
result's link for the model (:func:`missive.tools.server.result_text`), in
this message and when a client sends the block back. Errors use the API's
codes: ``invalid_tool_input`` (no query), ``query_too_long``, ``unavailable``
(the provider failed).

``allowed_domains`` and ``blocked_domains`` of the tool definition are
passed to the provider and applied again to what it returns
(:func:`domain_matches`), so a provider that ignores them cannot leak a
blocked domain into the answer.
"""

from __future__ import annotations

import abc
import base64
import binascii
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "SearchQuery",
    "SearchResult",
    "SearchProvider",
    "SearchError",
    "domain_matches",
    "domain_allowed",
    "encode_content",
    "decode_content",
    "search_result_blocks",
    "MAX_QUERY_CHARS",
]

log = logging.getLogger("missive.search")

#: Longest query passed to a provider; longer: ``query_too_long``.
MAX_QUERY_CHARS = 2000


class SearchError(Exception):
    """A provider could not search (unreachable, a bad answer); the call is
    answered ``unavailable`` and the message is logged."""


@dataclass(frozen=True)
class SearchQuery:
    """One ``web_search`` call.

    Attributes:
        query: what the model asked for.
        max_results: results wanted at most.
        allowed_domains: only results from these domains (and subdomains).
        blocked_domains: never results from these.
        user_location: the tool's ``user_location`` (``city``, ``country``...),
            for providers that localize results.
    """

    query: str
    max_results: int = 10
    allowed_domains: tuple[str, ...] = ()
    blocked_domains: tuple[str, ...] = ()
    user_location: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResult:
    """One result: its page's ``url`` and ``title``, a ``snippet`` of its
    content (what the model reads), and ``page_age`` (free text, e.g. a
    date) when the engine knows it."""

    url: str
    title: str
    snippet: str = ""
    page_age: str | None = None


class SearchProvider(abc.ABC):
    """Base class of search providers. Built once per server with the
    ``[server_tools.search]`` settings (a dict); raise ``ValueError`` there
    for a bad setting (the server then refuses to start, naming it)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.settings = dict(settings)

    @abc.abstractmethod
    async def search(self, query: SearchQuery) -> Sequence[SearchResult]:
        """The results for ``query``, best first.

        Raises:
            SearchError: the engine could not answer.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional
        """Release connections (at shutdown)."""


def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def domain_matches(url_or_host: str, domains: Sequence[str]) -> bool:
    """Whether the URL's host (or the host itself) is one of ``domains`` or a
    subdomain of one (``example.com`` matches ``docs.example.com``).
    A domain given with a path (``example.com/blog``) matches by its host."""
    host = _host(url_or_host) if "//" in url_or_host else url_or_host.lower().rstrip(".")
    for domain in domains:
        d = domain.strip().lower()
        d = _host(d) if "//" in d else d.split("/", 1)[0]
        d = d.rstrip(".")
        if d and (host == d or host.endswith("." + d)):
            return True
    return False


def domain_allowed(url: str, allowed: Sequence[str], blocked: Sequence[str]) -> bool:
    """The tool's domain rules: in ``allowed`` when that list is given, never in ``blocked``."""
    if allowed and not domain_matches(url, allowed):
        return False
    return not (blocked and domain_matches(url, blocked))


def encode_content(snippet: str) -> str:
    """The ``encrypted_content`` of a result: its snippet, base64 (UTF-8)."""
    return base64.b64encode(snippet.encode("utf-8")).decode("ascii")


def decode_content(value: object) -> str:
    """The snippet :func:`encode_content` wrote, or "" for anything else
    (the API's own encrypted content, which only the API reads)."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return ""


def search_result_blocks(results: Sequence[SearchResult], query: SearchQuery) -> list[dict[str, Any]]:
    """The ``web_search_result`` blocks of ``results`` that the query's
    domain rules allow, at most ``query.max_results``."""
    blocks: list[dict[str, Any]] = []
    for result in results:
        if not result.url or not domain_allowed(result.url, query.allowed_domains, query.blocked_domains):
            continue
        blocks.append(
            {
                "type": "web_search_result",
                "url": result.url,
                "title": result.title,
                "page_age": result.page_age,
                "encrypted_content": encode_content(result.snippet),
            }
        )
        if len(blocks) >= query.max_results:
            break
    return blocks
