"""Streamed background responses (``background`` and ``stream``) through the
official ``openai`` SDK on the scripted ``echo`` driver: streamed as they
are written, polled with the output so far, picked up again with ``GET
/v1/responses/{id}?stream=true&starting_after=N`` after the client left."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from missive.testing import InProcessApp


def script(*steps: dict[str, Any]) -> str:
    return json.dumps({"script": list(steps)})


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The ``data:`` objects of an SSE body's whole events."""
    found = []
    for chunk in body.split(b"\n\n")[:-1]:
        for line in chunk.split(b"\n"):
            if line.startswith(b"data: "):
                found.append(json.loads(line[6:]))
    return found


def test_streamed_left_and_picked_up_again(app: InProcessApp, client: openai.OpenAI, tmp_path: Path) -> None:
    go = tmp_path / "go"
    body = {
        "model": "echo",
        "input": script({"text": "Hel"}, {"wait_file": str(go)}, {"text": "lo"}, {"text": " there"}),
        "background": True,
        "stream": True,
    }
    with app.hold("/v1/responses", body) as held:
        assert held.status() == 200
        seen = sse_events(held.wait_for('"delta":"Hel"'))
        held.close()  # the client leaves: the response goes on
    assert [e["sequence_number"] for e in seen] == list(range(len(seen)))
    assert seen[0]["type"] == "response.created" and seen[0]["response"]["background"] is True
    response_id, last = seen[0]["response"]["id"], seen[-1]["sequence_number"]
    polled = client.responses.retrieve(response_id)
    assert polled.status == "in_progress" and polled.output_text == "Hel"  # the output so far
    assert polled.output[0].status == "in_progress"

    picked: list[Any] = []
    follower = threading.Thread(
        target=lambda: picked.extend(client.responses.retrieve(response_id, stream=True, starting_after=last))
    )
    follower.start()
    time.sleep(0.3)
    go.touch()
    follower.join(30)
    assert not follower.is_alive()
    assert [e.sequence_number for e in picked] == list(range(last + 1, last + 1 + len(picked)))
    deltas = "".join(e.delta for e in picked if e.type == "response.output_text.delta")
    assert deltas == "lo there"
    assert picked[-1].type == "response.completed" and picked[-1].response.output_text == "Hello there"
    assert client.responses.retrieve(response_id).status == "completed"
    whole = list(client.responses.retrieve(response_id, stream=True))
    assert whole[0].sequence_number == 0 and whole[-1].type == "response.completed"
    assert "".join(e.delta for e in whole if e.type == "response.output_text.delta") == "Hello there"


def test_stream_of_a_response_not_in_background(client: openai.OpenAI, raw: httpx.Client) -> None:
    plain = client.responses.create(model="echo", input="x")
    with pytest.raises(openai.BadRequestError) as caught:
        list(client.responses.retrieve(plain.id, stream=True))
    assert caught.value.param == "stream" and "background=true" in caught.value.message  # type: ignore[attr-defined]
    started = client.responses.create(model="echo", input="y", background=True)
    refused = raw.get(f"/v1/responses/{started.id}", params={"stream": "true", "starting_after": "x"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "starting_after"
    refused = raw.get(f"/v1/responses/{started.id}", params={"stream": "maybe"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream"


def test_stream_of_a_cancelled_response_ends(client: openai.OpenAI, tmp_path: Path) -> None:
    """A cancelled background response's stream ends with a terminal event
    the SDK knows, ``response.incomplete``, its response ``cancelled``."""
    never = tmp_path / "never"
    started = client.responses.create(
        model="echo", input=script({"text": "Wait"}, {"wait_file": str(never)}), background=True
    )
    time.sleep(0.2)
    assert client.responses.cancel(started.id).status == "cancelled"
    events = list(client.responses.retrieve(started.id, stream=True))
    last = events[-1]
    assert last.type == "response.incomplete" and last.response.status == "cancelled"
    assert last.response.output_text == "Wait"
    assert [e.sequence_number for e in events] == list(range(len(events)))
