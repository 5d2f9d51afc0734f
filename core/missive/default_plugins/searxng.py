"""The ``searxng`` search provider: ``web_search`` through a SearXNG instance.

SearXNG is a self-hosted metasearch engine with a JSON API and no key
(docs.searxng.org, "Search API"): ``GET /search?q=...&format=json`` answers
``{"query": ..., "results": [{"url", "title", "content", "publishedDate"?,
...}], ...}``. The instance must allow the ``json`` format (its
``settings.yml``: ``search: formats: [html, json]``); otherwise it answers
403, which is logged and the call answered ``unavailable``.

A default plugin rather than a distribution: it needs only ``httpx``, which
the core already depends on, and it does nothing until
``server_tools.web_search = "searxng"`` selects it. Settings
(``[server_tools.search]``):

* ``url`` (required): the instance's base URL, e.g. ``http://127.0.0.1:8888``
  (an operator's choice, so internal addresses are fine here);
* ``timeout``: seconds for one search (default 10);
* ``language``, ``categories``, ``safesearch``, ``time_range``: passed as
  SearXNG's parameters of the same names when set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ..kernel.hookspecs import hookimpl
from ..kernel.specs import SearchProviderSpec
from ..tools.search import SearchError, SearchProvider, SearchQuery, SearchResult

__all__ = ["SearxngProvider", "register_search_providers"]

_PASSED = ("language", "categories", "safesearch", "time_range")


@hookimpl
def register_search_providers() -> list[SearchProviderSpec]:
    return [
        SearchProviderSpec(
            name="searxng",
            factory="missive.default_plugins.searxng:SearxngProvider",
            description=(
                "A SearXNG instance's JSON API (self-hosted, no key): [server_tools.search] url = ..."
            ),
        )
    ]


class SearxngProvider(SearchProvider):
    """Searches one SearXNG instance (see module doc)."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        super().__init__(settings)
        url = settings.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError("server_tools.search.url: the SearXNG instance's http(s) URL is required")
        self.endpoint = url.rstrip("/") + "/search"
        timeout = settings.get("timeout", 10.0)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError("server_tools.search.timeout: a number of seconds > 0")
        self.timeout = float(timeout)
        self.params = {key: str(settings[key]) for key in _PASSED if settings.get(key) is not None}

    async def search(self, query: SearchQuery) -> Sequence[SearchResult]:
        params = {"q": query.query, "format": "json", **self.params}
        try:
            async with httpx.AsyncClient(timeout=self.timeout, trust_env=False) as client:
                response = await client.get(
                    self.endpoint, params=params, headers={"accept": "application/json"}
                )
        except httpx.HTTPError as exc:
            raise SearchError(
                f"SearXNG at {self.endpoint} did not answer: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code != 200:
            hint = " (is the json format enabled in its settings.yml?)" if response.status_code == 403 else ""
            raise SearchError(f"SearXNG at {self.endpoint} answered {response.status_code}{hint}")
        try:
            body = response.json()
        except ValueError:
            raise SearchError(f"SearXNG at {self.endpoint} answered something that is not JSON") from None
        items = body.get("results") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise SearchError(f"SearXNG at {self.endpoint} answered JSON without a results list")
        results: list[SearchResult] = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("url"), str):
                continue
            published = item.get("publishedDate")
            results.append(
                SearchResult(
                    url=item["url"],
                    title=str(item.get("title") or item["url"]),
                    snippet=str(item.get("content") or ""),
                    page_age=str(published) if published else None,
                )
            )
        return results
