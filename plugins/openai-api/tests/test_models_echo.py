"""``GET /v1/models/{id}`` for OpenAI clients resolves the id as a
request's ``model`` resolves (configured ids, literal and glob aliases),
through the official ``openai`` SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest

CONFIG: dict[str, Any] = {
    "models": {
        "echo": {"driver": "echo", "context_window": 1000, "aliases": ["gpt-4o", "gpt-5*"]},
        "echo-other": {"driver": "echo", "context_window": 1000},
    },
}


@pytest.mark.parametrize("requested", ["echo", "gpt-4o", "gpt-5-mini", "gpt-5.1-codex"])
def test_retrieve_resolves_like_a_request(client: openai.OpenAI, requested: str) -> None:
    model = client.models.retrieve(requested)
    assert (model.id, model.object, model.owned_by) == (requested, "model", "missive") and model.created > 0
    done = client.chat.completions.create(model=requested, messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "hi"  # the same id a request may name


def test_unknown_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-4")
    assert caught.value.code == "model_not_found" and caught.value.param == "model"
    assert caught.value.type == "invalid_request_error"
    assert caught.value.body["message"] == "The model 'gpt-4' does not exist"  # type: ignore[index]
    listed = [m.id for m in client.models.list()]
    assert listed == ["echo", "echo-other", "gpt-4o"]  # a glob alias is not listed
