"""Every path of the SDK's request types, at every depth, is handled,
accepted or ignored on purpose (core/missive/protocol/coverage_nested.py).

The paths come from the installed ``anthropic`` package
(:mod:`missive.protocol.coverage_paths`), so a new nested field of a new SDK
(as 2.16's ``messages[].clear_at`` or ``output_config.task_budget``) fails
here until a rule classifies it. Ignored examples are sent to the app in
process and must come back in ``missive-ignored``; docs/api-compatibility.md
holds the generated table.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, Literal, Optional, Union

import anthropic
import httpx
import pytest
from typing_extensions import Annotated, NotRequired, Required, TypedDict  # noqa: UP035 (the SDK's wrappers)

from missive.protocol import coverage_nested as cov
from missive.protocol import coverage_paths
from missive.testing import in_process_app

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api-compatibility.md"


@cache
def sdk_paths() -> tuple[str, ...]:
    return tuple(coverage_paths.request_paths())


@cache
def classified() -> dict[str, str]:
    table = cov.rules()
    found = {path: cov.classify(path, table) for path in sdk_paths()}
    return {path: hit[0] for path, hit in found.items() if hit is not None}


# -- the walker --------------------------------------------------------------


class _Url(TypedDict, total=False):
    type: Required[Literal["url"]]
    url: Required[str]


class _B64(TypedDict, total=False):
    type: Required[Literal["base64"]]
    data: str


class _Node(TypedDict, total=False):
    name: Annotated[Required[str], "doc"]
    source: Optional[Union[_Url, _B64]]  # noqa: UP007, UP045 (the SDK's spelling)
    children: NotRequired[list["_Node"]]  # noqa: UP037 (a forward reference)
    sources: list[Union[_Url, _B64]]  # noqa: UP007
    tags: dict[str, "_Url"]  # noqa: UP037


def test_walker_names_variants_unwraps_and_guards_recursion() -> None:
    assert sorted(coverage_paths.walk(_Node)) == [
        "children",
        "name",
        "source",
        "source[base64]",
        "source[base64].data",
        "source[base64].type",
        "source[url]",
        "source[url].type",
        "source[url].url",
        "sources",
        "sources[base64]",
        "sources[base64].data",
        "sources[base64].type",
        "sources[url]",
        "sources[url].type",
        "sources[url].url",
        "tags",
        "tags{}.type",
        "tags{}.url",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "messages[].clear_at",
        "messages[].output_config.effort",
        "messages[].content[image].source[url].url",
        "messages[].content[image].transformations.oversized_image",
        "thinking[adaptive].block_binding.prefix_mismatch_behavior",
        "thinking[adaptive].display",
        "output_config.task_budget.total",
        "tools[web_fetch_20260318].url_sources",
        "messages[].content[tool_result].content[text].text",
    ],
)
def test_walker_reaches_nested_fields_of_the_sdk(path: str) -> None:
    assert path in sdk_paths()


# -- the table ---------------------------------------------------------------


def test_every_sdk_path_is_classified() -> None:
    missing = [path for path in sdk_paths() if path not in classified()]
    assert not missing, (
        f"anthropic {anthropic.__version__} defines request fields no rule covers: {missing[:40]}; "
        "add a rule to missive.protocol.coverage_nested (handled, accepted or ignored with the reason; "
        "an ignored one reported in missive-ignored), then regenerate docs/api-compatibility.md's "
        "'SDK coverage at every depth' (.venv/bin/python scripts/regen-api-tables)"
    )


def test_every_nested_rule_covers_a_path() -> None:
    used = set(classified().values())
    stale = sorted(key for key in cov.NESTED if key not in used)
    assert not stale, f"rules that cover no path of anthropic {anthropic.__version__}: {stale}"


def test_classification_of_known_paths() -> None:
    """The most specific rule wins: a subtree rule below a broader one, an
    exact row of the top-level tables over a glob."""
    table = cov.rules()

    def kind(path: str) -> str:
        hit = cov.classify(path, table)
        assert hit is not None, path
        return hit[1].kind

    assert kind("messages[].content[compaction].signature") == "handled"
    assert kind("messages[].content[compaction].tool_changes[tool_addition].type") == "ignored"
    assert kind("messages[].content[text].cache_control.ttl") == "accepted"
    assert kind("mcp_servers[url].url") == "handled"
    assert kind("tools[mcp_toolset].cache_control.ttl") == "accepted"
    assert kind("context_management.edits[compact_20260112].trigger.value") == "ignored"
    assert kind("context_management.edits[clear_tool_uses_20250919].keep.value") == "handled"
    assert kind("tools[code_execution_20250825].name") == "ignored"
    assert kind("tools[web_search_20260318].user_location.city") == "handled"
    assert cov.classify("no_such_field.x", table) is None


def test_handlers_exist() -> None:
    for key, rule in {**cov.NESTED, **cov.LEGACY_FIELDS}.items():
        assert rule.what, key
        if rule.kind == "handled":
            importlib.import_module(rule.where)  # raises: a stale handler name
        if rule.example is not None:
            assert rule.kind == "ignored" and rule.reports, key


def test_docs_hold_the_generated_table() -> None:
    assert cov.markdown() in DOCS.read_text(encoding="utf-8"), (
        "docs/api-compatibility.md is out of date: run `.venv/bin/python scripts/regen-api-tables` (or "
        "paste the output of `python -m missive.protocol.coverage_nested` into its 'SDK coverage at every "
        "depth' section)"
    )


# -- the reports -------------------------------------------------------------


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    config = {
        "models": {
            "m": {
                "driver": "echo",
                "context_window": 10_000,
                "settings": {"capabilities": {"tool_choice": ["auto", "any", "tool", "none"]}},
            },
            "n": {"driver": "echo", "context_window": 10_000},
        }
    }
    with in_process_app(config) as app:
        yield app.http_client(httpx, timeout=60)


def _ignored(http: httpx.Client, body: dict[str, Any]) -> list[str]:
    base = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    response = http.post("/v1/messages", json={**base, **body})
    assert response.status_code == 200, response.text
    return [item.strip() for item in response.headers.get("missive-ignored", "").split(", ")]


_EXAMPLES = sorted(key for key, rule in cov.NESTED.items() if rule.example is not None)


def test_ignored_rules_have_examples() -> None:
    assert len(_EXAMPLES) >= 10


@pytest.mark.parametrize("key", _EXAMPLES)
def test_ignored_nested_fields_are_reported(http: httpx.Client, key: str) -> None:
    rule = cov.NESTED[key]
    assert rule.example is not None
    assert rule.reports in _ignored(http, rule.example)


def test_thinking_display_updates_is_reported_and_omitted_is_not(http: httpx.Client) -> None:
    updates = _ignored(http, {"thinking": {"type": "adaptive", "display": "updates"}})
    assert 'thinking.display ("updates": thinking is returned whole)' in updates
    omitted = _ignored(http, {"thinking": {"type": "adaptive", "display": "omitted"}})
    assert not any(item.startswith("thinking.display") for item in omitted)


def test_a_budget_beside_another_thinking_type_is_reported(http: httpx.Client) -> None:
    """Only ``enabled`` takes ``budget_tokens``: beside ``adaptive`` or
    ``disabled`` it is reported, not silently dropped (found by a newcomer)."""
    for kind in ("adaptive", "disabled"):
        found = _ignored(http, {"thinking": {"type": kind, "budget_tokens": 5}})
        assert f'thinking.budget_tokens (type "{kind}" takes no budget: only "enabled" does)' in found
    found = _ignored(
        http, {"fallbacks": [{"model": "n", "thinking": {"type": "adaptive", "budget_tokens": 5}}]}
    )
    note = 'thinking.budget_tokens (type "adaptive" takes no budget: only "enabled" does)'
    assert f"fallbacks.0.{note}" in found


def test_unknown_keys_of_a_fallback_entry_are_reported(http: httpx.Client) -> None:
    entry = {
        "model": "n",
        "thinking": {"type": "adaptive", "display": "updates", "block_binding": {}},
        "output_config": {"effort": "low", "task_budget": {"type": "tokens", "total": 5}},
    }
    found = _ignored(http, {"fallbacks": [entry]})
    assert "fallbacks.0.thinking.block_binding" in found
    assert "fallbacks.0.output_config.task_budget" in found
    assert 'fallbacks.0.thinking.display ("updates": thinking is returned whole)' in found
    assert not any(item.startswith("fallbacks.0.output_config.effort") for item in found)


def test_an_added_definition_is_classified_as_the_same_field_of_tools() -> None:
    """A ``tool_addition``'s definition is checked as a ``tools`` entry
    (missive.tools.changes), so its fields share the ``tools`` rules."""
    added = "messages[].content[tool_addition].tool[tool_definition].definition"
    for rest in (
        "[custom].input_schema.properties",
        "[web_fetch_20260318].url_sources",
        "[bash_20250124].name",
    ):
        assert cov.classify(added + rest) == cov.classify("tools" + rest)
    assert cov.classify(added)[1].where == "missive.tools.changes"  # type: ignore[index]
