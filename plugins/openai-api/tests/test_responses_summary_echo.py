"""Reasoning summaries of ``POST /v1/responses`` (``reasoning.summary``)
through the official ``openai`` SDK on the scripted ``echo`` driver: the
reasoning item's ``summary`` holds the model's reasoning, streamed as
``response.reasoning_summary_*`` events; without ``summary`` the raw
reasoning stays in ``content`` (``response.reasoning_text.*``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

THOUGHT = json.dumps({"script": [{"thinking": "hmm, "}, {"thinking": "ok"}, {"text": "Yes."}]})


def _kinds(events: list[Any]) -> list[str]:
    kinds = [str(e.type) for e in events]
    return [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]


@pytest.mark.parametrize("summary", ["auto", "concise", "detailed"])
def test_summary_holds_the_reasoning(client: openai.OpenAI, summary: str) -> None:
    asked = {"effort": "low", "summary": summary}
    done = client.responses.create(model="echo-think", input=THOUGHT, reasoning=asked)  # type: ignore[arg-type]
    reasoning, message = done.output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert [(p.type, p.text) for p in reasoning.summary] == [("summary_text", "hmm, ok")]
    assert not reasoning.content and done.reasoning is not None and done.reasoning.summary == summary


def test_summary_stream_events(client: openai.OpenAI) -> None:
    asked = {"effort": "low", "summary": "auto"}
    events = list(client.responses.create(model="echo-think", input=THOUGHT, reasoning=asked, stream=True))  # type: ignore[arg-type]
    assert _kinds(events)[:9] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    assert not any(e.type.startswith("response.reasoning_text") for e in events)
    deltas = [e for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(e.delta for e in deltas) == "hmm, ok"
    assert {(e.item_id, e.output_index, e.summary_index) for e in deltas} == {(deltas[0].item_id, 0, 0)}
    (text_done,) = [e for e in events if e.type == "response.reasoning_summary_text.done"]
    (part_done,) = [e for e in events if e.type == "response.reasoning_summary_part.done"]
    assert text_done.text == part_done.part.text == "hmm, ok" and part_done.part.type == "summary_text"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    plain = client.responses.create(model="echo-think", input=THOUGHT, reasoning=asked)  # type: ignore[arg-type]
    assert final.output[0].summary == plain.output[0].summary  # type: ignore[union-attr]


def test_without_summary_the_raw_reasoning(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(model="echo-think", input=THOUGHT, reasoning={"effort": "low"}, stream=True)
    )
    assert "response.reasoning_text.delta" in _kinds(events)
    assert not any("summary" in e.type for e in events)
    reasoning = events[-1].response.output[0]  # type: ignore[union-attr]
    assert reasoning.summary == [] and reasoning.content[0].text == "hmm, ok"


def test_a_summary_kept_and_sent_back(client: openai.OpenAI) -> None:
    """A summarised item sent back (with its signature) shows the model its reasoning again."""
    asked = {"effort": "low", "summary": "auto"}
    done = client.responses.create(
        model="echo-think",
        input=THOUGHT,
        reasoning=asked,  # type: ignore[arg-type]
        include=["reasoning.encrypted_content"],
    )
    again = client.responses.create(
        model="echo-think",
        input=[
            {"role": "user", "content": THOUGHT},
            *[i.model_dump(exclude_none=True) for i in done.output],
            {"role": "user", "content": json.dumps({"script": [{"echo_thinking": True}]})},
        ],
        store=False,
    )
    assert again.output_text == "replayed thinking: hmm, ok"


def test_bad_summary(client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]) -> None:
    error = refused(client.responses.create, model="echo-think", input="x", reasoning={"summary": "long"})
    assert error.param == "reasoning.summary"  # type: ignore[attr-defined]
