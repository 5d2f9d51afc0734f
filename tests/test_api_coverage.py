"""Every field and type the installed SDK defines is handled, accepted or
ignored on purpose (core/missive/api_coverage.py), and the docs say so.

The lists come from the installed ``anthropic`` package by introspection,
so a new SDK version with a new request field, block type, thinking type,
edit type, response or usage field, or model field fails here until it is
given a row. Handled rows name a module that exists; ignored rows are
reported in ``missive-ignored`` by a live server; docs/api-compatibility.md
holds the generated tables verbatim.
"""

from __future__ import annotations

import importlib
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic.types import message_count_tokens_params, message_create_params
from anthropic.types.beta import (
    beta_context_management_config_param,
)
from anthropic.types.beta import (
    message_count_tokens_params as beta_count_params,
)
from anthropic.types.beta import (
    message_create_params as beta_create_params,
)

from missive.protocol import coverage as cov
from missive.testing import in_process_app

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api-compatibility.md"


def typed_dict_keys(*types: Any) -> set[str]:
    keys: set[str] = set()
    for td in types:
        keys |= set(td.__required_keys__) | set(td.__optional_keys__)
    return keys


def _members(alias: Any) -> Iterator[Any]:
    for member in typing.get_args(alias):
        if typing.get_origin(member) is typing.Annotated:
            member = typing.get_args(member)[0]
        if typing.get_origin(member) is typing.Union:
            yield from _members(member)
        elif isinstance(member, type):
            yield member


def type_literals(alias: Any) -> set[str]:
    """The ``type`` literal of each member of a union of TypedDicts or models."""
    found: set[str] = set()
    for member in _members(alias):
        annotations: dict[str, Any] = {}
        for klass in reversed(member.__mro__):
            annotations.update(getattr(klass, "__annotations__", {}))
        spelled = annotations.get("type")
        match = re.search(r"Literal\[([^\]]*)\]", spelled if isinstance(spelled, str) else repr(spelled))
        assert match, f"{member.__name__}: no type literal in {spelled!r}"
        found |= {v.strip().strip("'\"") for v in match.group(1).split(",")}
    return found


B = anthropic.types.beta
SDK: dict[str, tuple[set[str], dict[str, cov.Row]]] = {
    "request fields": (
        typed_dict_keys(
            message_create_params.MessageCreateParamsNonStreaming,
            message_create_params.MessageCreateParamsStreaming,
            beta_create_params.MessageCreateParamsNonStreaming,
            beta_create_params.MessageCreateParamsStreaming,
            message_count_tokens_params.MessageCountTokensParams,
            beta_count_params.MessageCountTokensParams,
        ),
        cov.REQUEST_FIELDS,
    ),
    "content block types": (
        type_literals(B.BetaContentBlockParam) | type_literals(anthropic.types.ContentBlockParam),
        cov.BLOCK_TYPES,
    ),
    "thinking types": (
        type_literals(B.BetaThinkingConfigParam) | type_literals(anthropic.types.ThinkingConfigParam),
        cov.THINKING_TYPES,
    ),
    "edit types": (type_literals(beta_context_management_config_param.Edit), cov.EDIT_TYPES),
    "response fields": (
        set(B.BetaMessage.model_fields) | set(anthropic.types.Message.model_fields),
        cov.RESPONSE_FIELDS,
    ),
    "usage fields": (
        set(B.BetaUsage.model_fields) | set(B.BetaMessageDeltaUsage.model_fields),
        cov.USAGE_FIELDS,
    ),
    "response block types": (
        type_literals(B.BetaContentBlock) | type_literals(anthropic.types.ContentBlock),
        cov.RESPONSE_BLOCK_TYPES,
    ),
    "model fields": (
        set(anthropic.types.ModelInfo.model_fields) | set(B.BetaModelInfo.model_fields),
        cov.MODEL_FIELDS,
    ),
}


@pytest.mark.parametrize("kind", list(SDK))
def test_every_sdk_name_has_a_row(kind: str) -> None:
    names, rows = SDK[kind]
    missing = sorted(names - set(rows))
    assert not missing, (
        f"anthropic {anthropic.__version__} defines {kind} Missive does not cover: {missing}; "
        "add a row to missive.protocol.coverage (handled, accepted or ignored with the reason), then "
        "regenerate the tables of docs/api-compatibility.md (.venv/bin/python scripts/regen-api-tables)"
    )


def test_handlers_exist() -> None:
    for _, rows in SDK.values():
        for name, row in rows.items():
            if row.kind in ("handled", "produced") and row.where not in cov.PENDING_MERGE:
                importlib.import_module(row.where)  # raises: a stale handler name
            assert row.what, name
            if row.kind == "ignored":
                assert row.example is not None, (
                    f"{name}: an ignored row needs an example that triggers its report"
                )


def test_docs_hold_the_generated_tables() -> None:
    assert cov.markdown() in DOCS.read_text(encoding="utf-8"), (
        "docs/api-compatibility.md is out of date: run `.venv/bin/python scripts/regen-api-tables` (or paste "
        "the output of `python -m missive.protocol.coverage` into its SDK coverage section)"
    )


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """Plain HTTP to the app in process (the headers the SDK hides)."""
    config = {
        "models": {
            "m": {
                "driver": "echo",
                "context_window": 10_000,
                "settings": {"capabilities": {"tool_choice": ["auto", "any", "tool", "none"]}},
            }
        }
    }
    with in_process_app(config) as app:
        yield app.http_client(httpx, timeout=60)


def _ignored_header(http: httpx.Client, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    response = http.post("/v1/messages", json={**base, **body}, headers=headers or {})
    assert response.status_code == 200, response.text
    return response.headers.get("missive-ignored", "")


@pytest.mark.parametrize("name", sorted(n for n, r in cov.REQUEST_FIELDS.items() if r.kind == "ignored"))
def test_ignored_request_fields_are_reported(http: httpx.Client, name: str) -> None:
    example = cov.REQUEST_FIELDS[name].example
    if isinstance(example, tuple):  # a header the SDK sends for this parameter
        header, value = example
        assert header in _ignored_header(http, {}, {header: value})
    else:
        assert re.search(rf"(^|, ){name}\b", _ignored_header(http, {name: example}))


def test_fast_speed_is_reported_and_standard_is_not(http: httpx.Client) -> None:
    assert "speed (no fast mode" in _ignored_header(http, {"speed": "fast"})
    assert "speed" not in _ignored_header(http, {"speed": "standard"})


@pytest.mark.parametrize("name", sorted(n for n, r in cov.BLOCK_TYPES.items() if r.kind == "ignored"))
def test_ignored_block_types_are_reported(http: httpx.Client, name: str) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}, cov.BLOCK_TYPES[name].example]},
        {"role": "user", "content": "go on"},
    ]
    assert f'messages.1.content.1 (block type "{name}")' in _ignored_header(http, {"messages": messages})
