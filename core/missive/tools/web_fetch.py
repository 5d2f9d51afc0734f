"""The ``web_fetch`` server tool, run by Missive (``server_tools.web_fetch = true``).

The rules are the API's (Anthropic docs, "Web fetch tool"; the SDK's
``WebFetchTool20250910Param``, ``BetaWebFetchBlock``,
``BetaWebFetchToolResultErrorCode``):

* the model's input is ``{"url": "..."}``; none, or not a string:
  ``invalid_tool_input``; longer than :data:`MAX_URL_CHARS`: ``url_too_long``;
* the URL must have appeared in the conversation before (a user message, a
  tool result, an earlier search or fetch result): the API does not let a
  model fetch URLs it made up (a prompt injection could otherwise send data
  anywhere): ``url_not_in_prior_context``;
* ``allowed_domains`` / ``blocked_domains`` of the tool definition:
  ``url_not_allowed``;
* the fetch itself is the media fetcher's (:func:`missive.media.fetch.fetch`:
  http(s) only, every address checked, private and loopback ones refused
  unless listed in ``media.fetch_allow``, redirects checked hop by hop, a
  timeout, a byte limit, ``server_tools.web_fetch_max_bytes``); a refusal or
  failure: ``url_not_accessible``;
* HTML becomes text (:func:`html_text`: the page's title and visible text),
  other ``text/*``, JSON and XML are kept as text, a PDF is returned as the
  API returns it (a base64 ``document``); anything else:
  ``unsupported_content_type``;
* ``max_content_tokens`` cuts the text (about 4 characters a token, the
  API's own limit is approximate too); ``citations: {"enabled": true}`` is
  carried on the document, as the API does.

The answer::

    {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_...",
     "content": {"type": "web_fetch_result", "url": "...", "retrieved_at": "...",
                 "content": {"type": "document", "title": "...",
                             "source": {"type": "text", "media_type": "text/plain", "data": "..."}}}}
"""

from __future__ import annotations

import base64
import logging
import re
from datetime import datetime, timezone
from html.parser import HTMLParser
from typing import Any

from ..media.fetch import FetchPolicy, fetch
from ..protocol.errors import MediaError
from .search import domain_allowed

__all__ = ["run_web_fetch", "html_text", "MAX_URL_CHARS", "CHARS_PER_TOKEN"]

log = logging.getLogger("missive.web_fetch")

#: Longest URL fetched (the API's documented limit).
MAX_URL_CHARS = 250
#: Characters a token, for ``max_content_tokens``.
CHARS_PER_TOKEN = 4

_TEXT_TYPES = ("application/json", "application/xml", "application/xhtml+xml", "application/javascript")
_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
_BLOCKS = frozenset(
    {
        "p",
        "div",
        "br",
        "li",
        "ul",
        "ol",
        "tr",
        "table",
        "section",
        "article",
        "header",
        "footer",
        "nav",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "pre",
        "blockquote",
        "hr",
        "main",
        "aside",
        "dd",
        "dt",
        "figcaption",
    }
)


class _TextParser(HTMLParser):
    """Collects a page's title and its visible text (the standard library's
    tokenizer does the parsing; this only chooses what to keep)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED:
            self._skip += 1
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED:
            self._skip = max(0, self._skip - 1)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.parts.append(data)


def html_text(html: str) -> tuple[str, str]:
    """The ``(title, text)`` of an HTML page: visible text, whitespace
    collapsed within lines, at most one blank line between blocks."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    lines = [re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parser.parts).split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return " ".join(parser.title.split()), text


def _error(code: str) -> dict[str, Any]:
    return {"type": "web_fetch_tool_result_error", "error_code": code}


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _document(content_type: str | None, data: bytes, limit: int | None) -> dict[str, Any] | None:
    """The ``document`` block of a fetched body, None for a type not read."""
    media = content_type or "text/plain"
    if media == "application/pdf":
        return {
            "type": "document",
            "source": {"type": "base64", "media_type": media, "data": base64.b64encode(data).decode("ascii")},
        }
    if media in ("text/html", "application/xhtml+xml"):
        title, text = html_text(_decode(data))
    elif media.startswith("text/") or media in _TEXT_TYPES or media.endswith(("+json", "+xml")):
        title, text = "", _decode(data)
    else:
        return None
    if limit is not None and len(text) > limit:
        text = text[:limit]
    document: dict[str, Any] = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": text},
    }
    if title:
        document["title"] = title
    return document


async def run_web_fetch(
    call_input: dict[str, Any],
    options: dict[str, Any],
    prior_context: str,
    *,
    policy: FetchPolicy,
    max_bytes: int,
) -> dict[str, Any]:
    """The ``content`` of the result block of one ``web_fetch`` call.

    Args:
        call_input: the model's input (``{"url": ...}``).
        options: the tool definition's fields (``allowed_domains``,
            ``blocked_domains``, ``max_content_tokens``, ``citations``).
        prior_context: every text of the conversation before the call, in
            which the URL must appear.
        policy: the media fetcher's rules (``[media]``).
        max_bytes: the largest body read.
    """
    url = call_input.get("url")
    if not isinstance(url, str) or not url.strip():
        return _error("invalid_tool_input")
    url = url.strip()
    if len(url) > MAX_URL_CHARS:
        return _error("url_too_long")
    if url not in prior_context and url.rstrip("/") not in prior_context:
        return _error("url_not_in_prior_context")
    allowed = [d for d in options.get("allowed_domains") or [] if isinstance(d, str)]
    blocked = [d for d in options.get("blocked_domains") or [] if isinstance(d, str)]
    if not domain_allowed(url, allowed, blocked):
        return _error("url_not_allowed")
    try:
        fetched = await fetch(url, policy=policy, max_bytes=max_bytes, path="web_fetch")
    except MediaError as exc:
        log.info("web_fetch of %s refused or failed: %s", url, exc.message)
        return _error("url_not_accessible")
    if not domain_allowed(fetched.url, allowed, blocked):  # redirected elsewhere
        return _error("url_not_allowed")
    max_tokens = options.get("max_content_tokens")
    limit = max_tokens * CHARS_PER_TOKEN if isinstance(max_tokens, int) and max_tokens > 0 else None
    document = _document(fetched.content_type, fetched.data, limit)
    if document is None:
        return _error("unsupported_content_type")
    citations = options.get("citations")
    if isinstance(citations, dict) and citations.get("enabled"):
        document["citations"] = {"enabled": True}
    retrieved = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"type": "web_fetch_result", "url": fetched.url, "retrieved_at": retrieved, "content": document}
