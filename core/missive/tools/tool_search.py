"""Tool search: the ``tool_search_tool_regex_*`` and ``tool_search_tool_bm25_*`` server tools.

The API's rules (Anthropic docs, "Tool search tool"; the SDK's
``ToolSearchToolRegex20251119Param``, ``ToolSearchToolBm25_20251119Param``,
``ToolSearchToolResultBlock``, ``ToolSearchToolResultErrorCode``):

* the client marks tools ``defer_loading: true`` and offers a tool search
  tool; the model calls it with ``{"query": ...}``: a Python regular
  expression (``re.search`` syntax, at most 200 characters) for the regex
  variant, natural language for the BM25 one;
* the server searches the deferred tools' "names, descriptions, argument
  names, and argument descriptions" and answers, in the same message::

    {"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_...",
     "content": {"type": "tool_search_tool_search_result",
                 "tool_references": [{"type": "tool_reference", "tool_name": "get_weather"}]}}

  with the 3 to 5 most relevant tools (:data:`MAX_RESULTS`), which are then
  loaded: offered and callable like the client-side ``tool_reference``
  blocks of :mod:`missive.tools.deferred`;
* a search that cannot run answers ``{"type":
  "tool_search_tool_result_error", "error_code": ..., "error_message":
  ...}`` with the SDK's codes: ``invalid_tool_input`` (no query, a pattern
  that does not compile or is longer than 200 characters),
  ``execution_time_exceeded`` (a pattern still running after
  :data:`REGEX_TIMEOUT`).

Regex: the pattern is checked with Python's :mod:`re` (the syntax the API
names) and run with the ``regex`` package, whose ``timeout`` stops a
catastrophic pattern (``(a+)+$``), which :mod:`re` cannot interrupt
(https://github.com/mrabarnett/mrab-regex, "Timeout"). A tool matches when
the pattern is found in one of its fields; the first matches in the order of
``tools`` are returned.

BM25: Okapi BM25 over each deferred tool's fields as one document (Robertson
and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
2009, eq. 3.15; ``k1 = 1.2``, ``b = 0.75`` and the non-negative IDF
``ln(1 + (N - n + 0.5) / (n + 0.5))`` of Lucene's ``BM25Similarity``). Terms
are lowercased runs of letters and digits, with ``snake_case`` and
``camelCase`` split, less the English stop words of Lucene's
``EnglishAnalyzer`` (``the``, ``of``...: a query's "the" must not find a
tool). The tools with a positive score, best first (ties in
the order of ``tools``). A library was not worth its weight here: the
candidates (``rank-bm25``, ``bm25s``) need NumPy for a few hundred short
documents.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import anyio
import regex

from ..driver.tools import ServerTool
from ..protocol.schema.blocks import (
    ToolReferenceBlock,
    ToolSearchToolResultBlock,
    ToolSearchToolResultError,
)
from ..protocol.schema.request import CountTokensRequest, Tool

__all__ = [
    "TOOL_SEARCH_TOOLS",
    "MAX_PATTERN_CHARS",
    "MAX_RESULTS",
    "REGEX_TIMEOUT",
    "ToolSearchError",
    "searchable_fields",
    "regex_search",
    "bm25_search",
    "run_tool_search",
    "result_content",
]

#: Longest regex pattern (Anthropic docs, "Tool search tool": "Maximum 200 characters").
MAX_PATTERN_CHARS = 200

#: Tools a search returns at most (Anthropic docs: "returns 3-5 most relevant tools").
MAX_RESULTS = 5

#: Seconds a regex search may run over all the deferred tools (Missive's
#: choice: a real pattern over thousands of tools takes milliseconds).
REGEX_TIMEOUT = 0.5

_QUERY_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What to search for."}},
    "required": ["query"],
}

#: Tool ``type`` prefix -> the tool (the names are fixed by the SDK's params).
TOOL_SEARCH_TOOLS: dict[str, ServerTool] = {
    "tool_search_tool_regex": ServerTool(
        name="tool_search_tool_regex",
        description=(
            "Search the tools not shown yet with a Python regular expression (re.search syntax, at most "
            "200 characters; (?i) for any case), matched against their names, descriptions and "
            "argument names and descriptions. The tools found become available to call."
        ),
        input_schema=_QUERY_SCHEMA,
        result_type="tool_search_tool_result",
        error_type="tool_search_tool_result_error",
    ),
    "tool_search_tool_bm25": ServerTool(
        name="tool_search_tool_bm25",
        description=(
            "Search the tools not shown yet with a natural-language query, matched against their "
            "names, descriptions and arguments. The tools found become available to call."
        ),
        input_schema=_QUERY_SCHEMA,
        result_type="tool_search_tool_result",
        error_type="tool_search_tool_result_error",
    ),
}


class ToolSearchError(Exception):
    """A search that cannot run: ``code`` is the API's ``error_code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _schema_fields(schema: Any) -> Iterator[str]:
    """Argument names and descriptions of a JSON Schema, nested ones included."""
    if isinstance(schema, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            for name, sub in properties.items():
                yield str(name)
                if isinstance(sub, dict) and isinstance(sub.get("description"), str):
                    yield sub["description"]
                yield from _schema_fields(sub)
        for key in ("items", "anyOf", "oneOf", "allOf"):
            value = schema.get(key)
            for sub in value if isinstance(value, list) else [value]:
                yield from _schema_fields(sub)


def searchable_fields(tool: Tool) -> list[str]:
    """What a search reads of ``tool``: its name, description, argument
    names and argument descriptions (Anthropic docs, "Tool search tool")."""
    fields = [tool.name]
    if tool.description:
        fields.append(tool.description)
    return fields + list(_schema_fields(tool.input_schema or {}))


def _deferred(request: CountTokensRequest) -> list[Tool]:
    return [tool for tool in request.tools or [] if tool.defer_loading is True]


def regex_search(pattern: str, tools: Iterable[Tool], timeout: float = REGEX_TIMEOUT) -> list[str]:
    """Names of the first :data:`MAX_RESULTS` tools with a field ``pattern`` is found in.

    Raises:
        ToolSearchError: ``invalid_tool_input`` for a pattern too long or
            not valid in Python's syntax; ``execution_time_exceeded`` past
            ``timeout`` seconds.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolSearchError(
            "invalid_tool_input", f"the pattern is longer than {MAX_PATTERN_CHARS} characters"
        )
    try:
        re.compile(pattern)
        compiled = regex.compile(pattern)
    except (re.error, regex.error, OverflowError, ValueError, RecursionError) as exc:
        # Compiling also raises OverflowError (``a{99999999999}``: "the
        # repetition number is too large"), ValueError (``(?u)(?a)``: "ASCII
        # and UNICODE flags are incompatible") and, for deep nesting,
        # RecursionError: each is a pattern the model got wrong.
        raise ToolSearchError("invalid_tool_input", f"invalid regular expression: {exc}") from None
    deadline = time.monotonic() + timeout
    found: list[str] = []
    for tool in tools:
        for text in searchable_fields(tool):
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                matched = compiled.search(text, timeout=left) is not None
            except TimeoutError:
                raise ToolSearchError(
                    "execution_time_exceeded", f"the pattern ran longer than {timeout} s"
                ) from None
            if matched:
                found.append(tool.name)
                break
        if len(found) == MAX_RESULTS:
            break
    return found


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_TERM = re.compile(r"[a-z0-9]+")

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``.
_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)


def _terms(text: str) -> list[str]:
    return [t for t in _TERM.findall(_CAMEL.sub(" ", text).lower()) if t not in _STOP_WORDS]


def bm25_search(query: str, tools: Iterable[Tool], k1: float = 1.2, b: float = 0.75) -> list[str]:
    """Names of the :data:`MAX_RESULTS` best tools for ``query`` by Okapi BM25 (module doc)."""
    candidates = list(tools)
    documents = [Counter(_terms(" ".join(searchable_fields(tool)))) for tool in candidates]
    if not documents:
        return []
    lengths = [sum(d.values()) for d in documents]
    average = sum(lengths) / len(documents) or 1.0
    scores = [0.0] * len(documents)
    for term in set(_terms(query)):
        having = sum(1 for d in documents if term in d)
        if not having:
            continue
        idf = math.log(1 + (len(documents) - having + 0.5) / (having + 0.5))
        for i, document in enumerate(documents):
            tf = document.get(term, 0)
            if tf:
                scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / average))
    ranked = sorted((i for i in range(len(documents)) if scores[i] > 0), key=lambda i: (-scores[i], i))
    return [candidates[i].name for i in ranked[:MAX_RESULTS]]


async def run_tool_search(tool: ServerTool, call_input: dict[str, Any], request: CountTokensRequest) -> Any:
    """The ``content`` of the result of one call of ``tool`` (module doc):
    the search result with its ``tool_reference`` blocks, or an error object.
    The search runs in a worker thread (a catalogue of thousands of tools,
    a pattern running until its timeout)."""
    query = call_input.get("query")
    try:
        if not isinstance(query, str) or not query.strip():
            raise ToolSearchError("invalid_tool_input", "`query` must be a non-empty string")
        deferred = _deferred(request)
        if tool.name == "tool_search_tool_regex":
            names = await anyio.to_thread.run_sync(regex_search, query, deferred)
        else:
            names = await anyio.to_thread.run_sync(bm25_search, query, deferred)
    except ToolSearchError as exc:
        return {"type": tool.error_type, "error_code": exc.code, "error_message": exc.message}
    return {
        "type": "tool_search_tool_search_result",
        "tool_references": [{"type": "tool_reference", "tool_name": name} for name in names],
    }


def result_content(block: ToolSearchToolResultBlock) -> tuple[str | list[Any], bool]:
    """What the model reads for a tool search result, and whether it is an
    error: the ``tool_reference`` blocks (rendered as the tools' definitions
    by :func:`missive.tools.deferred.expand_references`), a line when
    nothing was found, or the error with its message."""
    content = block.content
    if isinstance(content, ToolSearchToolResultError):
        text = f"the tool search returned an error: {content.error_code}"
        return (f"{text} ({content.error_message})" if content.error_message else text), True
    references: list[ToolReferenceBlock] = list(content.tool_references)
    return (references if references else "No tools matched the search."), False
