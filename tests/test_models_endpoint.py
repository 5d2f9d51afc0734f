"""``GET /v1/models`` and ``/v1/models/{id}`` with pagination (contract section 6)."""

from __future__ import annotations

import anthropic
import httpx
import pytest


@pytest.fixture(scope="module")
def all_ids(echo_config: dict) -> list[str]:
    """Configured models in configuration order, then literal aliases (``claude-local``)."""
    ids = list(echo_config["models"])
    assert ids[:3] == ["echo", "echo-b", "echo-c"] and len(ids) > 4
    return [*ids, "claude-local"]


def test_list_and_auto_pagination(echo: anthropic.Anthropic, all_ids: list[str]) -> None:
    page = echo.models.list(limit=2)
    assert [m.id for m in page.data] == all_ids[:2]
    assert page.has_more is True and page.first_id == "echo" and page.last_id == "echo-b"
    assert [m.id for m in echo.models.list(limit=2)] == all_ids  # the SDK follows after_id to the end
    first = page.data[0]
    assert first.display_name == "Echo" and first.type == "model" and first.created_at.tzinfo is not None


def test_after_and_before(echo_url: str, all_ids: list[str]) -> None:
    after = httpx.get(f"{echo_url}/v1/models", params={"after_id": "echo-c"}).json()
    assert [m["id"] for m in after["data"]] == all_ids[3:]
    assert after["has_more"] is False
    before = httpx.get(f"{echo_url}/v1/models", params={"before_id": "echo-c", "limit": 1}).json()
    assert [m["id"] for m in before["data"]] == ["echo-b"] and before["has_more"] is True
    assert httpx.get(f"{echo_url}/v1/models", params={"limit": 0}).status_code == 400


def test_retrieve_with_alias(echo: anthropic.Anthropic) -> None:
    model = echo.models.retrieve("claude-haiku-4-5")
    assert model.id == "claude-haiku-4-5" and model.display_name == "Echo" and model.max_input_tokens == 1000
    with pytest.raises(anthropic.NotFoundError):
        echo.models.retrieve("gpt-4")


def test_literal_aliases_are_listed_for_model_pickers(echo: anthropic.Anthropic) -> None:
    listed = {m.id: m for m in echo.models.list(limit=100)}
    assert listed["claude-local"].display_name == "Echo"  # the literal alias, shown for Claude Code's picker
    assert not any("*" in model_id for model_id in listed)  # glob patterns are never listed
