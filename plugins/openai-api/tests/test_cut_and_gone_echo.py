"""Answers that stop before their end, through the official ``openai`` SDK
on the scripted ``echo`` driver: a function call cut by the token limit
(its ``arguments`` the same text streamed or not; in the Responses API its
item ``incomplete``), a streamed response whose client went (kept as far as
it got), and ``previous_response_id`` naming a response with no finished
answer (running, cancelled: a 400 of its own)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest

from missive.testing import InProcessApp

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CHAT_WEATHER = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}


def script(*steps: dict[str, Any], stop_reason: str = "end_turn") -> str:
    return json.dumps({"script": list(steps), "stop_reason": stop_reason})


def call(*fragments: str) -> dict[str, Any]:
    return {"tool_call": {"name": "get_weather", "arguments": list(fragments)}}


#: A call the token limit cut (its last member unfinished), and a whole one
#: in the model's own spelling (spaces), both at the end of the answer.
CUT = script({"text": "Looking."}, call('{"city": "Oslo", ', '"unit": "cel'), stop_reason="max_tokens")
WHOLE = script({"text": "Looking."}, call('{"city":  ', '"Oslo" }'), stop_reason="max_tokens")


@pytest.mark.parametrize(
    ("content", "arguments"), [(CUT, '{"city": "Oslo", "unit": "cel'), (WHOLE, '{"city":  "Oslo" }')]
)
def test_chat_arguments_are_the_streamed_text(client: openai.OpenAI, content: str, arguments: str) -> None:
    messages: Any = [{"role": "user", "content": content}]
    done = client.chat.completions.create(model="echo-tools", messages=messages, tools=[CHAT_WEATHER])  # type: ignore[list-item]
    choice = done.choices[0]
    assert choice.finish_reason == "length" and choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].function.arguments == arguments  # type: ignore[union-attr]
    chunks = list(
        client.chat.completions.create(
            model="echo-tools", messages=messages, tools=[CHAT_WEATHER], stream=True
        )  # type: ignore[list-item]
    )
    streamed = "".join(
        call.function.arguments or ""
        for chunk in chunks
        for choice in chunk.choices
        for call in choice.delta.tool_calls or []
        if call.function is not None
    )
    assert streamed == arguments


@pytest.mark.parametrize(
    ("content", "arguments", "status"),
    [(CUT, '{"city": "Oslo", "unit": "cel', "incomplete"), (WHOLE, '{"city":  "Oslo" }', "completed")],
)
def test_responses_cut_call_is_incomplete(
    client: openai.OpenAI, content: str, arguments: str, status: str
) -> None:
    done = client.responses.create(model="echo-tools", input=content, tools=[WEATHER])  # type: ignore[list-item]
    assert done.status == "incomplete" and done.incomplete_details is not None
    message, function_call = done.output
    assert message.status == "completed"
    assert function_call.type == "function_call" and function_call.status == status
    assert function_call.arguments == arguments
    kept = client.responses.retrieve(done.id).output[1]
    assert kept.status == status and kept.arguments == arguments  # type: ignore[union-attr]
    events = list(client.responses.create(model="echo-tools", input=content, tools=[WEATHER], stream=True))  # type: ignore[list-item]
    (args_done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args_done.arguments == arguments
    item_done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.status for i in item_done] == ["completed", status]
    assert events[-1].type == "response.incomplete"
    final = events[-1].response  # type: ignore[union-attr]
    assert [(i.type, i.status) for i in final.output] == [(i.type, i.status) for i in done.output]
    assert final.output[1].arguments == arguments  # type: ignore[union-attr]
    stored = client.responses.retrieve(final.id).output[1]
    assert stored.status == status and stored.arguments == arguments  # type: ignore[union-attr]


def test_streamed_response_whose_client_went_is_kept(
    app: InProcessApp, client: openai.OpenAI, tmp_path: Path
) -> None:
    never = tmp_path / "never"
    body = {
        "model": "echo",
        "input": script({"text": "Hel"}, {"text": "lo"}, {"wait_file": str(never)}, {"text": " there"}),
        "stream": True,
    }
    with app.hold("/v1/responses", body) as held:
        seen = held.wait_for('"delta":"lo"')
        response_id = re.search(rb'"id":"(resp_[^"]+)"', seen).group(1).decode()  # type: ignore[union-attr]
        held.close()
    kept = client.responses.retrieve(response_id)
    assert kept.status == "incomplete" and kept.incomplete_details is not None
    assert kept.incomplete_details.reason == "client_disconnected"
    (message,) = kept.output
    assert message.type == "message" and message.status == "incomplete" and kept.output_text == "Hello"
    after = client.responses.create(model="echo-report", previous_response_id=response_id, input="next")
    assert after.status == "completed" and "Hello" in after.output_text
    # With store false nothing is kept.
    with app.hold("/v1/responses", {**body, "store": False}) as held:
        seen = held.wait_for('"delta":"lo"')
        response_id = re.search(rb'"id":"(resp_[^"]+)"', seen).group(1).decode()  # type: ignore[union-attr]
        held.close()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response_id)


def test_previous_response_running_or_cancelled(client: openai.OpenAI, tmp_path: Path) -> None:
    never = tmp_path / "never"
    started = client.responses.create(
        model="echo", input=script({"text": "Wait"}, {"wait_file": str(never)}), background=True
    )
    with pytest.raises(openai.BadRequestError) as running:
        client.responses.create(model="echo", previous_response_id=started.id, input="next")
    assert running.value.param == "previous_response_id"  # type: ignore[attr-defined]
    assert "still in progress" in running.value.message and "not found" not in running.value.message
    assert client.responses.cancel(started.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError) as cancelled:
        client.responses.create(model="echo", previous_response_id=started.id, input="next")
    assert cancelled.value.param == "previous_response_id"  # type: ignore[attr-defined]
    assert "was cancelled" in cancelled.value.message
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.create(model="echo", previous_response_id="resp_nope", input="next")
    assert unknown.value.code == "previous_response_not_found"


def test_cut_call_sent_back_is_accepted(client: openai.OpenAI) -> None:
    """A call this server cut short (its ``arguments`` not whole JSON) sent
    back in a stateless history (``store: false``, as Codex sends it) is
    read, not refused: Responses items and Chat ``tool_calls`` alike."""
    done = client.responses.create(model="echo-tools", input=CUT, tools=[WEATHER], store=False)  # type: ignore[list-item]
    cut = done.output[1]
    assert cut.type == "function_call" and cut.arguments == '{"city": "Oslo", "unit": "cel'
    history: Any = [
        {"role": "user", "content": CUT},
        *(item.model_dump(exclude_none=True) for item in done.output),
        {"type": "function_call_output", "call_id": cut.call_id, "output": "cut short"},
        {"role": "user", "content": "again"},
    ]
    again = client.responses.create(model="echo-tools", input=history, tools=[WEATHER], store=False)  # type: ignore[list-item]
    assert again.output_text == "again"
    messages: Any = [{"role": "user", "content": CUT}]
    first = client.chat.completions.create(model="echo-tools", messages=messages, tools=[CHAT_WEATHER])  # type: ignore[list-item]
    reply = first.choices[0].message
    assert reply.tool_calls is not None
    messages += [
        reply.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "cut short"},
        {"role": "user", "content": "again"},
    ]
    chat = client.chat.completions.create(model="echo-tools", messages=messages, tools=[CHAT_WEATHER])  # type: ignore[list-item]
    assert chat.choices[0].message.content == "again"
