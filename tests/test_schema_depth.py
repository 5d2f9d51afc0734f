"""A JSON schema nested deeper than :data:`missive.tools.validate.MAX_SCHEMA_DEPTH`
(a tool's ``input_schema``, ``output_config.format.schema``) is a 400 that
names it and says why, not a recursion error's text from whatever read it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from missive.testing import in_process_app
from missive.tools.validate import MAX_SCHEMA_DEPTH, schema_too_deep

USER = [{"role": "user", "content": "hello"}]
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def nested(levels: int) -> dict[str, Any]:
    """A schema of ``levels`` objects and arrays one inside another (a level of
    ``properties`` is two: the schema and its ``properties``)."""
    schema: dict[str, Any] = {"type": "object"}
    depth = 1
    while depth + 2 <= levels:
        schema = {"type": "object", "properties": {"a": schema}}
        depth += 2
    return schema if depth == levels else {"type": "array", "items": schema}


def test_depth_is_measured_without_recursion() -> None:
    assert schema_too_deep(nested(MAX_SCHEMA_DEPTH)) is None
    assert "nested more than 64 levels" in (schema_too_deep(nested(MAX_SCHEMA_DEPTH + 1)) or "")
    deepest: list[Any] = []
    for _ in range(50_000):  # far past Python's recursion limit
        deepest = [deepest]
    assert schema_too_deep({"type": "array", "items": deepest}) is not None


@pytest.fixture(scope="module")
def raw() -> Any:
    with in_process_app({"models": {"echo": {"driver": "echo"}}}) as app:
        yield app.http_client()


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"tools": [{"name": "f", "input_schema": nested(501)}]}, "tools.0: input_schema: "),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": nested(501)}}},
            "output_config.format: schema: ",
        ),
    ],
)
def test_too_deep_schema_is_a_clear_400(raw: httpx.Client, extra: dict[str, Any], where: str) -> None:
    body = {"model": "echo", "max_tokens": 5, "messages": USER, **extra}
    response = raw.post("/v1/messages", json=body, headers=HEADERS)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(where + "the JSON schema is nested more than 64 levels deep")
    assert "Recursion" not in error["message"] and "recursion" not in error["message"]


def test_schema_at_the_limit_is_taken(raw: httpx.Client) -> None:
    body = {
        "model": "echo",
        "max_tokens": 5,
        "messages": USER,
        "tools": [{"name": "f", "input_schema": nested(MAX_SCHEMA_DEPTH)}],
        "tool_choice": {"type": "none"},
    }
    response = raw.post("/v1/messages", json=body, headers=HEADERS)
    assert "nested" not in response.text, response.text
