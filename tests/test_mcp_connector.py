"""The MCP connector (``mcp_servers``, beta ``mcp-client-2025-11-20``) through the official SDK.

A real MCP server, written with the same ``mcp`` library (``MCPServer``'s
streamable HTTP app served by uvicorn on a loopback port in a thread), and
the in-process app with the echo driver scripted to call its tools: the
server lists them, runs the call on the MCP server and answers with
``mcp_tool_use`` / ``mcp_tool_result`` blocks, then the model goes on.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

pytest.importorskip("mcp")
import uvicorn  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

from missive.testing import in_process_app  # noqa: E402
from missive_echo import script  # noqa: E402

BETA = "mcp-client-2026-09-15"
TOKEN = "secret-token-1"
TOOLS = {"tool_choice": ["auto", "any", "tool", "none"]}
#: What the model answers after a result, by what the result showed it.
AFTER = [
    {"match": "echo: tide", "script": [{"text": "The tool said tide."}]},
    {"match": "boom", "script": [{"text": "The tool failed."}]},
    {"match": "MCP server", "script": [{"text": "The server failed."}]},
]


class McpStandIn:
    """An MCP server on a free loopback port; records the Authorization headers."""

    def __init__(self) -> None:
        self.auth: list[str | None] = []
        self.methods: list[str] = []
        server = MCPServer("standin")

        @server.tool()
        def echo(text: str) -> str:
            """Echo the text back."""
            return f"echo: {text}"

        @server.tool()
        def fail(text: str) -> str:
            """Always fails."""
            raise ToolError("boom")

        @server.tool()
        def hidden(text: str) -> str:
            """Never offered when a toolset disables it."""
            return text

        app = server.streamable_http_app(stateless_http=True, json_response=True)
        seen, methods = self.auth, self.methods

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = dict(scope["headers"])
            seen.append(headers.get(b"authorization", b"").decode() or None)

            async def tapped() -> Any:  # the JSON-RPC method of each request
                message = await receive()
                if message["type"] == "http.request" and message.get("body"):
                    try:
                        methods.append(json.loads(message["body"]).get("method"))
                    except ValueError:
                        pass
                return message

            await app(scope, tapped, send)

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(
            recording, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> McpStandIn:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the MCP stand-in did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def standin() -> Iterator[McpStandIn]:
    with McpStandIn() as server:
        yield server


def app_config(tmp: Any, *, allow_loopback: bool = True, **server_tools: Any) -> dict[str, Any]:
    path = tmp / "after.json"
    path.write_text(json.dumps(AFTER))
    config: dict[str, Any] = {
        "server_tools": {"mcp": True, "mcp_servers": ["http://127.0.0.1:*"], **server_tools},
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 4000,
                "settings": {"capabilities": TOOLS, "script_file": str(path), "count_tools": True},
            },
            "echo-report": {
                "driver": "echo",
                "context_window": 4000,
                "settings": {"capabilities": TOOLS, "report": True},
            },
        },
    }
    if allow_loopback:
        config["media"] = {"fetch_allow": ["127.0.0.1"]}
    return config


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    with in_process_app(app_config(tmp_path_factory.mktemp("mcp"))) as app:
        yield app.sdk(timeout=60)


def call(name: str, text: str = "tide") -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": [json.dumps({"text": text})]}}


def ask(client: anthropic.Anthropic, standin: McpStandIn, steps: list[dict[str, Any]], **kwargs: Any) -> Any:
    servers = kwargs.pop("mcp_servers", None) or [
        {"type": "url", "url": standin.url, "name": "standin", "authorization_token": TOKEN}
    ]
    return client.beta.messages.create(
        model="echo",
        max_tokens=100,
        betas=[BETA],
        mcp_servers=servers,
        messages=[{"role": "user", "content": script(*steps)}],
        **kwargs,
    )


def listed_then(msg: Any) -> list[Any]:
    """The answer's blocks after the ``mcp_tool_listing`` opening it (the
    server was asked for its tools)."""
    listing = msg.content[0]
    assert listing.type == "mcp_tool_listing" and listing.mcp_server_name == "standin"
    return list(msg.content[1:])


def test_tool_listed_called_and_answered(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    standin.auth.clear()
    msg = ask(client, standin, [{"text": "Let me ask."}, call("echo")])
    # The listing the server gave opens the answer: every tool, as listed.
    listing = msg.content[0]
    assert listing.type == "mcp_tool_listing" and listing.mcp_server_name == "standin"
    assert [(t.name, t.description) for t in listing.tools] == [
        ("echo", "Echo the text back."),
        ("fail", "Always fails."),
        ("hidden", "Never offered when a toolset disables it."),
    ]
    assert listing.tools[0].input_schema["properties"]["text"]["type"] == "string"
    content = listed_then(msg)
    assert [b.type for b in content] == ["text", "mcp_tool_use", "mcp_tool_result", "text"]
    use, result = content[1], content[2]
    assert use.id.startswith("mcptoolu_") and use.name == "echo" and use.server_name == "standin"
    assert use.input == {"text": "tide"}
    assert result.tool_use_id == use.id and result.is_error is False
    assert [b.text for b in result.content] == ["echo: tide"]
    assert content[3].text == "The tool said tide."
    assert msg.stop_reason == "end_turn"
    # The token reached the MCP server, as a Bearer token, on every request.
    assert standin.auth and set(standin.auth) == {f"Bearer {TOKEN}"}


def test_stream_equals_non_stream(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    steps = [{"text": "Let me ask."}, call("echo")]
    plain = ask(client, standin, steps)
    servers = [{"type": "url", "url": standin.url, "name": "standin", "authorization_token": TOKEN}]
    with client.beta.messages.stream(
        model="echo",
        max_tokens=100,
        betas=[BETA],
        mcp_servers=servers,
        messages=[{"role": "user", "content": script(*steps)}],
    ) as stream:
        final = stream.get_final_message()

    def dumped(message: Any) -> list[dict[str, Any]]:
        out = [b.model_dump(exclude_none=True) for b in message.content]
        for block in out:
            block.pop("id", None)
            block.pop("tool_use_id", None)
        return out

    assert dumped(final) == dumped(plain)
    assert final.content[0].type == "mcp_tool_listing"
    assert final.content[3].tool_use_id == final.content[2].id
    assert final.stop_reason == plain.stop_reason


def test_tool_error_is_an_error_result(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    msg = ask(client, standin, [call("fail")])
    result = listed_then(msg)[1]
    assert result.type == "mcp_tool_result" and result.is_error is True
    assert "boom" in result.content[0].text
    assert msg.content[-1].text == "The tool failed."


def test_toolset_disables_a_tool(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "standin",
        "configs": {"hidden": {"enabled": False}},
    }
    # A call of a tool not offered is a client tool call the driver made up: tool_use.
    msg = ask(client, standin, [call("hidden")], tools=[toolset])
    assert [b.type for b in listed_then(msg)] == ["tool_use"]
    msg = ask(client, standin, [call("echo")], tools=[toolset])
    assert listed_then(msg)[0].type == "mcp_tool_use"


def test_history_is_rendered_as_call_and_result(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    first = ask(client, standin, [call("echo")])
    history = [b.model_dump(exclude_none=True) for b in first.content]
    msg = client.beta.messages.create(
        model="echo",
        max_tokens=100,
        betas=[BETA],
        mcp_servers=[{"type": "url", "url": standin.url, "name": "standin", "authorization_token": TOKEN}],
        messages=[
            {"role": "user", "content": "Use the tool."},
            {"role": "assistant", "content": history},
            {"role": "user", "content": "What did it say?"},
        ],
    )
    assert msg.content[0].text == "What did it say?"
    raw = client.beta.messages.with_raw_response.create(
        model="echo-report",
        max_tokens=100,
        betas=[BETA],
        messages=[
            {"role": "user", "content": "Use the tool."},
            {"role": "assistant", "content": history},
            {"role": "user", "content": "What did it say?"},
        ],
    )
    assert "messages.1" not in (raw.headers.get("missive-ignored") or "")
    seen = raw.parse().content[0].text
    # The model read the call and its result, as a tool_use and a tool_result.
    assert '"tool_use"' in seen and '"echo"' in seen and "echo: tide" in seen and '"tool_result"' in seen


def test_a_listing_sent_back_is_used_instead_of_asking(
    client: anthropic.Anthropic, standin: McpStandIn
) -> None:
    """The answer's ``mcp_tool_listing``, sent back in the history, is the
    server's listing from then on: the server is not asked again, the answer
    carries no new listing, and only the tools it lists are offered."""
    servers = [{"type": "url", "url": standin.url, "name": "standin", "authorization_token": TOKEN}]
    first = ask(client, standin, [call("echo")])
    history = [b.model_dump(exclude_none=True) for b in first.content]
    assert history[0]["type"] == "mcp_tool_listing"

    def again(listing: dict[str, Any], step: dict[str, Any]) -> Any:
        return client.beta.messages.create(
            model="echo",
            max_tokens=100,
            betas=[BETA],
            mcp_servers=servers,
            messages=[
                {"role": "user", "content": "Use the tool."},
                {"role": "assistant", "content": [listing, *history[1:]]},
                {"role": "user", "content": script(step)},
            ],
        )

    standin.methods.clear()
    fresh = ask(client, standin, [call("echo")])
    assert "tools/list" in standin.methods[: standin.methods.index("tools/call")]
    assert fresh.content[0].type == "mcp_tool_listing"
    standin.methods.clear()
    msg = again(history[0], call("echo"))
    assert [b.type for b in msg.content] == ["mcp_tool_use", "mcp_tool_result", "text"]
    # Not listed before the model answered (the mcp library lists after a
    # call, to check a result against the tool's output schema).
    assert "tools/list" not in standin.methods[: standin.methods.index("tools/call")]
    # A listing of `echo` alone: `fail` is no longer an MCP tool of the request.
    only_echo = {**history[0], "tools": [t for t in history[0]["tools"] if t["name"] == "echo"]}
    msg = again(only_echo, call("fail"))
    assert [b.type for b in msg.content] == ["tool_use"]


def test_deferred_tools_are_loaded_by_a_tool_search(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    """A toolset's ``defer_loading`` tools are withheld like deferred tools of
    ``tools``: not offered, not counted, found by the tool search tools, and
    callable (run on the server) once a search has loaded them."""
    toolset = {"type": "mcp_toolset", "mcp_server_name": "standin", "default_config": {"defer_loading": True}}
    regex = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    msg = ask(client, standin, [call("echo")], tools=[toolset, regex])
    assert [b.type for b in listed_then(msg)] == ["tool_use"]  # not offered: a client call made up
    # Every tool deferred, and nothing to load them: the API's 400.
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(client, standin, [call("echo")], tools=[toolset])
    assert "at least one tool must not be deferred" in caught.value.message

    search = {"tool_call": {"name": "tool_search_tool_regex", "arguments": [json.dumps({"query": "^ech"})]}}
    then = [{"script": [call("echo")]}, {"script": [{"text": "The tool said tide."}]}]
    msg = client.beta.messages.create(
        model="echo",
        max_tokens=100,
        betas=[BETA],
        mcp_servers=[{"type": "url", "url": standin.url, "name": "standin", "authorization_token": TOKEN}],
        tools=[toolset, regex],
        messages=[{"role": "user", "content": script(search, then=then)}],
    )
    content = listed_then(msg)
    assert [b.type for b in content] == [
        "server_tool_use",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "text",
    ]
    assert [r.tool_name for r in content[1].content.tool_references] == ["echo"]
    assert content[2].name == "echo" and content[3].content[0].text == "echo: tide"

    body: dict[str, Any] = {
        "model": "echo",
        "betas": [BETA],
        "messages": [{"role": "user", "content": "hi"}],
        "mcp_servers": [{"type": "url", "url": standin.url, "name": "standin"}],
    }
    offered = client.beta.messages.count_tokens(**body, tools=[regex]).input_tokens
    deferred = client.beta.messages.count_tokens(**body, tools=[toolset, regex]).input_tokens
    assert deferred < offered


def test_unreachable_server_is_a_400_naming_it(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    servers = [{"type": "url", "url": f"http://127.0.0.1:{port}/mcp", "name": "gone"}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        ask(client, standin, [call("echo")], mcp_servers=servers)
    assert "mcp_servers.0" in caught.value.message and "'gone'" in caught.value.message


def test_url_not_allowed_for_the_key(tmp_path: Any, standin: McpStandIn) -> None:
    config = app_config(tmp_path, mcp_servers=["https://mcp.example.com/*"])
    with in_process_app(config) as app:
        with pytest.raises(anthropic.PermissionDeniedError) as caught:
            ask(app.sdk(), standin, [call("echo")])
    assert "mcp_servers.0.url" in caught.value.message


def test_private_address_refused_by_default(tmp_path: Any, standin: McpStandIn) -> None:
    with in_process_app(app_config(tmp_path, allow_loopback=False)) as app:
        with pytest.raises(anthropic.BadRequestError) as caught:
            ask(app.sdk(), standin, [call("echo")])
    assert "media.fetch_allow" in caught.value.message and "'standin'" in caught.value.message


def test_off_by_default_reports_ignored(tmp_path: Any, standin: McpStandIn) -> None:
    config = app_config(tmp_path)
    del config["server_tools"]
    with in_process_app(config) as app:
        raw = app.sdk().beta.messages.with_raw_response.create(
            model="echo",
            max_tokens=100,
            betas=[BETA],
            mcp_servers=[{"type": "url", "url": standin.url, "name": "standin"}],
            messages=[{"role": "user", "content": "hello"}],
        )
    assert "mcp_servers.0" in raw.headers["missive-ignored"]
    assert raw.parse().content[0].text == "hello"


def test_count_tokens_counts_the_servers_tools(client: anthropic.Anthropic, standin: McpStandIn) -> None:
    """``count_tokens`` lists the servers' tools as a message would and counts
    their definitions; a toolset that disables one counts fewer."""
    body: dict[str, Any] = {"model": "echo", "betas": [BETA], "messages": [{"role": "user", "content": "hi"}]}
    servers = [{"type": "url", "url": standin.url, "name": "standin", "authorization_token": TOKEN}]
    alone = client.beta.messages.count_tokens(**body).input_tokens
    listed = client.beta.messages.count_tokens(**body, mcp_servers=servers).input_tokens
    toolset = {"type": "mcp_toolset", "mcp_server_name": "standin", "configs": {"hidden": {"enabled": False}}}
    fewer = client.beta.messages.count_tokens(**body, mcp_servers=servers, tools=[toolset]).input_tokens
    assert alone < fewer < listed
    # The same count a message's usage reports for the same prompt.
    msg = client.beta.messages.create(**body, max_tokens=5, mcp_servers=servers)
    assert msg.usage.input_tokens == listed


@pytest.mark.parametrize("value", [5, "ab", [{"type": "mcp_toolset", "mcp_server_name": "standin"}]])
def test_mcp_toolsets_is_not_a_request_field(
    client: anthropic.Anthropic, standin: McpStandIn, value: Any
) -> None:
    """The toolsets are ``tools`` entries; the internal field they are moved
    to is refused when a client sends it (a 400, never a 500)."""
    body: dict[str, Any] = {
        "model": "echo",
        "betas": [BETA],
        "messages": [{"role": "user", "content": "hi"}],
        "mcp_servers": [{"type": "url", "url": standin.url, "name": "standin"}],
        "tools": [{"type": "mcp_toolset", "mcp_server_name": "standin"}],
        "extra_body": {"mcp_toolsets": value},
    }
    for call in (
        client.beta.messages.count_tokens,
        lambda **kw: client.beta.messages.create(max_tokens=5, **kw),
    ):
        with pytest.raises(anthropic.BadRequestError) as caught:
            call(**body)
        assert "mcp_toolsets: not a request field" in caught.value.body["error"]["message"]  # type: ignore[index]
