"""GBNF grammars that make llama.cpp honour ``tool_choice`` and structured output exactly.

With ``tool_choice`` ``any`` or ``tool``, sampling is constrained so the reply
*is* one call (or, when parallel calls are allowed, several) in the model's
tool-call syntax, each call to an offered tool with arguments valid against
that tool's ``input_schema``. Even a 135M model then returns a schema-valid
call. Grammar text comes from llama-cpp-python's own JSON-Schema converter
(``llama_cpp.llama_grammar.SchemaConverter``, a port of llama.cpp's
``json_schema_to_grammar``); the call syntax (literal text around the
arguments object) comes from the tool parser's ``call_syntax``.

Parallel calls are capped at :data:`MAX_PARALLEL_CALLS` so a small model cannot
loop on calls until ``max_tokens``.
"""

from __future__ import annotations

import copy
from typing import Any

from llama_cpp.llama_grammar import SchemaConverter

from missive.tools.definitions import ToolChoice, ToolDefinition
from missive.tools.parsers.base import ToolParser

__all__ = ["tool_call_grammar", "json_schema_grammar", "MAX_PARALLEL_CALLS"]

MAX_PARALLEL_CALLS = 8


#: llama-cpp-python's converter lets JSON strings hold raw control characters
#: (``char ::= [^"\\]``), which JSON forbids (RFC 8259 section 7): a sampled
#: newline inside a string made the call unparseable. llama.cpp's own converter
#: excludes them; so does this one.
_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


def _strict_json(grammar: str) -> str:
    return grammar.replace(_LOOSE_CHAR, _JSON_CHAR)


def _converter() -> SchemaConverter:
    return SchemaConverter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments are always a JSON object (the API's ``input`` is an object)."""
    schema = copy.deepcopy(schema)
    schema.pop("$schema", None)
    if "type" not in schema and not any(k in schema for k in ("oneOf", "anyOf", "allOf", "$ref")):
        schema["type"] = "object"
    return schema


def tool_call_grammar(parser: type[ToolParser], tools: tuple[ToolDefinition, ...], choice: ToolChoice) -> str:
    """GBNF for a reply made only of calls (``choice.mode`` ``any`` or ``tool``).

    Args:
        parser: the parser class whose ``call_syntax`` writes a call.
        tools: the offered tools; with mode ``tool`` only ``choice.name`` is allowed.
        choice: mode, name and whether several calls are allowed.
    """
    allowed = [t for t in tools if choice.mode != "tool" or t.name == choice.name]
    converter = _converter()
    alternatives = []
    for i, tool in enumerate(allowed):
        schema = converter.resolve_refs(_object_schema(tool.input_schema), f"tool{i}")
        args_rule = converter.visit(schema, f"tool{i}-args")
        prefix, suffix = parser.call_syntax(tool.name)
        body = f"{converter._format_literal(prefix)} {args_rule} {converter._format_literal(suffix)}"
        alternatives.append(converter._add_rule(f"tool{i}-call", body))
    call = converter._add_rule("call", " | ".join(alternatives))
    if choice.parallel:
        separator = converter._format_literal(parser.call_separator)
        converter._rules["root"] = f"{call} ({separator} {call}){{0,{MAX_PARALLEL_CALLS - 1}}}"
    else:
        converter._rules["root"] = call
    return _strict_json(converter.format_grammar())


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF for a reply that is one JSON value valid against ``schema``
    (``output_config.format``)."""
    converter = _converter()
    resolved = converter.resolve_refs(copy.deepcopy(schema), "output")
    resolved.pop("$schema", None)
    converter.visit(resolved, "")
    return _strict_json(converter.format_grammar())


def warm_up(llm: Any) -> None:
    """Prepare llama.cpp's grammar machinery for this model's vocabulary.

    Measured with llama-cpp-python 0.3.36 on SmolLM2 (49k tokens, 2 cores):
    the first grammar-constrained token of a process took 12-20 s, every later
    one ~30 ms. Applying a trivial grammar sampler once to a synthetic
    candidate list (all token ids) costs ~60 ms and removes that first-token
    delay, without touching the context (so it needs no generation slot).
    """
    import ctypes

    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, b'root ::= "a"', b"root")
    try:
        n_vocab = llm.n_vocab()
        data = (llama_cpp.llama_token_data * n_vocab)()
        for token in range(n_vocab):
            data[token].id = token
        candidates = llama_cpp.llama_token_data_array(data=data, size=n_vocab, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(candidates))
    finally:
        llama_cpp.llama_sampler_free(sampler)
