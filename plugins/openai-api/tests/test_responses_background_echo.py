"""Background responses (``background: true``) through the official
``openai`` SDK on the scripted ``echo`` driver: answered at once
``in_progress``, polled with ``GET /v1/responses/{id}`` until
``completed`` (or ``failed``), stopped with ``POST .../cancel``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import openai
import pytest


def script(*steps: dict[str, Any]) -> str:
    return json.dumps({"script": list(steps)})


def _settled(client: openai.OpenAI, response_id: str) -> Any:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = client.responses.retrieve(response_id)
        if found.status not in ("queued", "in_progress"):
            return found
        time.sleep(0.05)
    raise AssertionError(f"{response_id} still {found.status}")


def test_polled_until_completed(client: openai.OpenAI, tmp_path: Path) -> None:
    go = tmp_path / "go"
    started = client.responses.create(
        model="echo", input=script({"text": "Hel"}, {"wait_file": str(go)}, {"text": "lo"}), background=True
    )
    assert started.status == "in_progress" and started.background is True and started.output == []
    assert client.responses.retrieve(started.id).status == "in_progress"
    with pytest.raises(openai.BadRequestError):  # nothing to continue from yet
        client.responses.create(model="echo", previous_response_id=started.id, input="next")
    go.touch()
    done = _settled(client, started.id)
    assert done.status == "completed" and done.output_text == "Hello" and done.background is True
    assert done.usage is not None and done.usage.output_tokens == 2
    thought = json.dumps({"script": [{"thinking": "hmm"}, {"text": "Yes"}]})
    reasoned = client.responses.create(
        model="echo-think", input=thought, reasoning={"effort": "low", "summary": "auto"}, background=True
    )
    reasoned = _settled(client, reasoned.id)
    assert reasoned.usage is not None and reasoned.usage.output_tokens_details.reasoning_tokens == 1
    assert reasoned.output[0].summary[0].text == "hmm"  # type: ignore[union-attr]
    assert [i.type for i in client.responses.input_items.list(started.id).data] == ["message"]
    after = client.responses.create(model="echo", previous_response_id=started.id, input="next")
    assert after.status == "completed"
    assert client.responses.cancel(started.id).status == "completed"  # nothing left to stop


def test_cancelled(client: openai.OpenAI, tmp_path: Path) -> None:
    never = tmp_path / "never"
    started = client.responses.create(
        model="echo", input=script({"text": "Wait"}, {"wait_file": str(never)}), background=True
    )
    cancelled = client.responses.cancel(started.id)
    assert cancelled.status == "cancelled" and cancelled.id == started.id
    assert client.responses.retrieve(started.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="echo", previous_response_id=started.id, input="next")
    # The model is free again: a plain request is answered.
    assert client.responses.create(model="echo", input="free").output_text == "free"


def test_failed_and_refused(client: openai.OpenAI) -> None:
    started = client.responses.create(
        model="echo",
        input=script({"text": "a"}, {"error": {"type": "overloaded_error", "message": "busy"}}),
        background=True,
    )
    failed = _settled(client, started.id)
    assert failed.status == "failed" and failed.error is not None and failed.error.message == "busy"
    plain = client.responses.create(model="echo", input="x")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(plain.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_nope")
    # A request the core refuses is refused in the request, not polled.
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="echo", input="x", background=True, max_output_tokens=0)
    assert caught.value.param == "max_output_tokens"  # type: ignore[attr-defined]


def test_deleted_while_running_stays_deleted(client: openai.OpenAI, tmp_path: Path) -> None:
    """Deleting a running background response stops it: it is not written
    back when its generation would have ended, and cancelling it is a 404."""
    go = tmp_path / "go"
    started = client.responses.create(
        model="echo",
        input=script({"text": "Long"}, {"wait_file": str(go)}, {"text": " story"}),
        background=True,
    )
    assert client.responses.delete(started.id) is None
    go.touch()
    time.sleep(0.3)
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel(started.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(started.id)
    # the slot is free: a plain request is answered
    assert client.responses.create(model="echo", input="free").output_text == "free"
