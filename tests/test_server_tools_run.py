"""Server tools the server runs (``[server_tools]``), through the official SDK.

``web_fetch`` fetches pages of a loopback stand-in site (listed in
``media.fetch_allow``), ``web_search`` searches a stand-in SearXNG
(:mod:`web_standins`); the echo driver plays the model's calls, and its
``script_file`` answers after each result by what the result showed the
model (``match``: a substring of the result as rendered), so each answer
says what the model read. No test leaves the machine.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import anthropic.types as api
import pytest
from server_tool_defs import WEB_FETCH, WEB_SEARCH
from web_standins import StandIn, server_tools_config

from missive.testing import in_process_app
from missive_echo import script
from missive_openai.testing import FakeChatServer

TOOLS = {"tool_choice": ["auto", "any", "tool", "none"]}
#: The model's answers after a result, by what the result showed it.
AFTER_RESULT = [
    {"match": "High tide at 06:42", "script": [{"text": "The page says 06:42."}]},
    {"match": "High tide 06:42", "script": [{"text": "Found it."}]},
    {"match": "returned an error", "script": [{"text": "The page was not read."}]},
]


@pytest.fixture(scope="module")
def web() -> Iterator[StandIn]:
    with StandIn().running() as standin:
        standin.results = [
            {
                "url": "https://tides.example/port",
                "title": "Port tides",
                "content": "High tide 06:42",
                "publishedDate": "2026-11-30",
            },
            {"url": "https://blocked.example/x", "title": "Blocked", "content": "never shown"},
        ]
        yield standin


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeChatServer]:
    with FakeChatServer(vllm=False, max_model_len=4096) as server:
        yield server


@pytest.fixture(scope="module")
def echo_settings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("echo") / "script.json"
    path.write_text(json.dumps(AFTER_RESULT))
    return {"capabilities": TOOLS, "script_file": str(path)}


@pytest.fixture(scope="module")
def client(
    web: StandIn, fake: FakeChatServer, echo_settings: dict[str, Any]
) -> Iterator[anthropic.Anthropic]:
    config: dict[str, Any] = {
        **server_tools_config(web),
        "models": {
            "echo": {"driver": "echo", "context_window": 4000, "settings": echo_settings},
            "gen": {
                "driver": "openai",
                "context_window": 4096,
                "settings": {"base_url": fake.url, "model": "fake-model"},
            },
        },
    }
    with in_process_app(config) as app:
        yield app.sdk(timeout=60)


def fetch_call(url: str) -> dict[str, Any]:
    """The model's ``web_fetch`` call; the URL is split between two argument
    fragments, so the script (a user message) does not hold it whole."""
    half = len(url) // 2
    return {"tool_call": {"name": "web_fetch", "arguments": [f'{{"url": "{url[:half]}', f'{url[half:]}"}}']}}


def ask(
    client: anthropic.Anthropic,
    text: str,
    steps: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    stream: bool = False,
) -> api.Message:
    """``text`` (where a URL may appear before the call), then the model's
    scripted ``steps``; it answers after the result by :data:`AFTER_RESULT`."""
    messages = [
        {"role": "user", "content": text},
        {"role": "assistant", "content": "Let me see."},
        {"role": "user", "content": script(*steps)},
    ]
    kwargs: dict[str, Any] = dict(model="echo", max_tokens=200, tools=tools or [WEB_FETCH], messages=messages)
    if stream:
        with client.messages.stream(**kwargs) as s:
            return s.get_final_message()
    return client.messages.create(**kwargs)


@pytest.mark.parametrize("stream", [False, True])
def test_web_fetch_reads_the_page_and_the_model_goes_on(
    client: anthropic.Anthropic, web: StandIn, stream: bool
) -> None:
    url = f"{web.url}/page.html"
    msg = ask(client, f"Read {url} please.", [fetch_call(url)], stream=stream)
    assert [b.type for b in msg.content] == ["server_tool_use", "web_fetch_tool_result", "text"]
    call, result, answer = msg.content
    assert call.input == {"url": url}
    fetched = result.content
    assert fetched.type == "web_fetch_result" and fetched.url == url and fetched.retrieved_at
    document = fetched.content
    assert document.title == "Tide tables of Port Missive"
    assert document.source.type == "text" and document.source.media_type == "text/plain"
    text = document.source.data
    assert "High tide at 06:42 and 19:05." in text and "Low tide at 12:51." in text
    assert "not shown" not in text and "color" not in text  # scripts and styles are not page text
    assert answer.text == "The page says 06:42."  # the model read the page after the result
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_fetch_requests == 1


def test_web_fetch_error_codes(client: anthropic.Anthropic, web: StandIn) -> None:
    unseen = f"{web.url}/notes.txt"
    msg = ask(client, "Read something.", [fetch_call(unseen)])
    assert msg.content[1].content.error_code == "url_not_in_prior_context"  # the model made the URL up
    image = f"{web.url}/image.bin"
    msg = ask(client, f"Look at {image}", [fetch_call(image)])
    assert msg.content[1].content.error_code == "unsupported_content_type"
    page = f"{web.url}/page.html"
    blocked = {**WEB_FETCH, "blocked_domains": ["127.0.0.1"]}
    msg = ask(client, f"Read {page}", [fetch_call(page)], tools=[blocked])
    assert msg.content[1].content.error_code == "url_not_allowed"
    assert msg.content[2].text == "The page was not read."
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_fetch_requests == 0
    cut = {**WEB_FETCH, "max_content_tokens": 3, "citations": {"enabled": True}}
    notes = f"{web.url}/notes.txt"
    msg = ask(client, f"Read {notes}", [fetch_call(notes)], tools=[cut])
    document = msg.content[1].content.content
    assert document.source.data == "plain notes, line one\nline two"[:12]
    assert document.citations is not None and document.citations.enabled is True


def test_loopback_refused_unless_allowed(web: StandIn, echo_settings: dict[str, Any]) -> None:
    """Without ``media.fetch_allow`` the stand-in's loopback address is refused
    (``url_not_accessible``) and nothing reaches it."""
    config = {
        "server_tools": {"web_fetch": True},
        "models": {"echo": {"driver": "echo", "context_window": 4000, "settings": echo_settings}},
    }
    before = len(web.requests)
    with in_process_app(config) as app:
        client = app.sdk()
        page = f"{web.url}/page.html"
        msg = ask(client, f"Read {page}", [fetch_call(page)])
    assert msg.content[1].content.error_code == "url_not_accessible"
    assert len(web.requests) == before


def test_web_search_through_searxng(client: anthropic.Anthropic, web: StandIn) -> None:
    search = {**WEB_SEARCH, "blocked_domains": ["blocked.example"]}
    call = {"tool_call": {"name": "web_search", "arguments": ['{"query": "tide times"}']}}
    msg = ask(client, "When is high tide?", [call], tools=[search])
    assert [b.type for b in msg.content] == ["server_tool_use", "web_search_tool_result", "text"]
    results = msg.content[1].content
    assert [(r.url, r.title, r.page_age) for r in results] == [
        ("https://tides.example/port", "Port tides", "2026-11-30")
    ]
    assert base64.b64decode(results[0].encrypted_content).decode() == "High tide 06:42"
    assert msg.content[2].text == "Found it."  # the snippet reached the model
    assert web.searched()[-1] == "tide times"
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_search_requests == 1
    # Sent back by the client (a paused turn resumed), the snippet is read
    # again; an opaque (the API's own) content shows the links only.
    blocks = [b.model_dump(exclude_none=True) for b in msg.content[:2]]
    opaque = [
        blocks[0],
        {**blocks[1], "content": [{**r, "encrypted_content": "EqgfCioIARgB"} for r in blocks[1]["content"]]},
    ]

    def resume(assistant: list[dict[str, Any]]) -> list[Any]:
        history = [
            {"role": "user", "content": "When is high tide?"},
            {"role": "assistant", "content": assistant},
        ]
        return client.messages.create(model="echo", max_tokens=50, tools=[search], messages=history).content

    assert [b.text for b in resume(blocks) if b.type == "text"] == ["Found it."]
    assert [b.text for b in resume(opaque) if b.type == "text"] != ["Found it."]


def test_forced_web_search_on_a_driver_that_cannot_force_tools(
    client: anthropic.Anthropic, web: StandIn, fake: FakeChatServer
) -> None:
    """A request forcing ``web_search`` (``tool_choice: tool``) on the openai
    driver, which declares only ``auto``/``none``: the server makes the call
    from the user's message, runs it, and the backend answers after it."""
    msg = client.messages.create(
        model="gen",
        max_tokens=50,
        tools=[WEB_SEARCH],
        tool_choice={"type": "tool", "name": "web_search"},
        messages=[{"role": "user", "content": "Perform a web search for the query: port tides"}],
    )
    assert [b.type for b in msg.content[:2]] == ["server_tool_use", "web_search_tool_result"]
    assert msg.content[0].input == {"query": "port tides"}
    assert web.searched()[-1] == "port tides"
    sent = fake.requests[-1]
    assert sent["tool_choice"] == "auto"  # the backend goes on after the result, not forced
    rendered = str(sent["messages"])
    assert "https://tides.example/port" in rendered and "High tide 06:42" in rendered
    assert msg.usage.server_tool_use is not None and msg.usage.server_tool_use.web_search_requests == 1


def test_unconfigured_server_still_answers_unavailable(echo: anthropic.Anthropic) -> None:
    call = {"tool_call": {"name": "web_search", "arguments": ['{"query": "x"}']}}
    msg = echo.messages.create(
        model="echo-tools",
        max_tokens=50,
        tools=[WEB_SEARCH],
        messages=[{"role": "user", "content": script(call, then=[{"script": [{"text": "ok"}]}])}],
    )
    assert msg.content[1].content.error_code == "unavailable"
