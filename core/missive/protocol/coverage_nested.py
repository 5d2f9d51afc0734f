"""What Missive does with every field of a request, at every depth.

:mod:`missive.protocol.coverage` has a row per top-level request field and
per block type; this module classifies every path below them that the SDK's
request types define (``messages[].content[image].transformations``,
``tools[web_fetch_20260318].url_sources``...), as
:mod:`missive.protocol.coverage_paths` spells them. A rule's key is a path
pattern:

* an exact path;
* ``X.**``: ``X`` and everything below it (a subtree sharing one fate, such
  as a server tool Missive does not run);
* ``**.X``: ``X`` at any depth (``**.cache_control.**``), and ``*``: one name
  inside a path part (``tools[bash_*].name``).

The most specific rule wins (the longest pattern, an exact path first). The
top-level tables also give rules (:func:`rules`): each row names its own
path, and an ``ignored`` or ``accepted`` top-level field, block type or edit
type gives its whole subtree the same fate. An ``ignored`` rule here carries
an example body and the ``missive-ignored`` entry it triggers.

Version 2026-10-21 of the API (the ``anthropic-version`` that SDK 2.x sends)
answers ``temperature``, ``top_p`` and ``top_k`` with a 400, and SDK 2.16
no longer defines them; Missive answers every ``anthropic-version`` alike and
still applies them for every version (:data:`LEGACY_FIELDS`).

``tests/test_api_coverage_nested.py`` walks the installed SDK and fails on a
path no rule covers, a rule that covers nothing, a missing handler module,
an ignored example not reported, and docs/api-compatibility.md not holding
:func:`markdown` (``python -m missive.protocol.coverage_nested``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from . import coverage as top
from .coverage import Kind

__all__ = ["Rule", "NESTED", "LEGACY_FIELDS", "rules", "classify", "markdown"]


@dataclass(frozen=True)
class Rule:
    """How a path (or subtree) is treated: ``kind`` and ``what`` as in
    :class:`missive.protocol.coverage.Row`; ``where`` the handler module;
    an ``ignored`` rule's ``example`` body fields and the entry they put in
    ``missive-ignored`` (``reports``)."""

    kind: Kind
    what: str
    where: str = ""
    example: dict[str, Any] | None = None
    reports: str = ""


def _h(where: str, what: str) -> Rule:
    return Rule("handled", what, where)


def _ok(what: str) -> Rule:
    return Rule("accepted", what)


def _ig(what: str, example: dict[str, Any] | None = None, reports: str = "") -> Rule:
    return Rule("ignored", what, example=example, reports=reports)


def _user(*blocks: Any) -> dict[str, Any]:
    """A body whose one user message holds ``blocks`` then a text block."""
    return {"messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": "hi"}]}]}


_CONV = "missive.messages.conversation"
_HIST = "missive.tools.history"
_DEF = "missive.tools.definitions"
_SRV = "missive.tools.server"
_CHANGES = "missive.tools.changes"
_MCP = "missive.tools.mcp"
#: A tool definition added by a ``tool_addition`` block: its fields are those of ``tools``.
_ADDED_DEFINITION = "messages[].content[tool_addition].tool[tool_definition].definition"
_MEDIA = "missive.media.pipeline"
#: A tool call made by code execution (programmatic tool calling), not the model.
_PROGRAMMATIC = {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}
_NOT_OFFERED = 'not offered: reported as `tools.N (tool type "...": not available on this server)`'
_TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}
_TOOLS = [{"name": "t", "input_schema": {"type": "object"}}]
_TURNS = [{"role": "user", "content": "hi"}]

NESTED: dict[str, Rule] = {
    # Everywhere.
    "**.cache_control.**": _ok("prompt prefixes are reused automatically"),
    "**.content[text]": _h(_CONV, "rendered"),
    "**.content[text].text": _h(_CONV, "rendered"),
    "**.content[text].type": _h(_CONV, "the block type"),
    "**.content[text].citations.**": _ok(
        "citations of an earlier answer: the text is what the model reads "
        "(API 2026-10-21 refuses them in user messages)"
    ),
    "**.caller.**": _ig(
        "a tool call's caller other than `direct` (accepted: every call is the model's own)",
        {
            "messages": [
                *_TURNS,
                {"role": "assistant", "content": [{**_TOOL_USE, "caller": _PROGRAMMATIC}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
            ],
            "tools": _TOOLS,
        },
        "messages.1.content.0.caller",
    ),
    # System prompt.
    "system[text]": _h(_CONV, "joined into the system prompt"),
    "system[text].text": _h(_CONV, "the system prompt"),
    "system[text].type": _h(_CONV, "the block type"),
    "system[text].citations.**": _ok("citations of an earlier answer: the text is what the model reads"),
    # Messages.
    "messages[].role": _h(_CONV, "user and assistant turns; `system` messages join the system prompt"),
    "messages[].content": _h(_CONV, "a string or blocks"),
    "messages[].clear_at": _ig(
        "system messages are rendered on every request",
        {"messages": [{"role": "system", "content": "be brief", "clear_at": "never"}, *_TURNS]},
        "messages.0.clear_at",
    ),
    "messages[].output_config.**": _ig(
        "per-turn output settings: `output_config` applies to the whole request",
        {
            "messages": [
                {"role": "system", "content": "be brief", "output_config": {"effort": "low"}},
                *_TURNS,
            ]
        },
        "messages.0.output_config",
    ),
    "**.content[image]": _h(_MEDIA, "checked, fetched, fitted ([media.md](media.md))"),
    "**.content[image].type": _h(_MEDIA, "the block type"),
    "**.content[image].source.**": _h(
        _MEDIA, "base64 and URL sources checked, fetched, fitted; files refused"
    ),
    "**.content[image].transformations": _h(_MEDIA, "how an oversized image is treated"),
    "**.content[image].transformations.oversized_image": _h(
        _MEDIA, "`downsize` (the default) fits it; `error` refuses an image over the model's size with a 400"
    ),
    "**.content[document]": _h(_MEDIA, "turned into text ([media.md](media.md))"),
    "**.content[document].type": _h(_MEDIA, "the block type"),
    "**.content[document].source.**": _h(_MEDIA, "turned into text; files refused"),
    "**.content[document].title": _h(_MEDIA, "rendered with the text"),
    "**.content[document].context": _h(_MEDIA, "rendered with the text"),
    "**.content[document].citations.**": _ig(
        "no citations are produced (reported when `enabled`)",
        _user(
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "abc"},
                "citations": {"enabled": True},
            }
        ),
        "messages.0.content.0.citations",
    ),
    "**.content[search_result]": _h("missive.driver.conversation", "rendered as text"),
    "**.content[search_result].type": _h("missive.driver.conversation", "the block type"),
    "**.content[search_result].source": _h("missive.driver.conversation", "rendered as a link"),
    "**.content[search_result].title": _h("missive.driver.conversation", "rendered as a link"),
    "**.content[search_result].content": _h("missive.driver.conversation", "its text blocks rendered"),
    "**.content[search_result].citations.**": _ig(
        "no citations are produced (reported when `enabled`)",
        _user(
            {
                "type": "search_result",
                "source": "s",
                "title": "t",
                "content": [{"type": "text", "text": "x"}],
                "citations": {"enabled": True},
            }
        ),
        "messages.0.content.0.citations",
    ),
    "messages[].content[thinking].**": _h(
        "missive.thinking.replay", "kept when its signature is this server's"
    ),
    "messages[].content[tool_use].type": _h(_HIST, "the block type"),
    "messages[].content[tool_use].id": _h(_HIST, "paired with its result"),
    "messages[].content[tool_use].name": _h(_HIST, "rendered"),
    "messages[].content[tool_use].input": _h(_HIST, "rendered"),
    "**.toolset_name": _ig(
        "the call's toolset is not used: the tool is called by its name",
        {
            "messages": [
                *_TURNS,
                {"role": "assistant", "content": [{**_TOOL_USE, "toolset_name": "x"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
            ],
            "tools": _TOOLS,
        },
        "messages.1.content.0.toolset_name",
    ),
    "messages[].content[tool_result].type": _h(_HIST, "the block type"),
    "messages[].content[tool_result].tool_use_id": _h(_HIST, "paired with its call"),
    "messages[].content[tool_result].is_error": _h("missive.tools.render", "rendered as an error"),
    "messages[].content[tool_result].content": _h("missive.tools.render", "a string or blocks, rendered"),
    "messages[].content[tool_result].content[tool_reference].**": _h(
        "missive.tools.deferred", "loads the deferred tool it names"
    ),
    "messages[].content[tool_result].content[browser_state].**": _ig(
        "browser tools are not run: reported as `(block type \"browser_state\")`",
    ),
    "messages[].content[server_tool_use].**": _h(
        _SRV, "`web_search`/`web_fetch` calls rendered; others ignored"
    ),
    "messages[].content[web_search_tool_result].**": _h(
        _SRV, "rendered with its call: each result's title, URL and content, or the error code"
    ),
    "messages[].content[web_fetch_tool_result].**": _h(
        _SRV, "rendered with its call: the URL, title and text source, or the error code"
    ),
    "messages[].content[compaction].**": _h(
        "missive.context_management.compaction", "verified and rendered as the summary"
    ),
    "messages[].content[compaction].tool_changes.**": _ig("inline tool changes are not applied"),
    # Request options.
    "thinking[*].type": _h("missive.driver.thinking", "the thinking type"),
    "thinking[enabled].budget_tokens": _h("missive.driver.thinking", "the reasoning budget"),
    "**.thinking[*].display": _h(
        "missive.driver.thinking", '`summarized` or `omitted`; `"updates"` is reported as ignored'
    ),
    "**.thinking[*].block_binding.**": _ig(
        "a thinking block failing its check is left out, named in `missive-dropped-thinking`",
        {"thinking": {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "error"}}},
        "thinking.block_binding",
    ),
    "output_config.effort": _h(
        "missive.driver.thinking", "the reasoning depth; without reasoning, reported in `missive-ignored`"
    ),
    "output_config.format.**": _h("missive.messages.capabilities", "needs `structured_output`"),
    "**.output_config.task_budget.**": _ig(
        "no task budgets: `max_tokens` bounds the answer",
        {"output_config": {"task_budget": {"type": "tokens", "total": 1000}}},
        "output_config.task_budget",
    ),
    "context_management.**": _h("missive.context_management.editing", "every option of the edits applied"),
    "compaction.**": _h("missive.context_management.compaction", "`instructions` replace the default prompt"),
    "diagnostics.**": _h("missive.threads.fingerprint", "`previous_message_id` compared"),
    "thread.**": _h("missive.threads.thread", "`create` and `continue`"),
    "tool_choice.**": _h(_DEF, "every type; `disable_parallel_tool_use` enforced"),
    "fallbacks[].model": _h("missive.routing.chain", "a served model"),
    "fallbacks[].max_tokens": _h("missive.routing.chain", "overrides the request's"),
    "fallbacks[].speed": _h("missive.routing.chain", "overrides the request's"),
    "fallbacks[].thinking": _h("missive.routing.chain", "overrides the request's, where the model takes it"),
    "fallbacks[].thinking[*]": _h("missive.routing.chain", "as `thinking`"),
    "fallbacks[].thinking[*].type": _h("missive.routing.chain", "as `thinking.type`"),
    "fallbacks[].thinking[enabled].budget_tokens": _h("missive.routing.chain", "as `thinking`"),
    "fallbacks[].output_config": _h("missive.routing.chain", "merged into the request's, key by key"),
    "fallbacks[].output_config.effort": _h("missive.routing.chain", "as `output_config.effort`"),
    "fallbacks[].output_config.format.**": _h("missive.routing.chain", "as `output_config.format`"),
    # Tools.
    # Mid-conversation tool changes (missive.tools.changes); a definition's
    # own fields are classified as the same fields of `tools` (classify).
    "messages[].content[tool_*].type": _h(_CHANGES, "the change applied where the block stands"),
    "messages[].content[tool_*].tool": _h(_CHANGES, "the tool added or withdrawn"),
    "messages[].content[tool_addition].tool[tool_reference].**": _h(
        _CHANGES, "a tool of `tools` (deferred, or added earlier) offered from here; unknown: 400"
    ),
    "messages[].content[tool_removal].tool[tool_reference].**": _h(
        _CHANGES, "withdrawn from here; a tool not available there: 400"
    ),
    "messages[].content[tool_addition].tool[tool_definition]": _h(
        _CHANGES, "checked as a `tools` entry, offered from here"
    ),
    "messages[].content[tool_addition].tool[tool_definition].type": _h(_CHANGES, "a definition follows"),
    "messages[].content[tool_addition].tool[tool_definition].definition": _h(
        _CHANGES, "its fields as the same fields of `tools`"
    ),
    "messages[].content[tool_*].tool[mcp_*].**": _h(
        _CHANGES, "refused with a 400 naming the block: no MCP server is connected to add from"
    ),
    "messages[].content[tool_search_tool_result].**": _h(
        "missive.tools.deferred", "the referenced tools loaded again; an unknown one: 400"
    ),
    # The MCP connector (missive.tools.mcp), where `[server_tools] mcp` is on.
    "mcp_servers[url]": _h(_MCP, "a streamable HTTP server, if the key's `mcp_servers` globs allow its URL"),
    "mcp_servers[url].type": _h(_MCP, "`url`: streamable HTTP"),
    "mcp_servers[url].url": _h(_MCP, "checked by `web_fetch`'s address rules, then connected to"),
    "mcp_servers[url].name": _h(_MCP, "the `server_name` of its tools' calls"),
    "mcp_servers[url].authorization_token": _h("missive.tools.mcp_client", "sent as a Bearer token"),
    "mcp_servers[url].tool_configuration.**": _h(
        _MCP, "`enabled` and `allowed_tools` choose the tools offered"
    ),
    "tools[mcp_toolset]": _h(_MCP, "configures the tools of the server it names"),
    "tools[mcp_toolset].type": _h(_MCP, "the toolset"),
    "tools[mcp_toolset].mcp_server_name": _h(_MCP, "the server in `mcp_servers`"),
    "tools[mcp_toolset].default_config.enabled": _h(_MCP, "the server's tools offered unless false"),
    "tools[mcp_toolset].configs{}.enabled": _h(_MCP, "that tool offered unless false"),
    "tools[mcp_toolset].default_config.defer_loading": _h(
        _MCP, "the server's tools deferred: offered once a tool search or `tool_reference` loads them"
    ),
    "tools[mcp_toolset].configs{}.defer_loading": _h(
        _MCP, "that tool deferred: offered once a tool search or `tool_reference` loads it"
    ),
    "tools[mcp_toolset].configs": _h(_MCP, "per-tool settings by tool name"),
    "tools[mcp_toolset].default_config": _h(_MCP, "settings of every tool of the server"),
    "tools[mcp_toolset].tools.**": _h(_MCP, "the server's listing, used instead of asking the server"),
    "tools[mcp_toolset].cache_control.**": _ok("prompt prefixes are reused automatically"),
    "messages[].content[mcp_tool_use].**": _h("missive.tools.mcp_history", "rendered as the tool's call"),
    "messages[].content[mcp_tool_result].**": _h(
        "missive.tools.mcp_history", "rendered as the call's result"
    ),
    "messages[].content[mcp_tool_listing].**": _h(
        _MCP, "the server's listing for this request, not rendered"
    ),
    "tools[custom]": _h(_DEF, "offered as it is"),
    "tools[bash_*]": _h(_DEF, "offered with the schema the API documents"),
    "tools[text_editor_*]": _h(_DEF, "offered with the schema the API documents"),
    "tools[web_*]": _h(_SRV, "offered; calls run where `[server_tools]` runs them, else `unavailable`"),
    "tools[tool_search_tool_*]": _h(
        "missive.tools.tool_search", "offered; calls search the deferred tools (regex or BM25)"
    ),
    "tools[*].type": _h(
        _DEF, "custom tools, `bash_*`, `text_editor_*`, `web_search_*`, `web_fetch_*` offered"
    ),
    "tools[*].name": _h(_DEF, "the name the model calls"),
    "tools[custom].description": _h(_DEF, "offered"),
    "tools[custom].input_schema.**": _h(_DEF, "validated, offered byte for byte"),
    "tools[*].defer_loading": _h("missive.tools.deferred", "offered once a `tool_reference` loads it"),
    "tools[*].strict": _h(_DEF, "enforced where the driver declares it, else a 400"),
    "tools[*].allowed_callers": _ig(
        "callers other than `direct` (`[\"direct\"]` is accepted: every call is the model's own)",
        {"tools": [{**_TOOLS[0], "allowed_callers": ["direct", "code_execution_20250825"]}]},
        "tools.0.allowed_callers",
    ),
    "tools[*].input_examples": _ig(
        "examples are not rendered",
        {"tools": [{**_TOOLS[0], "input_examples": [{}]}]},
        "tools.0.input_examples",
    ),
    "tools[custom].eager_input_streaming": _ig(
        "tool input is streamed as it is parsed",
        {"tools": [{**_TOOLS[0], "eager_input_streaming": True}]},
        "tools.0.eager_input_streaming",
    ),
    "tools[text_editor_*].max_characters": _ig("the client truncates its own `view` results"),
    "tools[web_*].max_uses": _h(_SRV, "calls beyond it answered `max_uses_exceeded`"),
    "tools[web_*].allowed_domains": _h("missive.tools.server_runner", "results and fetches filtered"),
    "tools[web_*].blocked_domains": _h("missive.tools.server_runner", "results and fetches filtered"),
    "tools[web_search_*].user_location.**": _h("missive.tools.search", "passed to the search provider"),
    "tools[web_fetch_*].max_content_tokens": _h("missive.tools.web_fetch", "the page text cut"),
    "tools[web_fetch_*].citations.**": _h("missive.tools.web_fetch", "set on the fetched document"),
    "tools[web_*].response_inclusion": _ig(
        "results are always included in the response",
        {"tools": [{"name": "web_search", "type": "web_search_20260318", "response_inclusion": "full"}]},
        "tools.0.response_inclusion",
    ),
    "tools[web_fetch_*].url_sources.**": _ig(
        "any URL of the conversation may be fetched, within the domain lists",
        {
            "tools": [
                {
                    "name": "web_fetch",
                    "type": "web_fetch_20260318",
                    "url_sources": {"user_input": {"type": "all"}},
                }
            ]
        },
        "tools.0.url_sources",
    ),
    "tools[web_fetch_*].use_cache": _ig("pages are always fetched"),
    **{
        f"tools[{kind}].**": _ig(_NOT_OFFERED)
        for kind in (
            "advisor_*",
            "browser_toolset_*",
            "code_execution_*",
            "computer_*",
            "computer_toolset_*",
            "memory_*",
        )
    },
}

#: Fields Missive applies that SDK 2.16 no longer defines (API 2026-10-21 refuses them).
LEGACY_FIELDS: dict[str, Rule] = {
    name: _h("missive.sampling", "applied for every `anthropic-version` (API 2026-10-21 answers 400)")
    for name in ("temperature", "top_p", "top_k")
}


def _from_row(row: top.Row) -> Rule:
    return Rule(row.kind, row.what, row.where)


def rules() -> dict[str, Rule]:
    """:data:`NESTED` with the rules the top-level tables give (module doc)."""
    found: dict[str, Rule] = {}
    for prefix, table in (
        ("{}", top.REQUEST_FIELDS),
        ("messages[].content[{}]", top.BLOCK_TYPES),
        ("thinking[{}]", top.THINKING_TYPES),
        ("context_management.edits[{}]", top.EDIT_TYPES),
    ):
        for name, row in table.items():
            path = prefix.format(name)
            found[path] = _from_row(row)
            if row.kind in ("ignored", "accepted"):
                found[f"{path}.**"] = _from_row(row)
    return {**found, **NESTED}


@cache
def _pattern(key: str) -> re.Pattern[str]:
    text = re.escape(key)
    text = text.replace(r"\*\*\.", r"(?:.*\.)?", 1) if key.startswith("**.") else text
    text = re.sub(r"\\\.\\\*\\\*$", r"(?:[.\\[].*)?", text)
    return re.compile(text.replace(r"\*", r"[^.\]]*"))


def _specificity(key: str) -> tuple[int, int]:
    return ("*" not in key, len(key.replace("*", "")))


def classify(path: str, table: dict[str, Rule] | None = None) -> tuple[str, Rule] | None:
    """The most specific rule covering ``path`` (its key and the rule), else None."""
    table = rules() if table is None else table
    if path.startswith(_ADDED_DEFINITION + "[") or path.startswith(_ADDED_DEFINITION + "."):
        path = "tools" + path[len(_ADDED_DEFINITION) :]
    matches = [key for key in table if _pattern(key).fullmatch(path)]
    if not matches:
        return None
    key = max(matches, key=_specificity)
    return key, table[key]


def _cell(rule: Rule) -> str:
    return top._cell(top.Row(rule.kind, rule.what, rule.where))


def markdown(paths: list[str] | None = None) -> str:
    """The table of docs/api-compatibility.md's "SDK coverage at every depth"
    section: each rule of :data:`NESTED` (a top-level row's subtree is in the
    tables above), and :data:`LEGACY_FIELDS`."""
    lines = ["| Path (rule) | What Missive does |", "| --- | --- |"]
    lines += [f"| `{key}` | {_cell(rule)} |" for key, rule in sorted(NESTED.items())]
    lines += ["", "| Not in SDK 2.16 | What Missive does |", "| --- | --- |"]
    lines += [f"| `{key}` | {_cell(rule)} |" for key, rule in sorted(LEGACY_FIELDS.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
