"""Every client mistake gets the Anthropic envelope, the right status and the SDK's own exception."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from missive.testing import InProcessApp, dump_toml, free_port, in_process_app, live_server

USER = [{"role": "user", "content": "hello"}]
F = {"name": "f", "input_schema": {"type": "object"}}
TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
REMOVE_F = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "f"}}
REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
SEARCH_RESULT = {
    "type": "tool_search_tool_result",
    "tool_use_id": "srvtoolu_x",
    "content": {"type": "tool_search_tool_search_result", "tool_references": []},
}
MCP_RESULT = {"type": "mcp_tool_result", "content": [{"type": "text", "text": "r"}]}


def assert_envelope(resp: httpx.Response, status: int, error_type: str) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == error_type
    assert body["request_id"] == resp.headers["request-id"] and body["request_id"].startswith("req_")
    assert body["error"]["message"]
    return body


def test_field_path_in_400(echo: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        echo.messages.create(
            model="echo", max_tokens=5, messages=[{"role": "user", "content": [{"type": "text"}]}]
        )
    assert info.value.body["error"]["message"] == "messages.0.content.0.text: Field required"
    assert info.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "echo", "messages": USER}, "max_tokens: Field required"),
        (
            {"model": "echo", "max_tokens": -1, "messages": USER},
            "max_tokens: Input should be greater than or equal to 0",
        ),
        ({"model": "echo", "max_tokens": 5, "messages": []}, "messages: List should have at least 1 item"),
        (
            {"model": "echo", "max_tokens": 5, "temperature": 2, "messages": USER},
            "temperature: Input should be less",
        ),
        (
            {"model": "echo", "max_tokens": 5, "messages": [{"role": "bot", "content": "x"}]},
            "messages.0.role",
        ),
        ({"model": "echo", "max_tokens": 5, "stop_sequences": [" "], "messages": USER}, "stop_sequences.0"),
        ({"max_tokens": 5, "messages": USER}, "model: Field required"),
        (
            {
                "model": "echo",
                "max_tokens": 2000,
                "thinking": {"type": "enabled", "budget_tokens": 10},
                "messages": USER,
            },
            "budget_tokens: Input should be greater than or equal to 1024",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 1500,
                "thinking": {"type": "enabled", "budget_tokens": 2000},
                "messages": USER,
            },
            "`max_tokens` must be greater than `thinking.budget_tokens`",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "tools": [{"name": "bad name!", "input_schema": {}}],
                "messages": USER,
            },
            "tools.0.name",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": ""}],
                    }
                ],
            },
            "messages.0.content.1: text content blocks must be non-empty",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "text", "text": " \n"}]}],
            },
            "messages.0.content.0: text content blocks must contain non-whitespace text",
        ),
        (
            {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "  \t\n"}]},
            "messages.0: text content blocks must contain non-whitespace text",
        ),
        (
            {"model": "echo", "max_tokens": 5, "system": [{"type": "text", "text": ""}], "messages": USER},
            "system.0: text content blocks must be non-empty",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": USER,
                "tools": [
                    {
                        "name": "t",
                        "input_schema": {"type": "object", "properties": {"x": {"$ref": "#/defs/missing"}}},
                    }
                ],
            },
            "tools.0: input_schema: JSON schema is invalid ($ref '#/defs/missing' points to nothing in the "
            "schema)",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": USER,
                "output_config": {"format": {"type": "json_schema", "schema": {"type": "bogus"}}},
            },
            "output_config.format: schema: JSON schema is invalid",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "tools": [{"name": "t", "input_schema": [1]}],
                "messages": USER,
            },
            "tools.0.input_schema: Input should be a valid dictionary",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "tools": [{"name": "t", "input_schema": {"type": "array"}}],
                "messages": USER,
            },
            "tools.0: input_schema.type: Input should be 'object'",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "tools": [{"name": "t", "input_schema": {"properties": {}}}],
                "messages": USER,
            },
            "tools.0: input_schema.type: Field required",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": USER,
                "tools": [
                    {"name": "t", "input_schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}
                ],
            },
            "tools.0: input_schema: JSON schema is invalid (properties.a.type:",
        ),
        (
            {"model": "echo", "max_tokens": "10", "messages": USER},
            "max_tokens: Input should be a valid integer",
        ),
        (
            {"model": "echo", "max_tokens": True, "messages": USER},
            "max_tokens: Input should be a valid integer",
        ),
        (
            {"model": "echo", "max_tokens": 5, "temperature": "0.5", "messages": USER},
            "temperature: Input should be a valid number",
        ),
        (
            {"model": "echo", "max_tokens": 5, "stream": "yes", "messages": USER},
            "stream: Input should be a valid boolean",
        ),
        (
            {"model": "echo", "max_tokens": 5, "tool_choice": {"name": "x"}, "messages": USER},
            "tool_choice.type: Field required",
        ),
        # Not an object where one is expected: the API's words, never a class
        # name of Missive's, and the block's own path (found by a newcomer).
        (
            {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": ["hi"]}]},
            "messages.0.content.0: Input should be a valid dictionary or object to extract fields from",
        ),
        (
            {"model": "echo", "max_tokens": 5, "messages": ["hi"]},
            "messages.0: Input should be a valid dictionary or object to extract fields from",
        ),
        (
            {"model": "echo", "max_tokens": 5, "metadata": "x", "messages": USER},
            "metadata: Input should be a valid dictionary or object to extract fields from",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "system": [{"type": "text", "text": "a"}, "b"],
                "messages": USER,
            },
            "system.1: Input should be a valid dictionary or object to extract fields from",
        ),
        # A text source is plain text, as the API's (base64 sources take other text types).
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "text", "media_type": "text/html", "data": "x"},
                            }
                        ],
                    }
                ],
            },
            "messages.0.content.0.source.media_type: Input should be 'text/plain' (got 'text/html')",
        ),
        # Neither text nor a list: both named.
        (
            {"model": "echo", "max_tokens": 5, "system": 5, "messages": USER},
            "system: Input should be a valid string or a list of content blocks",
        ),
        (
            {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": 5}]},
            "messages.0.content: Input should be a valid string or a list of content blocks",
        ),
        (
            {"model": "echo", "max_tokens": 5, "system": [{"type": "image", "source": {}}], "messages": USER},
            "system.0.type: Input should be 'text' (got 'image'); system.0.text: Field required",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"source": {"data": "x"}, "type": "image"}]}],
            },
            "messages.0.content.0.source.type: Field required",
        ),
        # The API's prefill rule and wording, for string and block content.
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [*USER, {"role": "assistant", "content": "1, 2, "}],
            },
            "messages: final assistant content cannot end with trailing whitespace",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [*USER, {"role": "assistant", "content": [{"type": "text", "text": "1,\n"}]}],
            },
            "messages: final assistant content cannot end with trailing whitespace",
        ),
        # The API's pattern for tool call ids.
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "bad id!", "name": "x", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "bad id!", "content": "r"}],
                    },
                ],
            },
            "messages.1.content.0.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        # Values the SDK's types enumerate: another is refused, not accepted unread.
        (
            {"model": "echo", "max_tokens": 5, "messages": USER, "output_config": {"effort": "ludicrous"}},
            "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "text",
                                "text": "hi",
                                "cache_control": {"type": "ephemeral", "ttl": "1y"},
                            }
                        ],
                    }
                ],
            },
            "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": USER,
                "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "auto", "disable_parallel_tool_use": "no"},
            },
            "tool_choice.disable_parallel_tool_use: Input should be a valid boolean",
        ),
        # Blocks in a place the API does not allow them.
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [*USER, {"role": "system", "content": [TOOL_USE]}, *USER],
            },
            "messages.1.content.0: `tool_use` blocks cannot be in a system message",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                "messages": [
                    *USER,
                    {"role": "assistant", "content": [TOOL_USE]},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [REMOVE_F]}],
                    },
                ],
            },
            "messages.2.content.0.content.0: `tool_removal` blocks cannot be in a tool_result's content",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [*USER, {"role": "assistant", "content": [SEARCH_RESULT]}, *USER],
            },
            "messages.1.content.0: unexpected `tool_use_id` found in `tool_search_tool_result` blocks: "
            "srvtoolu_x. Each `tool_search_tool_result` block must follow the `server_tool_use` block",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    *USER,
                    {"role": "assistant", "content": [{**MCP_RESULT, "tool_use_id": "mcptoolu_x"}]},
                    *USER,
                ],
            },
            "messages.1.content.0: unexpected `tool_use_id` found in `mcp_tool_result` blocks",
        ),
        # Ids of server and MCP calls follow the tool_use pattern (rendered as one): a 400, not a 500.
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "server_tool_use", "id": "srvtoolu.1", "name": "web_search", "input": {}}
                        ],
                    },
                    *USER,
                ],
            },
            "messages.1.content.0.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    *USER,
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "mcp_tool_use",
                                "id": "bad id",
                                "name": "x",
                                "server_name": "s",
                                "input": {},
                            }
                        ],
                    },
                    *USER,
                ],
            },
            "messages.1.content.0.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
        ),
        # Prompt caching: the API's one type, and at most 4 breakpoints.
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "hi", "cache_control": {"type": "persistent"}}],
                    }
                ],
            },
            "messages.0.content.0.cache_control.type: Input should be 'ephemeral'",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": f"t{i}", "cache_control": {"type": "ephemeral"}}
                            for i in range(5)
                        ],
                    }
                ],
            },
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
        # Server tool declarations.
        (
            {"model": "echo", "max_tokens": 5, "messages": USER, "tools": [{**REGEX, "name": "finder"}, F]},
            "tools.0.name: Input should be 'tool_search_tool_regex' (got 'finder')",
        ),
        (
            {"model": "echo", "max_tokens": 5, "messages": USER, "tools": [{**F, "defer_loading": True}]},
            "tools: every tool has `defer_loading: true`; at least one tool must not be deferred",
        ),
    ],
)
def test_validation_errors(echo_url: str, body: dict, fragment: str) -> None:
    resp = httpx.post(f"{echo_url}/v1/messages", json=body)
    assert fragment in assert_envelope(resp, 400, "invalid_request_error")["error"]["message"]


def test_an_unknown_server_tool_version_is_served_and_reported(echo: anthropic.Anthropic) -> None:
    """A dated version SDK 2.16 does not define is served as its family (a
    newer client keeps working) and named in ``missive-ignored``."""
    raw = echo.messages.with_raw_response.create(
        model="echo",
        max_tokens=5,
        messages=USER,
        tools=[{"type": "web_search_29990101", "name": "web_search"}],  # type: ignore[list-item]
    )
    assert raw.parse().content[0].text == "hello"  # type: ignore[union-attr]
    assert (
        'tools.0 (tool type "web_search_29990101": a version Missive does not know'
        in raw.headers["missive-ignored"]
    )


DEEP = (
    b'{"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "x": '
    + b"[" * 50_000
    + b"]" * 50_000
    + b"}"
)
SURROGATE = b'{"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi \\ud800"}]}'
SURROGATE_MODEL = b'{"model": "x\\ud800", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}'
HUGE_INT = (
    b'{"model": "echo", "max_tokens": ' + b"9" * 5000 + b', "messages": [{"role": "user", "content": "hi"}]}'
)
#: Python's json reads NaN and Infinity; they are not JSON (RFC 8259).
NAN = (
    b'{"model": "echo", "max_tokens": 5, "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}'
)


@pytest.mark.parametrize(
    "raw",
    [b"", b"{not json", b"[1, 2]", b"\xff\xfe", b'"text"', DEEP, SURROGATE, SURROGATE_MODEL, HUGE_INT, NAN],
)
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_malformed_bodies(echo_url: str, raw: bytes, path: str) -> None:
    resp = httpx.post(f"{echo_url}{path}", content=raw, headers={"content-type": "application/json"})
    assert_envelope(resp, 400, "invalid_request_error")


def test_unknown_model_404(echo: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        echo.messages.create(model="no-such-model", max_tokens=5, messages=USER)
    assert info.value.body["error"]["message"] == "model: no-such-model"


def test_forcing_a_tool_this_server_does_not_run_says_why(echo: anthropic.Anthropic) -> None:
    """A tool in ``tools`` that is not offered (a server tool this server
    does not run) is named with the reason, not "requires at least one tool
    in `tools`" (found by a newcomer)."""
    code = {"type": "code_execution_20250825", "name": "code_execution"}
    why = 'is of type "code_execution_20250825", which this server does not run'
    why += " (see the missive-ignored header)"
    for choice, expected in (
        ({"type": "tool", "name": "code_execution"}, f"tool_choice.name: tool 'code_execution' {why}"),
        (
            {"type": "any"},
            f"tool_choice: \"any\" requires a tool the model can call, and none is: 'code_execution' {why}",
        ),
    ):
        with pytest.raises(anthropic.BadRequestError) as caught:
            echo.messages.create(
                model="echo",
                max_tokens=5,
                messages=USER,
                tools=[code],
                tool_choice=choice,  # type: ignore[list-item,arg-type]
            )
        assert caught.value.body["error"]["message"] == expected


