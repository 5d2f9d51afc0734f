"""The request log (core/missive/logs.py, record.py) through live servers on
the echo driver: one ``info`` line per request with its fields, the JSON
format parseable line by line with the request id on every line about a
request, and no API key (nor, below debug, prompt text) in the log."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import ServerProcess, serve_process, until
from missive_echo import script

KEY = "sk-log-test-Zq81xWv3"
WRONG_KEY = "sk-wrong-Hk27pLm9"
PROMPT_WORD = "Xylophonic4471"
CONFIG: dict[str, Any] = {
    "server": {"api_keys": [KEY]},
    "models": {"echo": {"driver": "echo", "context_window": 1000}},
}
DEADLINE = 30.0


def access_lines(server: ServerProcess) -> list[str]:
    return [line for line in server.log().splitlines() if " missive.access: " in line]


def wait_for(server: ServerProcess, fragment: str) -> str:
    """The first log line containing ``fragment`` (waits: a stream's line is
    written when its body ends, after the client has read it)."""
    found: str = until(
        lambda: next((line for line in server.log().splitlines() if fragment in line), None),
        f"a log line with {fragment!r}",
        DEADLINE,
        0.05,
        detail=server.log,
    )
    return found


def fields_of(line: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", line))


@pytest.fixture(scope="module")
def text_server() -> Iterator[ServerProcess]:
    with serve_process(CONFIG) as proc:
        yield proc


def test_one_info_line_per_request_with_its_fields(text_server: ServerProcess) -> None:
    """A streamed answer and a 404 each get exactly one ``INFO`` line from
    missive.access, tagged with the response's request-id, carrying model,
    endpoint, status, token counts, time to first token, total time and the
    stop reason (or the error type)."""
    client = anthropic.Anthropic(base_url=text_server.url, api_key=KEY, max_retries=0)
    with client.messages.with_streaming_response.create(
        model="echo",
        max_tokens=20,
        stream=True,
        messages=[
            {"role": "user", "content": script({"text": "a b c", "tokens": 3}, cache_read_input_tokens=2)}
        ],
    ) as response:
        rid = response.headers["request-id"]
        response.read()
    line = wait_for(text_server, f"[{rid}] missive.access")
    assert " INFO " in line and "POST /v1/messages 200 " in line
    fields = fields_of(line)
    assert {
        k: fields[k]
        for k in ("endpoint", "model", "stream", "cache_read_input_tokens", "output_tokens", "stop_reason")
    } == {
        "endpoint": "/v1/messages",
        "model": "echo",
        "stream": "true",
        "cache_read_input_tokens": "2",
        "output_tokens": "3",
        "stop_reason": "end_turn",
    }
    assert int(fields["input_tokens"]) > 0
    assert 0 <= float(fields["ttft_s"]) <= float(fields["duration_s"])
    assert sum(rid in line for line in access_lines(text_server)) == 1

    missing = httpx.post(
        f"{text_server.url}/v1/messages",
        headers={"x-api-key": KEY},
        json={"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert missing.status_code == 404
    line = wait_for(text_server, f"[{missing.headers['request-id']}] missive.access")
    assert "POST /v1/messages 404 " in line and fields_of(line)["error_type"] == "not_found_error"
    assert "model=" not in line  # no served model: the client's string is not logged as one


def test_no_api_key_or_prompt_text_in_the_info_log(text_server: ServerProcess) -> None:
    """After requests with the key in both headers, one with a wrong key and
    one answered with the prompt's text, neither key nor the prompt's words
    are anywhere in the log at info level."""
    client = anthropic.Anthropic(
        base_url=text_server.url,
        api_key=KEY,
        max_retries=0,
        default_headers={"authorization": f"Bearer {KEY}"},
    )
    client.messages.create(
        model="echo", max_tokens=20, messages=[{"role": "user", "content": f"say {PROMPT_WORD}"}]
    )
    wrong = httpx.get(f"{text_server.url}/v1/models", headers={"x-api-key": WRONG_KEY}, timeout=10)
    assert wrong.status_code == 401
    wait_for(text_server, f"[{wrong.headers['request-id']}] missive.access")
    log = text_server.log()
    assert KEY not in log and WRONG_KEY not in log and PROMPT_WORD not in log


def test_json_lines_with_the_request_id_on_every_request_line() -> None:
    """With --log-format json every line of the log (start-up included) is
    one JSON object with timestamp, level, logger, message and request_id;
    a request's own lines (here the ``ignored`` notice of its beta header
    and its access line) carry its request id, the access line its fields
    as keys; at debug level the key is still never written."""
    with serve_process(
        {**CONFIG, "server": {**CONFIG["server"], "log_level": "debug"}}, args=("--log-format", "json")
    ) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
        raw = client.messages.with_raw_response.create(
            model="echo",
            max_tokens=20,
            messages=[{"role": "user", "content": "one two"}],
            extra_headers={"anthropic-beta": "some-beta-2099"},
        )
        rid = raw.headers["request-id"]
        wait_for(server, f'"request_id": "{rid}", "method"')
        log = server.log()
    records = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert all({"timestamp", "level", "logger", "message", "request_id"} <= set(r) for r in records)
    assert any(r["logger"] == "missive.cli" and r["message"].startswith("Missive serving") for r in records)
    mine = [r for r in records if r["request_id"] == rid]
    ignored = [r for r in mine if r["message"] == "ignored: anthropic-beta=some-beta-2099"]
    [access] = [r for r in mine if r["logger"] == "missive.access"]
    assert ignored and access["level"] == "info"
    assert {
        k: access[k]
        for k in (
            "method",
            "path",
            "status",
            "model",
            "input_tokens",
            "output_tokens",
            "stop_reason",
            "stream",
        )
    } == {
        "method": "POST",
        "path": "/v1/messages",
        "status": 200,
        "model": "echo",
        "input_tokens": 2,
        "output_tokens": 2,
        "stop_reason": "end_turn",
        "stream": False,
    }
    assert isinstance(access["ttft_s"], float) and isinstance(access["duration_s"], float)
    assert KEY not in log
