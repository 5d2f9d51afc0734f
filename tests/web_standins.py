"""Local stand-ins for the web: a small site and a SearXNG instance, on loopback.

No test leaves the machine: ``web_fetch`` fetches pages of :class:`StandIn`
(its address is loopback, so the server under test lists it in
``media.fetch_allow``), and the ``searxng`` provider searches its
``/search`` endpoint, which answers as SearXNG's JSON API does
(``/search?q=...&format=json`` -> ``{"query", "results": [{"url", "title",
"content", ...}]}``). Every request is recorded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

PAGE_HTML = """<!doctype html><html><head><title>Tide tables of Port Missive</title>
<style>body { color: red }</style><script>var hidden = "not shown";</script></head>
<body><nav>Home | About</nav><h1>Tides</h1><p>High tide at <b>06:42</b> and 19:05.</p>
<p>Low tide at 12:51.</p></body></html>"""


class StandIn:
    """A loopback HTTP server: ``/page.html`` (HTML), ``/notes.txt`` (text),
    ``/image.bin`` (an unsupported type), ``/redirect`` (to ``/page.html``),
    ``/search`` (SearXNG's JSON API, answering :attr:`results` whatever the
    query; ``format`` other than ``json`` is a 403, as SearXNG does when the
    format is not enabled). :attr:`requests` holds ``(path, query)`` pairs."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.results: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(
                self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                standin.requests.append((parts.path, query))
                if parts.path == "/page.html":
                    self._send(200, PAGE_HTML.encode(), "text/html; charset=utf-8")
                elif parts.path == "/notes.txt":
                    self._send(200, b"plain notes, line one\nline two", "text/plain")
                elif parts.path == "/image.bin":
                    self._send(200, b"\x00\x01\x02", "application/octet-stream")
                elif parts.path == "/redirect":
                    self._send(302, b"", "text/plain", {"location": "/page.html"})
                elif parts.path == "/search":
                    if query.get("format") != ["json"]:
                        self._send(403, b"format not allowed", "text/plain")
                        return
                    body = {
                        "query": query.get("q", [""])[0],
                        "number_of_results": len(standin.results),
                        "results": standin.results,
                    }
                    self._send(200, json.dumps(body).encode(), "application/json")
                else:
                    self._send(404, b"not found", "text/plain")

        return Handler

    def searched(self) -> list[str]:
        """The queries ``/search`` was asked, in order."""
        return [q.get("q", [""])[0] for path, q in self.requests if path == "/search"]

    @contextmanager
    def running(self) -> Iterator[StandIn]:
        thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)


def server_tools_config(standin: StandIn, *, web_fetch: bool = True, search: bool = True) -> dict[str, Any]:
    """The ``[server_tools]`` and ``[media]`` tables of a server whose web
    is the stand-in."""
    tools: dict[str, Any] = {"web_fetch": web_fetch}
    if search:
        tools["web_search"] = "searxng"
        tools["search"] = {"url": standin.url}
    return {"server_tools": tools, "media": {"fetch_allow": ["127.0.0.1"]}}