def test_a_compressed_body_is_refused_as_such(echo_url: str) -> None:
    """A gzip body is a 400 that says so, not "not valid JSON: 'utf-8' codec
    can't decode byte 0x8b" (found by a newcomer); ``identity`` is the body
    as it is."""
    import gzip
    import json

    body = json.dumps({"model": "echo", "max_tokens": 5, "messages": USER}).encode()
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/messages/batches"):
        sent = httpx.post(
            f"{echo_url}{path}",
            content=gzip.compress(body),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        error = assert_envelope(sent, 400, "invalid_request_error")["error"]
        assert error["message"] == (
            "Content-Encoding: gzip is not supported for request bodies; send the body uncompressed"
        )
    plain = httpx.post(
        f"{echo_url}/v1/messages",
        content=body,
        headers={"content-type": "application/json", "content-encoding": "identity"},
    )
    assert plain.status_code == 200, plain.text


def test_unknown_route_and_method(echo_url: str) -> None:
    assert_envelope(httpx.post(f"{echo_url}/v1/nothing", json={}), 404, "not_found_error")
    wrong = httpx.get(f"{echo_url}/v1/messages")
    assert_envelope(wrong, 405, "invalid_request_error")
    assert wrong.headers["allow"] == "OPTIONS, POST"  # a 405 names the methods (RFC 9110 15.5.6)
    assert httpx.delete(f"{echo_url}/v1/models").headers["allow"] == "GET, HEAD, OPTIONS"


def test_body_over_limit_is_413(echo: anthropic.Anthropic, echo_url: str) -> None:
    big = "x" * 300_000  # ECHO_CONFIG sets max_body_bytes = 200_000
    with pytest.raises(anthropic.ContentTooLargeError) as info:
        echo.messages.create(model="echo", max_tokens=5, messages=[{"role": "user", "content": big}])
    assert info.value.body["error"]["type"] == "request_too_large"
    # a chunked body (no content-length) is refused the same way
    chunks = iter(
        [
            b'{"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "',
            big.encode(),
            b'"}]}',
        ]
    )
    resp = httpx.post(f"{echo_url}/v1/messages", content=chunks, headers={"content-type": "application/json"})
    assert_envelope(resp, 413, "request_too_large")


def test_prompt_too_long_wording(echo: anthropic.Anthropic) -> None:
    words = " ".join(["word"] * 20)  # echo-small has a 12-token context
    for stream in (False, True):
        with pytest.raises(anthropic.BadRequestError) as info:
            echo.messages.create(
                model="echo-small", max_tokens=5, stream=stream, messages=[{"role": "user", "content": words}]
            )
        assert info.value.body["error"]["message"] == "prompt is too long: 20 tokens > 11 maximum"


def test_capability_gap_names_the_capability(echo: anthropic.Anthropic) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    with pytest.raises(anthropic.BadRequestError) as info:
        echo.messages.create(model="echo", max_tokens=5, tools=tools, messages=USER)
    message = info.value.body["error"]["message"]
    assert 'tool_choice "auto"' in message and "'echo'" in message and "driver 'echo'" in message
    with pytest.raises(anthropic.BadRequestError) as info:
        echo.messages.create(
            model="echo", max_tokens=5000, thinking={"type": "enabled", "budget_tokens": 1024}, messages=USER
        )
    assert "thinking" in info.value.body["error"]["message"]


def test_adaptive_thinking_needs_no_capability(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(model="echo", max_tokens=5, thinking={"type": "adaptive"}, messages=USER)
    assert msg.content[0].text == "hello"


def test_server_survives_every_bad_input(echo: anthropic.Anthropic) -> None:
    assert echo.messages.create(model="echo", max_tokens=5, messages=USER).content[0].text == "hello"


@pytest.fixture(scope="module")
def auth_app(echo_config: dict) -> Iterator[InProcessApp]:
    config = {**echo_config, "server": {"api_keys": ["sk-one", "sk-two"]}}
    with in_process_app(config) as app:
        yield app


def test_auth(auth_app: InProcessApp) -> None:
    for key in ("sk-one", "sk-two"):
        client = auth_app.sdk(api_key=key)
        assert client.messages.create(model="echo", max_tokens=5, messages=USER).content[0].text == "hello"
    bearer = anthropic.Anthropic(
        base_url=auth_app.url, auth_token="sk-two", max_retries=0, http_client=auth_app.http_client()
    )
    assert bearer.models.list().data
    with pytest.raises(anthropic.AuthenticationError):
        auth_app.sdk(api_key="wrong").messages.create(model="echo", max_tokens=5, messages=USER)
    http = auth_app.http_client(httpx)
    resp = http.post("/v1/messages", json={"model": "echo", "max_tokens": 5, "messages": USER})
    assert_envelope(resp, 401, "authentication_error")
    resp = http.get("/v1/models", headers={"x-api-key": "wrong", "authorization": "Bearer sk-one"})
    assert resp.status_code == 200  # some clients send both headers
    assert http.get("/health").status_code == 200


def test_strict_mode_rejects_unknown_fields(echo_config: dict) -> None:
    config = {**echo_config, "server": {"strict": True}}
    with in_process_app(config) as app:
        http = app.http_client(httpx)
        resp = http.post(
            "/v1/messages",
            json={"model": "echo", "max_tokens": 5, "messages": USER, "service_tier": "auto"},
        )
        body = assert_envelope(resp, 400, "invalid_request_error")
        assert "service_tier" in body["error"]["message"]
        ok = http.post(
            "/v1/messages",
            json={"model": "echo", "max_tokens": 5, "messages": USER},
            headers={"anthropic-beta": "a-beta-from-the-future"},  # betas are never rejected
        )
        assert ok.status_code == 200
        assert ok.headers["missive-ignored"] == "anthropic-beta=a-beta-from-the-future"
        # Each occurrence of the header, read as UTF-8 (found by a newcomer: only the
        # first was read, and "föö" came back as its Latin-1 reading).
        betas = [("anthropic-beta", "f\u00f6\u00f6".encode()), ("anthropic-beta", b"second-beta")]
        ok = http.post(
            "/v1/messages", json={"model": "echo", "max_tokens": 5, "messages": USER}, headers=betas
        )
        assert ok.headers["missive-ignored"] == "anthropic-beta=f\\u00f6\\u00f6, anthropic-beta=second-beta"


def test_non_loopback_without_keys_refuses_to_start(echo_config: dict) -> None:
    with pytest.raises(RuntimeError, match="refusing to listen on 0.0.0.0 without API keys"):
        with live_server(echo_config, args=("--host", "0.0.0.0"), timeout=20):
            pass


def test_model_that_cannot_start_fails_cleanly(tmp_path) -> None:
    config = {
        "models": {"m": {"driver": "llamacpp", "settings": {"model_path": str(tmp_path / "missing.gguf")}}}
    }
    with pytest.raises(RuntimeError) as info:
        with live_server(config, timeout=60):
            pass
    log = str(info.value)
    assert "GGUF file not found" in log and "Traceback" not in log


def test_unknown_driver_fails_cleanly() -> None:
    with pytest.raises(RuntimeError) as info:
        with live_server({"models": {"m": {"driver": "warp-drive"}}}, timeout=60):
            pass
    log = str(info.value)
    assert "uses driver 'warp-drive', which no loaded plugin provides" in log and "Traceback" not in log


def test_port_in_use_fails_cleanly(echo_config: dict, tmp_path) -> None:
    config = tmp_path / "missive.toml"
    config.write_text(dump_toml(echo_config))
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        out = subprocess.run(
            [sys.executable, "-m", "missive", "serve", "--config", str(config), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode != 0
    assert f"Error: cannot listen on http://127.0.0.1:{port}" in out.stderr
    assert "Traceback" not in out.stderr
    assert "Missive serving" not in out.stderr + out.stdout  # refused before the models load, not after


EMPTY = "all messages must have non-empty content except for the optional final assistant message"


@pytest.mark.parametrize("empty", ["", []])
@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_empty_content_is_refused(echo_url: str, empty: object, path: str) -> None:
    """The API refuses a message with empty content (issue 15 item 3)..."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": empty},
    ]
    resp = httpx.post(f"{echo_url}{path}", json={"model": "echo", "max_tokens": 5, "messages": messages})
    assert assert_envelope(resp, 400, "invalid_request_error")["error"]["message"] == f"messages.2: {EMPTY}"
    first = httpx.post(
        f"{echo_url}{path}",
        json={
            "model": "echo",
            "max_tokens": 5,
            "messages": [
                {"role": "user", "content": empty},
                *messages[1:2],
                {"role": "user", "content": "ok"},
            ],
        },
    )
    assert assert_envelope(first, 400, "invalid_request_error")["error"]["message"] == f"messages.0: {EMPTY}"


def test_empty_final_assistant_and_tool_result_are_accepted(echo: anthropic.Anthropic) -> None:
    """...except the optional final assistant message, and an empty tool_result
    content (a command with no output, as Claude Code sends)."""
    tools = [{"name": "run", "description": "run a command", "input_schema": {"type": "object"}}]
    history = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "run", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": ""}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "run", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": []}]},
    ]
    for final in ("", []):
        reply = echo.messages.create(
            model="echo-tools",
            max_tokens=5,
            tools=tools,
            messages=[*history, {"role": "assistant", "content": final}],
        )
        assert reply.type == "message"


def test_a_direct_caller_is_what_missive_does(echo: anthropic.Anthropic) -> None:
    """``caller: {"type": "direct"}`` and ``allowed_callers: ["direct"]`` (SDK
    2.16) say what every call here is, the model's own: accepted, not
    reported; a programmatic caller (``code_execution_*``) is reported."""
    tool = {"name": "f", "input_schema": {"type": "object"}}

    def ignored(caller: dict, allowed: list[str]) -> str:
        raw = echo.messages.with_raw_response.create(
            model="echo-hermes",
            max_tokens=5,
            tools=[{**tool, "allowed_callers": allowed}],  # type: ignore[list-item]
            messages=[
                *USER,
                {"role": "assistant", "content": [{**TOOL_USE, "caller": caller}]},  # type: ignore[list-item]
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
                },
            ],
        )
        return raw.headers.get("missive-ignored", "")

    assert "caller" not in ignored({"type": "direct"}, ["direct"])
    reported = ignored(
        {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}, ["code_execution_20250825"]
    )
    assert "messages.1.content.0.caller" in reported and "tools.0.allowed_callers" in reported
