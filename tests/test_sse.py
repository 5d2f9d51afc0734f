"""Pacing of the SSE stream: pings on silence, merged deltas, nothing lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from missive.protocol.errors import OverloadedError
from missive.protocol.sse import frame, merge_deltas, paced


def delta(text: str, index: int = 0, kind: str = "text_delta", field: str = "text") -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: text}}


async def source(*steps: Any) -> AsyncIterator[dict[str, Any]]:
    for step in steps:
        if isinstance(step, (int, float)):
            await asyncio.sleep(step)
        elif isinstance(step, Exception):
            raise step
        else:
            yield step


async def collect(gen: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event async for event in gen]


def run(*steps: Any, ping: float = 10.0, interval: float = 0.0) -> list[dict[str, Any]]:
    return asyncio.run(collect(paced(source(*steps), ping_interval=ping, delta_interval=interval)))


def test_fast_deltas_merge_but_the_first_is_immediate() -> None:
    events = run(
        {"type": "message_start"},
        delta("a"),
        delta("b"),
        delta("c"),
        {"type": "content_block_stop", "index": 0},
        interval=0.5,
    )
    assert events == [
        {"type": "message_start"},
        delta("a"),
        delta("bc"),
        {"type": "content_block_stop", "index": 0},
    ]


def test_zero_interval_sends_every_delta() -> None:
    events = run(delta("a"), delta("b"), delta("c"))
    assert events == [delta("a"), delta("b"), delta("c")]


def test_slow_deltas_are_not_merged() -> None:
    assert run(delta("a"), 0.05, delta("b"), 0.05, delta("c"), interval=0.01) == [
        delta("a"),
        delta("b"),
        delta("c"),
    ]


def test_different_blocks_and_kinds_never_merge() -> None:
    json_delta = delta('{"a"', index=1, kind="input_json_delta", field="partial_json")
    events = run(
        delta("a"), delta("b"), json_delta, delta(": 1}", 1, "input_json_delta", "partial_json"), interval=1
    )
    # "b" is held, then sent as soon as a delta it cannot merge with arrives;
    # the two JSON fragments of block 1 merge with each other only
    assert events == [delta("a"), delta("b"), delta('{"a": 1}', 1, "input_json_delta", "partial_json")]


def test_held_deltas_precede_an_error() -> None:
    async def main() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        with pytest.raises(OverloadedError):
            async for event in paced(
                source(delta("a"), delta("b"), delta("c"), OverloadedError("busy")),
                ping_interval=10,
                delta_interval=1,
            ):
                got.append(event)
        return got

    assert asyncio.run(main()) == [delta("a"), delta("bc")]


def test_pings_during_silence() -> None:
    events = run(delta("a"), 0.35, delta("b"), ping=0.1)
    assert [e["type"] for e in events].count("ping") >= 2
    assert [e for e in events if e["type"] != "ping"] == [delta("a"), delta("b")]


def test_merge_rules() -> None:
    assert merge_deltas(delta("a"), delta("b")) == delta("ab")
    sig = {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}}
    assert merge_deltas(sig, sig) is None
    assert merge_deltas(delta("a"), {"type": "ping"}) is None


def test_frame_shape() -> None:
    assert frame({"type": "ping"}) == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert frame(delta("é")).decode().endswith('"text":"é"}}\n\n')


def test_stop_ends_a_running_source_after_what_was_sent() -> None:
    """When ``stop`` resolves (the end of a shutdown's grace), a source
    still running is closed and ``stop_error()`` raised after the events
    already sent, the held delta included; nothing is sent twice."""
    closed = []

    async def slow() -> AsyncIterator[dict[str, Any]]:
        try:
            yield delta("a")
            yield delta("b")  # held (interval 10 s), then flushed before the error
            await asyncio.sleep(60)
            yield delta("never")
        finally:
            closed.append(True)

    async def main() -> list[dict[str, Any]]:
        stop = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.1, stop.set_result, None)
        got: list[dict[str, Any]] = []
        with pytest.raises(OverloadedError, match="shutting down"):
            async for event in paced(
                slow(),
                ping_interval=10,
                delta_interval=10,
                stop=stop,
                stop_error=lambda: OverloadedError("shutting down"),
            ):
                got.append(event)
        return got

    assert asyncio.run(asyncio.wait_for(main(), 10)) == [delta("a"), delta("b")]
    assert closed == [True]


def test_stop_lets_a_source_that_has_ended_finish() -> None:
    """A source whose last event is already read ahead when ``stop``
    resolves is played to its end, with no error."""

    async def main() -> list[dict[str, Any]]:
        stop = asyncio.get_running_loop().create_future()
        events = paced(
            source(delta("a"), delta("b"), {"type": "message_stop"}),
            ping_interval=10,
            stop=stop,
            stop_error=lambda: OverloadedError("shutting down"),
        )
        got = [await events.__anext__()]
        await asyncio.sleep(0.05)  # the pump reads the rest: the source has ended
        stop.set_result(None)
        got += [event async for event in events]
        return got

    assert asyncio.run(asyncio.wait_for(main(), 10)) == [delta("a"), delta("b"), {"type": "message_stop"}]
