"""The spec of :class:`missive.messages.stream.MessageStream`, row by row.

Each row feeds a scripted driver's events (:mod:`missive.driver.events`)
straight into the stream and lists the exact API events it must produce
after ``message_start`` (as vLLM's stream converter tests do for its
OpenAI stream). No server, no model: a change to the stream's rules shows
here first, with the row that says what the rule is. The live-server tests
(``test_streaming*.py``, ``test_tools*.py``, ``test_thinking*.py``) check the
same rules end to end through the SDK.

Ids that are random by design (``srvtoolu_...``) are replaced by their
order of appearance; a thinking block's signature by what it verifies as
(it must open, with the server's key, to the block's text at its position).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from missive.config import ModelEntry
from missive.driver.capabilities import Capabilities
from missive.driver.events import (
    Finished,
    GenerationEvent,
    Started,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)
from missive.driver.interface import Driver, GenerationRequest
from missive.messages.stream import MessageStream, accumulate
from missive.protocol.errors import ApiError, MissiveError, OverloadedError
from missive.testing import generation_request
from missive.thinking.signing import Signer

pytestmark = pytest.mark.anyio

KEY = b"k" * 32
ALL_MODES = frozenset({"auto", "any", "tool", "none"})
WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}

Script = list["GenerationEvent | BaseException"]


class Scripted(Driver):
    """A driver that plays one script per generation round (a server tool's
    result starts another round), raising the exceptions it holds where they
    stand; it notes every request and every closed generation."""

    name = "scripted"

    def __init__(self, *rounds: Script) -> None:
        super().__init__(
            "scripted-model",
            ModelEntry(driver="scripted"),
            Capabilities(tool_choice=ALL_MODES, thinking=True),
        )
        self.rounds = list(rounds)
        self.requests: list[GenerationRequest] = []
        self.closed = 0

    async def count_tokens(self, request: GenerationRequest) -> int:
        return 0

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:  # type: ignore[override]
        self.requests.append(request)
        script = self.rounds.pop(0)
        try:
            for item in script:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed += 1


# -- expected events ---------------------------------------------------------------


def opened(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, **kind: Any) -> dict[str, Any]:
    ((name, value),) = kind.items()
    key = {
        "text_delta": "text",
        "thinking_delta": "thinking",
        "input_json_delta": "partial_json",
        "signature_delta": "signature",
    }[name]
    return {"type": "content_block_delta", "index": index, "delta": {"type": name, key: value}}


def closed(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


TEXT = {"type": "text", "text": ""}
THINKING = {"type": "thinking", "thinking": "", "signature": ""}


def ending(
    stop_reason: str,
    output_tokens: int,
    *,
    stop_sequence: str | None = None,
    input_tokens: int = 7,
    cache_read: int = 0,
    cache_creation: int = 0,
    **more: Any,
) -> list[dict[str, Any]]:
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output_tokens,
        **more,
    }
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage,
        },
        {"type": "message_stop"},
    ]


def tool_use(call_id: str, name: str = "get_weather") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {}}


# -- the table ------------------------------------------------------------------


@dataclass
class Row:
    """One rule: a request, the driver's script(s), the API events after ``message_start``."""

    name: str
    rounds: list[Script]
    expected: list[dict[str, Any]]
    body: dict[str, Any] = field(default_factory=dict)
    #: the error ``events()`` raises after ``expected`` (None: it ends normally).
    error: tuple[type[MissiveError], str] | None = None


def start(input_tokens: int = 7, **cache: int) -> Started:
    return Started(input_tokens, **cache)


