"""A Responses ``web_search`` tool run by Missive's web search server tool
(``[server_tools] web_search``), through the official ``openai`` SDK: the
echo driver plays the model's search, a stand-in SearXNG on loopback
answers it, and the search comes back as a ``web_search_call`` item."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import openai
import pytest

from missive.testing import InProcessApp, in_process_app

RESULTS = [{"url": "https://tides.example/port", "title": "Port tides", "content": "High tide 06:42"}]
SEARCHED: list[str] = []


class _SearXNG(BaseHTTPRequestHandler):
    """SearXNG's JSON API (``/search?q=...&format=json``), answering :data:`RESULTS`."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        query = parse_qs(urlsplit(self.path).query)
        SEARCHED.append(query.get("q", [""])[0])
        body = json.dumps({"query": SEARCHED[-1], "results": RESULTS}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def app() -> Iterator[InProcessApp]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SearXNG)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = {
        "server_tools": {
            "web_search": "searxng",
            "search": {"url": f"http://127.0.0.1:{server.server_port}"},
        },
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 4000,
                "settings": {"capabilities": {"tool_choice": ["auto", "any", "tool", "none"]}},
            }
        },
    }
    try:
        with in_process_app(config) as made:
            yield made
    finally:
        server.shutdown()


SEARCH = json.dumps(
    {
        "script": [{"tool_call": {"name": "web_search", "arguments": ['{"query": ', '"tide times"}']}}],
        "then": [{"script": [{"text": "Found it."}]}],
    }
)


def test_search_runs_and_comes_back_as_a_web_search_call(client: openai.OpenAI) -> None:
    done = client.responses.create(
        model="echo",
        input=SEARCH,
        tools=[{"type": "web_search"}],
        include=["web_search_call.action.sources"],
    )
    call, message = done.output
    assert call.type == "web_search_call" and call.status == "completed" and call.id.startswith("ws_")
    assert call.action.type == "search" and call.action.query == "tide times"
    assert [s.url for s in call.action.sources or []] == ["https://tides.example/port"]
    assert message.type == "message" and done.output_text == "Found it."
    assert SEARCHED[-1] == "tide times" and done.tools[0].type == "web_search"
    # Without include: no sources, as OpenAI gives them.
    plain = client.responses.create(model="echo", input=SEARCH, tools=[{"type": "web_search"}])
    assert plain.output[0].action.sources is None  # type: ignore[union-attr]
    # Continued by id: the conversation kept the search and its result.
    after = client.responses.create(model="echo", previous_response_id=done.id, input="thanks")
    assert after.status == "completed"


def test_search_stream_events(client: openai.OpenAI) -> None:
    tools: Any = [{"type": "web_search"}]
    events = list(client.responses.create(model="echo", input=SEARCH, tools=tools, stream=True))
    kinds = [e.type for e in events]
    searching = kinds[kinds.index("response.output_item.added") :][:5]
    assert searching == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    done = next(e for e in events if e.type == "response.output_item.done")
    assert done.item.type == "web_search_call" and done.item.action.query == "tide times"  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    plain = client.responses.create(model="echo", input=SEARCH, tools=[{"type": "web_search"}])
    assert [i.type for i in final.output] == [i.type for i in plain.output] == ["web_search_call", "message"]
    assert final.output_text == "Found it."
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_call_sent_back_is_left_out(client: openai.OpenAI, raw: httpx.Client) -> None:
    done = client.responses.create(model="echo", input=SEARCH, tools=[{"type": "web_search"}])
    history: list[Any] = [{"role": "user", "content": "tides?"}]
    history += [i.model_dump(exclude_none=True) for i in done.output]
    body = {"model": "echo", "input": [*history, {"role": "user", "content": "ok"}], "store": False}
    response = raw.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert "input[1] (web_search_call)" in response.headers["missive-ignored"]
