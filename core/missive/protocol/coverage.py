"""What Missive does with every field and block type of the Messages API.

One row per name the official Python SDK's types define (request fields of
``MessageCreateParams`` and ``MessageCountTokensParams``, beta and not;
content block types of ``BetaContentBlockParam``; ``thinking`` types;
``context_management`` edit types; fields of the ``Message``, its ``usage``
and content block types of the response; fields of ``ModelInfo``), saying
how it is treated:

* ``handled``: acted on; ``where`` names the module that does it;
* ``accepted``: taken without a report because there is nothing to do by
  design (``why`` says why), such as ``cache_control`` (prefixes are cached
  automatically);
* ``ignored``: accepted, not acted on, and reported in the
  ``missive-ignored`` response header (a 400 in strict mode), with the
  reason; ``example`` is a value that triggers the report;
* for the response: ``produced`` (``where`` makes it) or ``absent`` (never
  sent, ``why`` says why).

``tests/test_api_coverage.py`` reads the installed SDK's types and fails
when one of them is missing here (the next new field), when a handler
module does not exist, when an ignored field is not reported, and when
docs/api-compatibility.md does not hold :func:`markdown`'s tables
(``python -m missive.protocol.coverage`` prints them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "Row",
    "REQUEST_FIELDS",
    "BLOCK_TYPES",
    "THINKING_TYPES",
    "EDIT_TYPES",
    "RESPONSE_FIELDS",
    "USAGE_FIELDS",
    "RESPONSE_BLOCK_TYPES",
    "MODEL_FIELDS",
    "PENDING_MERGE",
    "markdown",
]

Kind = Literal["handled", "accepted", "ignored", "produced", "absent"]


@dataclass(frozen=True)
class Row:
    """How one field or type is treated (see the module doc)."""

    kind: Kind
    what: str
    where: str = ""
    example: Any = None


def _h(where: str, what: str) -> Row:
    return Row("handled", what, where)


def _ignored(what: str, example: Any) -> Row:
    return Row("ignored", what, example=example)


#: Handler modules not in this tree yet (none since issue 26 part A was merged).
PENDING_MERGE: frozenset[str] = frozenset()

REQUEST_FIELDS: dict[str, Row] = {
    "model": _h(
        "missive.models.table", "resolved through exact ids, then alias globs; echoed in the response"
    ),
    "messages": _h(
        "missive.messages.conversation",
        "validated, folded into one conversation ([Conversation](#conversation))",
    ),
    "system": _h("missive.messages.conversation", "the leading system prompt"),
    "max_tokens": _h(
        "missive.driver.interface",
        "clamped to the model's output cap and context ([max_tokens](#max_tokens))",
    ),
    "stream": _h("missive.server.routes.messages", "SSE when true"),
    "stop_sequences": _h(
        "missive.messages.stop_sequences", "matched in the core ([Stop sequences](#stop-sequences))"
    ),
    "metadata": Row("accepted", "`user_id` is not used (no per-user state)"),
    "tools": _h("missive.tools.definitions", "offered to the model ([tools.md](tools.md))"),
    "tool_choice": _h("missive.tools.definitions", "enforced exactly where the driver declares the mode"),
    "thinking": _h(
        "missive.driver.thinking", "mapped to the model's reasoning switch ([thinking.md](thinking.md))"
    ),
    "output_config": _h(
        "missive.driver.thinking", "`effort` sets the reasoning depth; `format` needs `structured_output`"
    ),
    "cache_control": Row("accepted", "prompt prefixes are reused automatically"),
    "context_management": _h(
        "missive.context_management.editing",
        "edits applied before rendering ([Context editing](#context-editing))",
    ),
    "compaction": _h(
        "missive.context_management.compaction",
        "the model summarises the conversation ([Compaction](#compaction))",
    ),
    "fallbacks": _h(
        "missive.routing.chain", "tried in order when a model is overloaded ([Fallbacks](#fallbacks))"
    ),
    "thread": _h(
        "missive.threads.thread", "server-held conversation state ([Message threads](#message-threads))"
    ),
    "diagnostics": _h(
        "missive.threads.fingerprint", "`cache_miss_reason` ([Cache diagnostics](#cache-diagnostics))"
    ),
    "speed": _h(
        "missive.messages.placement", '`"standard"` is what every model does; `"fast"` is reported as ignored'
    ),
    "inference_geo": _ignored("inference runs where the server runs", "us"),
    "service_tier": _ignored("one service tier", "auto"),
    "container": _ignored("no code execution containers", "container_1"),
    "mcp_servers": _h(
        "missive.tools.mcp",
        "the MCP connector, where `[server_tools] mcp` is on (else reported in `missive-ignored`): "
        "tools listed, offered and run ([tools.md](tools.md#mcp-connector))",
    ),
    "billing_policy": _ignored("no billing", {"type": "billing_policy", "bill_to": "self"}),
    "fallback_credit_token": _ignored("no billing, and no model refuses", "tok"),
    "betas": _ignored(
        "the `anthropic-beta` header: each value is reported, never rejected",
        ("anthropic-beta", "x-test-2026-01-01"),
    ),
    "user_profile_id": _ignored(
        "the `anthropic-user-profile-id` header: no user profiles", ("anthropic-user-profile-id", "uprof_1")
    ),
    "workspace_id": _ignored(
        "the `anthropic-workspace-id` header: one workspace", ("anthropic-workspace-id", "wrkspc_1")
    ),
}

_SERVER_TOOL = "a server tool Missive does not run; left out of the prompt"

BLOCK_TYPES: dict[str, Row] = {
    "text": _h("missive.messages.conversation", "rendered"),
    "image": _h("missive.media.pipeline", "checked, fetched, fitted ([media.md](media.md))"),
    "document": _h("missive.media.pipeline", "turned into text ([media.md](media.md))"),
    "search_result": _h("missive.messages.conversation", "rendered as text"),
    "thinking": _h("missive.thinking.replay", "kept when its signature is this server's"),
    "redacted_thinking": Row(
        "accepted",
        "left out of the prompt (nothing a local model can read), named in `missive-dropped-thinking`",
    ),
    "tool_use": _h("missive.tools.history", "rendered; pairing checked"),
    "tool_result": _h("missive.tools.history", "rendered; pairing checked"),
    "server_tool_use": _h(
        "missive.tools.server",
        "`web_search`/`web_fetch`/tool search calls rendered with their results; others ignored",
    ),
    "web_search_tool_result": _h("missive.tools.server", "rendered with its call"),
    "web_fetch_tool_result": _h("missive.tools.server", "rendered with its call"),
    "compaction": _h("missive.context_management.compaction", "verified and rendered as the summary"),
    "fallback": Row("accepted", "not rendered, as the API does"),
    "advisor_tool_result": _ignored(
        _SERVER_TOOL, {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    ),
    "code_execution_tool_result": _ignored(
        _SERVER_TOOL, {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": {}}
    ),
    "bash_code_execution_tool_result": _ignored(
        _SERVER_TOOL, {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": {}}
    ),
    "text_editor_code_execution_tool_result": _ignored(
        _SERVER_TOOL,
        {"type": "text_editor_code_execution_tool_result", "tool_use_id": "srvtoolu_1", "content": {}},
    ),
    "tool_search_tool_result": _h(
        "missive.tools.tool_search", "rendered with its call; loads the tools it references"
    ),
    "mcp_tool_use": _h("missive.tools.mcp_history", "rendered as the call of an MCP tool, with its result"),
    "mcp_tool_result": _h("missive.tools.mcp_history", "rendered as the result of its call"),
    "mcp_tool_listing": _h(
        "missive.tools.mcp", "not rendered: the server's tools for the request, without listing them"
    ),
    "container_upload": _ignored(_SERVER_TOOL, {"type": "container_upload", "file_id": "file_1"}),
    "tool_addition": _h(
        "missive.tools.changes", "in a system message: the tool offered from there on, its definition there"
    ),
    "tool_removal": _h("missive.tools.changes", "in a system message: the tool withdrawn from there on"),
}

THINKING_TYPES: dict[str, Row] = {
    "enabled": _h(
        "missive.driver.thinking",
        "reasoning on with a budget; needs the `thinking` capability, except through an alias:"
        " then answered without thinking (`alias_thinking`)",
    ),
    "adaptive": _h("missive.driver.thinking", "reasoning on; the model decides"),
    "disabled": _h("missive.driver.thinking", "reasoning off"),
    "between_tools": _h(
        "missive.thinking.between_tools", "reasoning off; text before a tool call returned as thinking"
    ),
}

EDIT_TYPES: dict[str, Row] = {
    "clear_tool_uses_20250919": _h(
        "missive.context_management.editing", "older tool results (and inputs) replaced by a placeholder"
    ),
    "clear_thinking_20251015": _h(
        "missive.context_management.editing", "thinking of older assistant turns left out"
    ),
    "compact_20260112": _ignored(
        "automatic compaction is not run; send `compaction` to compact", {"type": "compact_20260112"}
    ),
}

RESPONSE_FIELDS: dict[str, Row] = {
    **{
        name: Row("produced", "always", "missive.messages.stream")
        for name in ("id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage")
    },
    "context_management": Row(
        "produced", "`applied_edits`, when the request had `context_management`", "missive.messages.extras"
    ),
    "diagnostics": Row(
        "produced", "`cache_miss_reason`, with `diagnostics.previous_message_id`", "missive.threads.keeper"
    ),
    "container": Row("absent", "no code execution containers"),
    "stop_details": Row("absent", "no model refuses for policy"),
    "input_transformations": Row(
        "absent", "dropped thinking is reported in the `missive-dropped-thinking` header"
    ),
}

USAGE_FIELDS: dict[str, Row] = {
    **{
        name: Row("produced", "always", "missive.messages.stream")
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        )
    },
    "server_tool_use": Row("produced", "when a server tool was called", "missive.messages.stream"),
    "iterations": Row(
        "produced", "a `fallback_message` entry when a fallback model answered", "missive.messages.extras"
    ),
    "cache_creation": Row("absent", "automatic prefix caching has no cache writes by TTL"),
    "output_tokens_details": Row("absent", "reasoning tokens are counted in `output_tokens`"),
    "service_tier": Row("absent", "one service tier"),
    "speed": Row("absent", "one speed"),
    "inference_geo": Row("absent", "inference runs where the server runs"),
    "fallback_credit": Row("absent", "no billing"),
}

_NOT_RUN = "a server tool Missive does not run"

RESPONSE_BLOCK_TYPES: dict[str, Row] = {
    "text": Row("produced", "answer text", "missive.messages.stream"),
    "thinking": Row("produced", "reasoning, signed", "missive.messages.stream"),
    "tool_use": Row("produced", "client tool calls", "missive.messages.stream"),
    "server_tool_use": Row("produced", "`web_search`/`web_fetch`/tool search calls", "missive.tools.server"),
    "tool_search_tool_result": Row(
        "produced",
        "the deferred tools found (regex or BM25) as `tool_reference`s, or the error",
        "missive.tools.tool_search",
    ),
    "web_search_tool_result": Row(
        "produced",
        "the results where `[server_tools]` runs searches, else the `unavailable` error",
        "missive.tools.server_runner",
    ),
    "web_fetch_tool_result": Row(
        "produced",
        "the page where `[server_tools]` runs fetches, else the `unavailable` error",
        "missive.tools.server_runner",
    ),
    "compaction": Row(
        "produced", "the answer of a compaction request", "missive.context_management.compaction"
    ),
    "mcp_tool_use": Row(
        "produced", "calls of an MCP server's tools, run by Missive", "missive.messages.stream.server_tools"
    ),
    "mcp_tool_result": Row("produced", "the MCP server's answer, `is_error` on failure", "missive.tools.mcp"),
    "redacted_thinking": Row("absent", "reasoning is never redacted"),
    "fallback": Row("absent", "no model starts answering and then declines"),
    **{
        name: Row("absent", _NOT_RUN)
        for name in (
            "advisor_tool_result",
            "code_execution_tool_result",
            "bash_code_execution_tool_result",
            "text_editor_code_execution_tool_result",
            "container_upload",
        )
    },
    "mcp_tool_listing": Row(
        "produced", "opens the answer when an MCP server was asked for its tools", "missive.tools.mcp"
    ),
}

MODEL_FIELDS: dict[str, Row] = {
    **{
        name: Row("produced", "always", "missive.server.routes.models")
        for name in ("id", "type", "display_name", "created_at")
    },
    "max_input_tokens": Row("produced", "the context window, when known", "missive.server.routes.models"),
    "max_tokens": Row(
        "produced", "`max_output_tokens`, else the context window", "missive.server.routes.models"
    ),
    "capabilities": Row(
        "produced", "every key, from the driver's capabilities and overrides", "missive.models.capabilities"
    ),
    "lifecycle": Row("produced", "`active` unless configured `deprecated`", "missive.models.capabilities"),
    "deprecated_at": Row("produced", "configured, else null", "missive.models.capabilities"),
    "retires_at": Row("produced", "configured, else null", "missive.models.capabilities"),
    "line": Row("produced", "null: no Claude model line", "missive.server.routes.models"),
    "allowed_fallback_models": Row("produced", "every other served model", "missive.server.routes.models"),
}

_TABLES: tuple[tuple[str, dict[str, Row]], ...] = (
    ("Request field", REQUEST_FIELDS),
    ("Content block type (request)", BLOCK_TYPES),
    ("`thinking.type`", THINKING_TYPES),
    ("`context_management` edit", EDIT_TYPES),
    ("Response field", RESPONSE_FIELDS),
    ("`usage` field", USAGE_FIELDS),
    ("Content block type (response)", RESPONSE_BLOCK_TYPES),
    ("`GET /v1/models` field", MODEL_FIELDS),
)


def _cell(row: Row) -> str:
    if row.kind in ("handled", "produced") and row.where:
        return f"{row.kind}: {row.what} (`{row.where}`)"
    if row.kind == "ignored":
        return f"ignored, reported in `missive-ignored`: {row.what}"
    return f"{row.kind}: {row.what}"


def markdown() -> str:
    """The tables of docs/api-compatibility.md's "SDK coverage" section."""
    parts = []
    for title, rows in _TABLES:
        lines = [f"| {title} | What Missive does |", "| --- | --- |"]
        lines += [f"| `{name}` | {_cell(row)} |" for name, row in sorted(rows.items())]
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
