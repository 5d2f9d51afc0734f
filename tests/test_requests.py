"""Forward compatibility and request shapes real clients send (contract section 2)."""

from __future__ import annotations

import anthropic
import httpx

from missive_echo import script


def test_unknown_fields_are_accepted_and_reported(echo_url: str) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 20,
        "service_tier": "auto",
        "metadata": {"user_id": '{"session": 1}', "extra_key": 1},
        "system": [
            {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "scope": "global"}}
        ],
        "tools": [],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi there"},
                    {"type": "future_block", "payload": 1},
                    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                ],
            }
        ],
    }
    resp = httpx.post(
        f"{echo_url}/v1/messages?beta=true",
        json=body,
        headers={"anthropic-beta": "new-thing-2026-01-01, other"},
    )
    assert resp.status_code == 200, resp.text
    ignored = resp.headers["missive-ignored"]
    for expected in (
        "service_tier",
        "metadata.extra_key",
        "system.0.cache_control.scope",
        'messages.0.content.1 (block type "future_block")',
        'messages.0.content.2 (block type "server_tool_use")',
        "anthropic-beta=new-thing-2026-01-01",
        "anthropic-beta=other",
    ):
        assert expected in ignored
    assert resp.json()["content"][0]["text"] == "hi there"
    assert resp.json()["model"] == "claude-sonnet-4-5"  # the requested id is echoed


def test_clean_request_has_no_ignored_header(echo_url: str) -> None:
    resp = httpx.post(
        f"{echo_url}/v1/messages",
        json={"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    )
    assert "missive-ignored" not in resp.headers
    assert resp.headers["request-id"].startswith("req_")


def test_double_v1_path(echo_url: str) -> None:
    client = anthropic.Anthropic(base_url=f"{echo_url}/v1", api_key="x", max_retries=0)
    msg = client.messages.create(
        model="echo", max_tokens=5, messages=[{"role": "user", "content": "doubled path"}]
    )
    assert msg.content[0].text == "doubled path"
    assert (
        client.messages.count_tokens(model="echo", messages=[{"role": "user", "content": "a b"}]).input_tokens
        == 2
    )


def test_system_role_and_merging(echo: anthropic.Anthropic) -> None:
    messages = [
        {"role": "user", "content": "one"},
        {"role": "system", "content": "# Environment\ncwd: /tmp"},
        {"role": "user", "content": [{"type": "text", "text": "two three"}]},
    ]
    msg = echo.messages.create(model="echo", max_tokens=20, system="sys prompt", messages=messages)
    # consecutive user turns merge into one turn, the system message kept in its
    # place as a marked note (missive.chat_template.system_turns); echo answers with that turn's text
    assert msg.content[0].text == "one <system_message> # Environment cwd: /tmp </system_message> two three"
    # system prompt (2 words) + system message (4 words: "#", "Environment", "cwd:", "/tmp") + 2 tags + 3
    assert msg.usage.input_tokens == 2 + 4 + 2 + 3
    counted = echo.messages.count_tokens(model="echo", system="sys prompt", messages=messages)
    assert counted.input_tokens == msg.usage.input_tokens


def test_count_tokens_equals_usage(echo: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": script({"text": "x"}, cache_read_input_tokens=3)}]
    counted = echo.messages.count_tokens(model="echo", messages=messages).input_tokens
    usage = echo.messages.create(model="echo", max_tokens=5, messages=messages).usage
    assert usage.cache_read_input_tokens == 3
    assert counted == usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_max_tokens_and_zero(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(model="echo", max_tokens=2, messages=[{"role": "user", "content": "a b c d"}])
    assert msg.content[0].text == "a b" and msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 2
    msg = echo.messages.create(model="echo", max_tokens=0, messages=[{"role": "user", "content": "a b"}])
    assert msg.content == [] and msg.stop_reason == "max_tokens"


def test_max_tokens_clamped_to_context(echo: anthropic.Anthropic) -> None:
    # echo-small: 12-token context; a 9-word prompt leaves 3 tokens
    # (the SDK insists on streaming for max_tokens this large, as Claude Code does)
    with echo.messages.stream(
        model="echo-small", max_tokens=32000, messages=[{"role": "user", "content": "a b c d e f g h i"}]
    ) as stream:
        msg = stream.get_final_message()
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3


def test_absurd_max_tokens_is_the_api_400_naming_it(echo_url: str) -> None:
    """Beyond 2**31 - 1, max_tokens is refused with the API's wording for a value
    over the model's maximum, not clamped; up to it, clamped as above."""
    prompt = '"messages": [{"role": "user", "content": "a b c d e f g h i"}]'
    json_type = {"content-type": "application/json"}
    for value in ("99999999999999999999", str(2**63), str(2**31)):
        raw = f'{{"model": "echo-small", "max_tokens": {value}, {prompt}}}'
        resp = httpx.post(f"{echo_url}/v1/messages", content=raw, headers=json_type)
        assert resp.status_code == 400
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(
            f"max_tokens: {value} > 2147483647, which is the maximum allowed number of output tokens for "
            "echo-small"
        ), error
    raw = f'{{"model": "echo-small", "max_tokens": {2**31 - 1}, {prompt}}}'
    resp = httpx.post(f"{echo_url}/v1/messages", content=raw, headers=json_type)
    assert resp.status_code == 200
    assert resp.json()["stop_reason"] == "max_tokens" and resp.json()["usage"]["output_tokens"] == 3


def test_async_client_streams(echo_url: str) -> None:
    import asyncio

    async def run() -> str:
        async with anthropic.AsyncAnthropic(base_url=echo_url, api_key="x", max_retries=0) as client:
            async with client.messages.stream(
                model="echo", max_tokens=10, messages=[{"role": "user", "content": "async works"}]
            ) as stream:
                parts = [t async for t in stream.text_stream]
                final = await stream.get_final_message()
        assert final.content[0].text == "".join(parts)
        return "".join(parts)

    assert asyncio.run(run()) == "async works"


def test_max_output_tokens_caps_max_tokens(echo: anthropic.Anthropic) -> None:
    msg = echo.messages.create(
        model="echo-capped", max_tokens=100, messages=[{"role": "user", "content": "a b c d"}]
    )
    assert msg.content[0].text == "a b" and msg.stop_reason == "max_tokens"


def test_claude_code_billing_header_is_stripped(echo: anthropic.Anthropic) -> None:
    messages = [{"role": "user", "content": "hello"}]
    plain = echo.messages.count_tokens(
        model="echo", system=[{"type": "text", "text": "be kind"}], messages=messages
    )
    billed = echo.messages.count_tokens(
        model="echo",
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.0; cch=abc;"},
            {"type": "text", "text": "be kind"},
        ],
        messages=messages,
    )
    assert billed.input_tokens == plain.input_tokens == 3
