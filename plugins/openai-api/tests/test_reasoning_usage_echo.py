"""The reasoning tokens of an answer in OpenAI's usage (Chat Completions'
``completion_tokens_details.reasoning_tokens``, Responses'
``output_tokens_details.reasoning_tokens``), through the ``openai`` SDK on
the ``echo`` driver (a token per scripted delta; the app is conftest's)."""

from __future__ import annotations

import json

import openai

#: Two thinking deltas (2 tokens), then text (3 tokens).
THOUGHT = json.dumps({"script": [{"thinking": "hmm, "}, {"thinking": "ok"}, {"text": "Yes", "tokens": 3}]})


def test_chat_completions(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": THOUGHT}]
    done = client.chat.completions.create(model="echo-think", messages=messages, reasoning_effort="low")
    assert done.usage is not None and done.usage.completion_tokens == 5
    assert done.usage.completion_tokens_details is not None
    assert done.usage.completion_tokens_details.reasoning_tokens == 2
    chunks = list(
        client.chat.completions.create(
            model="echo-think",
            messages=messages,
            reasoning_effort="low",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage == done.usage
    plain = client.chat.completions.create(model="echo-think", messages=[{"role": "user", "content": "a b"}])
    assert plain.usage is not None and plain.usage.completion_tokens_details is not None
    assert plain.usage.completion_tokens_details.reasoning_tokens == 0


def test_responses(client: openai.OpenAI) -> None:
    done = client.responses.create(model="echo-think", input=THOUGHT, reasoning={"effort": "low"})
    assert done.usage is not None and done.usage.output_tokens == 5
    assert done.usage.output_tokens_details.reasoning_tokens == 2
    events = list(
        client.responses.create(model="echo-think", input=THOUGHT, reasoning={"effort": "low"}, stream=True)
    )
    final = events[-1]
    assert final.type == "response.completed" and final.response.usage == done.usage
