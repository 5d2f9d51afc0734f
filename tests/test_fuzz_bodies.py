"""Hostile request bodies never reach a 500 (property-based, through a live server).

Valid Messages API bodies are mutated one to three times (a value replaced by
one of another JSON type, a string holding control characters or non-ASCII,
a huge integer, a key removed, a key added) and sent to the echo server's
``/v1/messages`` (streaming and not) and ``count_tokens``. Every answer must
be a success or a 4xx in the API's error envelope; a stream must end with
``message_stop`` or an ``error`` event; the server must stay up. The failures
this found first: a block ``type`` that is a list or object (an unhashable
discriminator key), and a control character echoed into the
``missive-ignored`` header (h11 refuses it: an empty 500).

One base body goes to the openai driver, in front of the fake
OpenAI-compatible server, with a stop sequence that ends its answers early
(the server stops reading the backend's stream). The server runs with
:func:`missive.testing.watch_async_generators`: once the fuzzing is over, no
async generator of Missive or of a plugin may have been finalized by the
garbage collector, and the log may hold no never-retrieved task exception
and no ``already running`` / ``didn't stop after athrow`` error (issue 16).

The suite runs a fixed, derandomized slice (:data:`EXAMPLES` bodies);
``MISSIVE_FUZZ_EXAMPLES=10000`` runs that many, with fresh randomness. Each
request has a 30 s timeout: a hang fails the test.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from missive.testing import (
    GENERATOR_ERRORS,
    ServerProcess,
    finalized_generators,
    serve_process,
    watch_async_generators,
)
from missive_openai.testing import FakeChatServer

EXAMPLES = int(os.environ.get("MISSIVE_FUZZ_EXAMPLES", "300"))

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"

TOOL = {
    "name": "get_weather",
    "description": "Weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}

BASES: list[dict[str, Any]] = [
    {"model": "echo", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello there"}]},
    {
        "model": "echo-tools",
        "max_tokens": 16,
        "system": [{"type": "text", "text": "Be brief."}],
        "tools": [TOOL],
        "tool_choice": {"type": "auto"},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01",
                        "content": [{"type": "text", "text": "18 C"}],
                    }
                ],
            },
        ],
    },
    {
        "model": "echo-think",
        "max_tokens": 32,
        "thinking": {"type": "enabled", "budget_tokens": 16},
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u1"},
        "temperature": 0.5,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG_1PX},
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "A note."},
                    },
                    {"type": "text", "text": "Describe.", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
    },
    {
        "model": "echo",
        "max_tokens": 16,
        "thread": {"type": "continue", "previous_message_id": "msg_unknown"},
        "diagnostics": {"previous_message_id": "msg_unknown"},
        "messages": [{"role": "user", "content": "Again"}],
    },
    {
        "model": "openai",
        "max_tokens": 16,
        "stop_sequences": ["there"],
        "temperature": 0.2,
        "tools": [TOOL],
        "tool_choice": {"type": "auto"},
        "messages": [{"role": "user", "content": "Hello there, how are you today"}],
    },
]

REPO = Path(__file__).resolve().parents[1]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (not the root)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append((*prefix, key))
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found.append((*prefix, i))
            found += _paths(item, (*prefix, i))
    return found


hostile_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",))
    | st.sampled_from("\x00\x1b\r\n\x7f\u2028<|im_end|>"),
    max_size=12,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    hostile_text,
    st.sampled_from(
        [
            "text",
            "image",
            "tool_use",
            "tool_result",
            "thinking",
            "document",
            "auto",
            "any",
            "user",
            "assistant",
            "base64",
            "",
            "enabled",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    body = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(body)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = body
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(hostile_text)] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return body


def check(response: httpx.Response, stream: bool) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        envelope = response.json()
        assert envelope["type"] == "error" and envelope["error"]["type"] and envelope["error"]["message"], (
            envelope
        )
    elif stream:
        events = [
            line.removeprefix("event: ") for line in response.text.splitlines() if line.startswith("event: ")
        ]
        assert events and events[-1] in ("message_stop", "error"), events


@pytest.fixture(scope="module")
def server(echo_config: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The echo server's models plus ``openai`` (the fake backend), watched
    for async generators finalized by the garbage collector."""
    with FakeChatServer(vllm=False, max_model_len=4096) as fake:
        config = copy.deepcopy(echo_config)
        config["models"]["openai"] = {
            "driver": "openai",
            "context_window": 1000,
            "settings": {"base_url": fake.url, "model": "fake-model"},
        }
        env = watch_async_generators(tmp_path_factory.mktemp("watch"))
        with serve_process(config, env=env) as server:
            yield server


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Any:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="MISSIVE_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=mutated(), stream=st.booleans())
def test_mutated_bodies_never_reach_a_500(http: httpx.Client, body: dict[str, Any], stream: bool) -> None:
    """A mutated body, streamed or not, and its ``count_tokens``: a success or
    a 4xx error envelope, never a 500; a stream ends with ``message_stop`` or
    ``error``; every answer comes within 30 s."""
    data = json.dumps({**body, "stream": stream} if isinstance(body, dict) else body).encode()
    headers = {"content-type": "application/json"}
    check(http.post("/v1/messages", content=data, headers=headers), stream)
    check(http.post("/v1/messages/count_tokens", content=json.dumps(body).encode(), headers=headers), False)


def test_server_survived(http: httpx.Client, server: ServerProcess) -> None:
    """After the fuzzing, the server still answers a plain request, no async
    generator of Missive or a plugin was finalized by the garbage collector
    (every one was closed by its task), and the log holds none of the errors
    of generators closed from another task."""
    response = http.post("/v1/messages", json=BASES[0])
    assert response.status_code == 200 and response.json()["type"] == "message"
    log = server.log()
    assert finalized_generators(log, under=(REPO / "core", REPO / "plugins")) == []
    for error in GENERATOR_ERRORS:
        assert error not in log
