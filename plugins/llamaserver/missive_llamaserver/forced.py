"""Forced tool calls (``tool_choice`` ``any`` / ``tool``) by a JSON-schema grammar.

llama-server does not enforce these choices itself:

* a named choice (``{"type": "function", "function": {"name": ...}}``) is
  read as a string, fails, and falls back to ``"auto"`` with a warning
  (``json_value(body, "tool_choice", std::string("auto"))`` in
  ``oaicompat_chat_params_parse``, ``tools/server/server-common.cpp``);
* ``"required"`` builds a grammar only when its template analyser recognises
  the model's tool-call syntax (``include_grammar`` in
  ``common/chat-auto-parser-generator.cpp``); for any other template (SmolLM2,
  many fine-tunes) the model answers in free text.

So Missive constrains the answer itself: the request carries the tools (the
chat template renders them as usual), ``tool_choice: "none"`` (llama-server
then neither parses calls nor refuses a grammar next to tools) and a
``json_schema`` that admits exactly one object
``{"name": "<tool>", "arguments": {...}}`` with the arguments valid against
that tool's ``input_schema`` (``any``: one such object for each offered tool,
in ``anyOf``). llama-server turns the schema into a GBNF grammar
(``common/json-schema-to-grammar.cpp``) and samples under it, so the answer is
one schema-valid call even from a 135M model. :class:`ForcedCall` reads the
answer back into tool-call events.

One call per answer: the API allows one or more under ``any`` without
``disable_parallel_tool_use``, and one is what the grammar admits.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from missive.api import (
    BadGatewayError,
    GenerationEvent,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolChoice,
    ToolDefinition,
)

__all__ = ["forced_call_schema", "ForcedCall"]


def _rebase_refs(schema: Any, prefix: str) -> Any:
    """A copy of ``schema`` whose local ``$ref`` pointers (``#/...``) point
    below ``prefix`` (the JSON pointer of where the schema is nested), since
    llama.cpp resolves every ``$ref`` from the root document
    (``resolve_ref`` in ``common/json-schema.cpp``)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#"):
                out[key] = prefix + value[1:]
            else:
                out[key] = _rebase_refs(value, prefix)
        return out
    if isinstance(schema, list):
        return [_rebase_refs(item, prefix) for item in schema]
    return schema


def _call_schema(tool: ToolDefinition, pointer: str) -> dict[str, Any]:
    arguments = _rebase_refs(copy.deepcopy(tool.input_schema), f"{pointer}/properties/arguments")
    arguments.pop("$schema", None)
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def forced_call_schema(tools: tuple[ToolDefinition, ...], choice: ToolChoice) -> dict[str, Any]:
    """The ``json_schema`` request field forcing one call.

    Args:
        tools: the offered tools (the core checked that a ``tool`` choice names one).
        choice: mode ``any`` (a call to any offered tool) or ``tool`` (to ``choice.name``).

    Returns:
        ``{"type": "object", "properties": {"name": {"const": NAME}, "arguments":
        INPUT_SCHEMA}, "required": [...], "additionalProperties": false}`` for
        one tool, ``{"anyOf": [...]}`` of those for several.

    Raises:
        ValueError: a mode other than ``any``/``tool``, or no matching tool.
    """
    if choice.mode == "tool":
        chosen = [t for t in tools if t.name == choice.name]
    elif choice.mode == "any":
        chosen = list(tools)
    else:
        raise ValueError(f"tool_choice {choice.mode!r} is not forced")
    if not chosen:
        raise ValueError("no tool to force")
    if len(chosen) == 1:
        return _call_schema(chosen[0], "#")
    return {"anyOf": [_call_schema(tool, f"#/anyOf/{i}") for i, tool in enumerate(chosen)]}


class ForcedCall:
    """Reads a grammar-forced answer (see the module doc) back as one tool call.

    Feed it the translator's events with :meth:`feed`: text deltas are
    buffered (the answer is the call's JSON, not text to show), anything else
    passes through. :meth:`finish` turns the buffered JSON into
    ``ToolCallStart`` + one ``ToolCallDelta`` (the arguments, serialized in the
    model's key order) + ``ToolCallEnd``.

    Args:
        names: the tool names the grammar admitted.
    """

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self._text: list[str] = []
        self._tokens = 0

    def feed(self, events: list[GenerationEvent]) -> list[GenerationEvent]:
        out: list[GenerationEvent] = []
        for event in events:
            if isinstance(event, TextDelta):
                self._text.append(event.text)
                self._tokens += event.tokens
            else:
                out.append(event)
        return out

    def finish(self, *, truncated: bool) -> list[GenerationEvent]:
        """The call, or nothing when ``truncated`` (``max_tokens`` cut the JSON:
        no complete call exists, and none is invented).

        Raises:
            BadGatewayError: a complete answer that is not one call to an
                admitted tool with an object of arguments (the server did not
                apply the grammar).
        """
        raw = "".join(self._text).strip()
        if raw.startswith("```"):  # the grammar also admits a ```json fence around the object
            raw = raw[3:].removeprefix("json").strip().removesuffix("```").strip()
        try:
            call = json.loads(raw)
        except ValueError:
            if truncated:
                return []
            raise BadGatewayError(
                f"llama-server ignored the forced tool call's grammar: the answer is not JSON: {raw[:200]!r}"
            ) from None
        if (
            not isinstance(call, dict)
            or call.get("name") not in self.names
            or not isinstance(call.get("arguments"), dict)
        ):
            raise BadGatewayError(
                f"llama-server ignored the forced tool call's grammar: {raw[:200]!r} is not a call to "
                f"{', '.join(sorted(self.names))}"
            )
        return [
            ToolCallStart(name=call["name"]),
            ToolCallDelta(json.dumps(call["arguments"], ensure_ascii=False), tokens=self._tokens),
            ToolCallEnd(),
        ]