ROWS = [
    Row(
        "text deltas become one text block; usage counts their tokens",
        [[start(), TextDelta("Hello"), TextDelta(", world", tokens=2), Finished("end_turn")]],
        [
            opened(0, TEXT),
            delta(0, text_delta="Hello"),
            delta(0, text_delta=", world"),
            closed(0),
            *ending("end_turn", 3),
        ],
    ),
    Row(
        "a driver that ends without Finished ends the turn",
        [[start(), TextDelta("Hi")]],
        [opened(0, TEXT), delta(0, text_delta="Hi"), closed(0), *ending("end_turn", 1)],
    ),
    Row(
        "whitespace that would open a text block is held and dropped at the end",
        [[start(), TextDelta("\n\n"), Finished("end_turn")]],
        [*ending("end_turn", 1)],
    ),
    Row(
        "a stop sequence split across deltas: the text before it is sent, the match is not",
        [
            [
                start(),
                TextDelta("Hello ST"),
                TextDelta("OP and more"),
                TextDelta("never read"),
                Finished("end_turn"),
            ]
        ],
        [
            opened(0, TEXT),
            delta(0, text_delta="Hello "),
            closed(0),
            *ending("stop_sequence", 2, stop_sequence="STOP"),
        ],
        body={"stop_sequences": ["STOP"]},
    ),
    Row(
        "a held prefix that does not complete a stop sequence is sent as it goes on",
        [[start(), TextDelta("Hello ST"), TextDelta("ay"), Finished("end_turn")]],
        [
            opened(0, TEXT),
            delta(0, text_delta="Hello "),
            delta(0, text_delta="STay"),
            closed(0),
            *ending("end_turn", 2),
        ],
        body={"stop_sequences": ["STOP"]},
    ),
    Row(
        "a held prefix at the end of the answer is sent before the block closes",
        [[start(), TextDelta("Hello ST"), Finished("end_turn")]],
        [
            opened(0, TEXT),
            delta(0, text_delta="Hello "),
            delta(0, text_delta="ST"),
            closed(0),
            *ending("end_turn", 1),
        ],
        body={"stop_sequences": ["STOP"]},
    ),
    Row(
        "a tool call is a tool_use block with its arguments as input_json_delta; the stop reason is tool_use",
        [
            [
                start(),
                TextDelta("Let me check."),
                TextDelta("\n"),
                ToolCallStart("get_weather", id="toolu_01A"),
                ToolCallDelta('{"city":'),
                ToolCallDelta(' "Paris"}'),
                ToolCallEnd(),
                Finished("end_turn"),
            ]
        ],
        [
            opened(0, TEXT),
            delta(0, text_delta="Let me check."),
            delta(0, text_delta="\n"),
            closed(0),
            opened(1, tool_use("toolu_01A")),
            delta(1, input_json_delta='{"city":'),
            delta(1, input_json_delta=' "Paris"}'),
            closed(1),
            *ending("tool_use", 4),
        ],
        body={"tools": [WEATHER]},
    ),
    Row(
        "whitespace between two calls is not a text block",
        [
            [
                start(),
                ToolCallStart("get_weather", id="toolu_01A"),
                ToolCallDelta('{"city": "Paris"}'),
                ToolCallEnd(),
                TextDelta("\n\n"),
                ToolCallStart("get_weather", id="toolu_01B"),
                ToolCallDelta('{"city": "Rome"}'),
                ToolCallEnd(),
                Finished("end_turn"),
            ]
        ],
        [
            opened(0, tool_use("toolu_01A")),
            delta(0, input_json_delta='{"city": "Paris"}'),
            closed(0),
            opened(1, tool_use("toolu_01B")),
            delta(1, input_json_delta='{"city": "Rome"}'),
            closed(1),
            *ending("tool_use", 3),
        ],
        body={"tools": [WEATHER]},
    ),
    Row(
        "disable_parallel_tool_use: the answer ends after the first call",
        [
            [
                start(),
                ToolCallStart("get_weather", id="toolu_01A"),
                ToolCallDelta('{"city": "Paris"}'),
                ToolCallEnd(),
                ToolCallStart("get_weather", id="toolu_01B"),
                ToolCallDelta('{"city": "Rome"}'),
                ToolCallEnd(),
            ]
        ],
        [
            opened(0, tool_use("toolu_01A")),
            delta(0, input_json_delta='{"city": "Paris"}'),
            closed(0),
            *ending("tool_use", 1),
        ],
        body={"tools": [WEATHER], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
    ),
    Row(
        "a call the model repeats ends the answer before the repeat (its tokens still count)",
        [
            [
                start(),
                ToolCallStart("get_weather", id="toolu_01A"),
                ToolCallDelta('{"city": "Paris"}'),
                ToolCallEnd(),
                ToolCallStart("get_weather", id="toolu_01B"),
                ToolCallDelta('{"city":"Paris"}'),
                ToolCallEnd(),
                TextDelta("never sent"),
            ]
        ],
        [
            opened(0, tool_use("toolu_01A")),
            delta(0, input_json_delta='{"city": "Paris"}'),
            closed(0),
            *ending("tool_use", 2),
        ],
        body={"tools": [WEATHER], "tool_choice": {"type": "any"}},
    ),
    Row(
        "a call cut off by max_tokens keeps its block; the stop reason stays max_tokens",
        [
            [
                start(),
                ToolCallStart("get_weather", id="toolu_01A"),
                ToolCallDelta('{"city": "Pa'),
                Finished("max_tokens"),
            ]
        ],
        [
            opened(0, tool_use("toolu_01A")),
            delta(0, input_json_delta='{"city": "Pa'),
            closed(0),
            *ending("max_tokens", 1),
        ],
        body={"tools": [WEATHER]},
    ),
    Row(
        "thinking: a thinking block, its text, one signature just before its stop, then the answer",
        [[start(), ThinkingDelta("Paris is "), ThinkingDelta("in France."), TextDelta("France.")]],
        [
            opened(0, THINKING),
            delta(0, thinking_delta="Paris is "),
            delta(0, thinking_delta="in France."),
            delta(0, signature_delta=("signed", "Paris is in France.", 0)),
            closed(0),
            opened(1, TEXT),
            delta(1, text_delta="France."),
            closed(1),
            *ending("end_turn", 3),
        ],
        body={"thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048},
    ),
    Row(
        "thinking with display omitted: the block and a sealed signature, no text",
        [[start(), ThinkingDelta("secret"), TextDelta("Yes.")]],
        [
            opened(0, THINKING),
            delta(0, signature_delta=("sealed", "secret", 0)),
            closed(0),
            opened(1, TEXT),
            delta(1, text_delta="Yes."),
            closed(1),
            *ending("end_turn", 2),
        ],
        body={
            "thinking": {"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
            "max_tokens": 2048,
        },
    ),
    Row(
        "thinking the client did not ask for is dropped but counted",
        [[start(), ThinkingDelta("hmm", tokens=5), TextDelta("Yes.")]],
        [opened(0, TEXT), delta(0, text_delta="Yes."), closed(0), *ending("end_turn", 6)],
    ),
    Row(
        "max_tokens: the driver's stop reason and its exact output count win",
        [[start(), TextDelta("one two"), Finished("max_tokens", output_tokens=3)]],
        [opened(0, TEXT), delta(0, text_delta="one two"), closed(0), *ending("max_tokens", 3)],
    ),
    Row(
        "refusal: the driver's stop reason goes through",
        [[start(), TextDelta("I can't help with that."), Finished("refusal")]],
        [opened(0, TEXT), delta(0, text_delta="I can't help with that."), closed(0), *ending("refusal", 1)],
    ),
    Row(
        "usage: input and cache fields repeated, corrected by Finished",
        [
            [
                start(10, cache_read_input_tokens=90),
                TextDelta("ok"),
                Finished(
                    "end_turn", input_tokens=12, cache_read_input_tokens=88, cache_creation_input_tokens=0
                ),
            ]
        ],
        [
            opened(0, TEXT),
            delta(0, text_delta="ok"),
            closed(0),
            *ending("end_turn", 1, input_tokens=12, cache_read=88),
        ],
    ),
    Row(
        "a MissiveError mid-stream: what was sent stays sent, the open block is not closed",
        [[start(), TextDelta("partial"), OverloadedError("the backend is overloaded")]],
        [opened(0, TEXT), delta(0, text_delta="partial")],
        error=(OverloadedError, "the backend is overloaded"),
    ),
    Row(
        "any other driver failure mid-stream is an api_error naming the driver",
        [[start(), TextDelta("partial"), RuntimeError("boom")]],
        [opened(0, TEXT), delta(0, text_delta="partial")],
        error=(ApiError, "internal error in driver 'scripted': RuntimeError"),
    ),
    Row(
        "a second Started is an error of the driver",
        [[start(), TextDelta("a"), start()]],
        [opened(0, TEXT), delta(0, text_delta="a")],
        error=(ApiError, "driver 'scripted' started the message twice"),
    ),
    Row(
        "tool arguments outside a call are an error of the driver",
        [[start(), ToolCallDelta("{}")]],
        [],
        error=(ApiError, "driver 'scripted' sent tool arguments outside a tool call"),
        body={"tools": [WEATHER]},
    ),
    Row(
        "a server tool call is answered at once (unavailable without a runner), then the model goes on",
        [
            [
                start(),
                TextDelta("Searching."),
                ToolCallStart("web_search", id="call_9"),
                ToolCallDelta('{"query": "x"}'),
                ToolCallEnd(),
                TextDelta("never read: the round stops at the result"),
            ],
            [start(20), TextDelta("Nothing found."), Finished("end_turn")],
        ],
        [
            opened(0, TEXT),
            delta(0, text_delta="Searching."),
            closed(0),
            opened(1, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
            delta(1, input_json_delta='{"query": "x"}'),
            closed(1),
            opened(
                2,
                {
                    "type": "web_search_tool_result",
                    "tool_use_id": "srvtoolu_1",
                    "content": {"type": "web_search_tool_result_error", "error_code": "unavailable"},
                },
            ),
            closed(2),
            opened(3, TEXT),
            delta(3, text_delta="Nothing found."),
            closed(3),
            *ending(
                "end_turn",
                3,
                input_tokens=27,
                server_tool_use={"web_search_requests": 0, "web_fetch_requests": 0},
            ),
        ],
        body={"tools": [WEB_SEARCH]},
    ),
]


def _normalized(events: list[dict[str, Any]], signer: Signer, position: int) -> list[dict[str, Any]]:
    """``events`` with random ids numbered and signatures replaced by what
    they verify as (see the module doc)."""
    ids: dict[str, str] = {}
    blocks = 0
    out = []
    for event in events:
        text = json.dumps(event)
        for found in re.findall(r"srvtoolu_[A-Za-z0-9_]+", text):
            ids.setdefault(found, f"srvtoolu_{len(ids) + 1}")
        for raw, number in ids.items():
            text = text.replace(raw, number)
        event = json.loads(text)
        got = event.get("delta", {})
        if got.get("type") == "signature_delta":
            signature = got["signature"]
            opened_text = signer.open(signature, "", turn=position, block=blocks)
            kind = "sealed" if opened_text is not None else "signed"
            if opened_text is None:
                thinking = "".join(
                    e["delta"]["thinking"]
                    for e in events
                    if e.get("delta", {}).get("type") == "thinking_delta" and e["index"] == event["index"]
                )
                opened_text = signer.open(signature, thinking, turn=position, block=blocks)
            event = {**event, "delta": {"type": "signature_delta", "signature": (kind, opened_text, blocks)}}
            blocks += 1
        out.append(event)
    return out


async def _play(row: Row) -> tuple[list[dict[str, Any]], BaseException | None, Scripted]:
    driver = Scripted(*row.rounds)
    body = {"max_tokens": 100, **row.body}
    request = generation_request([{"role": "user", "content": "Weather in Paris?"}], driver=driver, **body)
    stream = MessageStream(driver, request, message_id="msg_table", model="claude-test", signer=Signer(KEY))
    first = await stream.start()
    assert first["message"]["usage"]["output_tokens"] == 0
    events: list[dict[str, Any]] = []
    error: BaseException | None = None
    try:
        async for event in stream.events():
            events.append(event)
    except MissiveError as exc:
        error = exc
    return events, error, driver


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
async def test_row(row: Row) -> None:
    events, error, driver = await _play(row)
    assert _normalized(events, Signer(KEY), position=0) == row.expected
    if row.error is None:
        assert error is None, error
    else:
        kind, message = row.error
        assert isinstance(error, kind) and error.message == message, error
    assert driver.closed == len(driver.requests)  # every generation was stopped (a stop sequence too)


async def test_message_start_carries_the_prompt_usage() -> None:
    driver = Scripted(
        [start(10, cache_read_input_tokens=90, cache_creation_input_tokens=3), Finished("end_turn")]
    )
    request = generation_request([{"role": "user", "content": "x"}], driver=driver)
    first = await MessageStream(driver, request, message_id="msg_1", model="claude-test").start()
    assert first == {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 3,
                "cache_read_input_tokens": 90,
                "output_tokens": 0,
            },
        },
    }


@pytest.mark.parametrize(
    "script, message",
    [
        ([], "driver 'scripted' ended without starting a message"),
        ([TextDelta("x")], "driver 'scripted' sent TextDelta before Started"),
    ],
)
async def test_a_driver_that_does_not_start_is_an_error_before_the_stream(
    script: Script, message: str
) -> None:
    driver = Scripted(script)
    request = generation_request([{"role": "user", "content": "x"}], driver=driver)
    with pytest.raises(ApiError) as raised:
        await MessageStream(driver, request, message_id="msg_1", model="claude-test").start()
    assert raised.value.message == message and driver.closed == 1


async def test_the_fold_of_a_row_is_the_non_streaming_message() -> None:
    """``accumulate``: the tool call row as the Message a non-streaming client gets."""
    row = next(r for r in ROWS if r.name.startswith("a tool call is a tool_use block"))
    driver = Scripted(*row.rounds)
    request = generation_request(
        [{"role": "user", "content": "x"}], driver=driver, max_tokens=100, **row.body
    )
    stream = MessageStream(driver, request, message_id="msg_1", model="claude-test")
    events = [await stream.start()]
    events += [event async for event in stream.events()]
    assert accumulate(events) == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [
            {"type": "text", "text": "Let me check.\n"},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 4,
        },
    }
