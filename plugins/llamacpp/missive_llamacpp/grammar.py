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
import functools
import json
import re
from typing import Any

from llama_cpp.llama_grammar import SchemaConverter

from missive.api import RawValueLanguage, ToolChoice, ToolDefinition, ToolParser, allows_string

from .enforced import unenforced
from .grammar_size import MAX_NESTING, MAX_REPEAT, install, nesting, pattern_size
from .pattern_json import json_safe

install()  # bounded repetitions as x{m,n}, not nested groups (grammar_size's docstring)

__all__ = [
    "tool_call_grammar",
    "json_schema_grammar",
    "output_relaxations",
    "relax",
    "UnenforcedSchema",
    "MAX_PARALLEL_CALLS",
]

MAX_PARALLEL_CALLS = 8


#: llama-cpp-python's converter lets JSON strings hold raw control characters
#: (``char ::= [^"\\]``), which JSON forbids (RFC 8259 section 7): a sampled
#: newline inside a string made the call unparseable. llama.cpp's own converter
#: excludes them; so does this one.
_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


#: llama-cpp-python's port writes the rest of an object after an optional
#: property as ``X-rest ::= X-additional-kvs`` when only additional
#: properties follow: no comma, and not optional, so ``{"a": 1"k": 2}`` is
#: admitted and ``{"a": 1}`` is not (measured; llama.cpp's own
#: ``json_schema_to_grammar`` writes ``( "," space X-additional-kv )*``,
#: which this restores).
_ADDITIONAL_REST = re.compile(r"^(\S+-rest) ::= (\S*additional-kv)s$", re.MULTILINE)


def _strict_json(grammar: str) -> str:
    grammar = _ADDITIONAL_REST.sub(r'\1 ::= ( "," space \2 )*', grammar)
    return grammar.replace(_LOOSE_CHAR, _JSON_CHAR)


class _Converter(SchemaConverter):  # type: ignore[misc]
    """llama-cpp-python's converter with literals escaped as llama.cpp's own
    ``json-schema-to-grammar.cpp`` escapes them (``GRAMMAR_LITERAL_ESCAPES``:
    the backslash too). The port left a backslash as it was, so the JSON of
    ``const: "say \\"hi\\""`` (or a property name with a quote) ended the
    grammar's literal early, a grammar llama.cpp refuses, and a ``\\t`` in
    a constant became a raw tab, which is not JSON. Constants are written as
    UTF-8 (``ensure_ascii=False``): ``\\ud83c\\udf89`` for an emoji would
    be read by llama.cpp as two lone surrogates."""

    _ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}

    def _format_literal(self, literal: str) -> str:
        return '"' + "".join(self._ESCAPES.get(ch, ch) for ch in literal) + '"'

    def _generate_constant_rule(self, value: Any) -> str:
        return self._format_literal(json.dumps(value, ensure_ascii=False))


def _converter() -> SchemaConverter:
    return _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments are always a JSON object (the API's ``input`` is an object)."""
    schema = copy.deepcopy(schema)
    schema.pop("$schema", None)
    if "type" not in schema and not any(k in schema for k in ("oneOf", "anyOf", "allOf", "$ref")):
        schema["type"] = "object"
    return schema


#: Keywords whose value is one subschema, a list of them, or a name -> subschema map.
_ONE = ("items", "additionalProperties", "propertyNames", "contains", "additionalItems")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions")


def _pattern_ok(pattern: Any) -> bool:
    """Whether llama.cpp's converter takes this ``pattern`` (anchored ``^...$``,
    in the regex subset it translates), into a grammar llama.cpp can hold:
    counts within :data:`MAX_REPEAT`, groups nested at most
    :data:`MAX_NESTING` deep (:mod:`missive_llamacpp.grammar_size`)."""
    if not isinstance(pattern, str) or pattern_size(pattern) > MAX_REPEAT:
        return False
    try:
        converter = _converter()
        converter.visit({"type": "string", "pattern": pattern}, "p")
        return nesting(converter.format_grammar()) <= MAX_NESTING
    except Exception:  # noqa: BLE001 - the converter asserts on what it cannot do
        return False


def relax(schema: Any, relaxed: list[str], path: str = "#", root: Any = None) -> Any:
    """A copy of ``schema`` whose every keyword llama.cpp's converter
    enforces: the parts it would not enforce are left out, each named in
    ``relaxed`` (a JSON pointer-like path and the keyword). What is left
    still constrains the output (types, properties, required keys, enums...);
    what was left out is not enforced during sampling.

    Left out: what :func:`missive_llamacpp.enforced.unenforced` finds (the
    converter reads one branch of keywords per subschema and ignores the
    rest: ``minimum``/``maximum``, ``multipleOf``, ``not``, ``if``/``then``/
    ``else``, an unknown ``format``...), a ``pattern`` it cannot translate
    (unanchored, lookarounds, inline flags), ``$ref`` to another document;
    boolean subschemas become ``{}`` (``true``) or are dropped (``false``).
    """
    if schema is True:
        return {}
    if schema is False:
        relaxed.append(f"{path} (false)")
        return {}
    if not isinstance(schema, dict):
        return schema
    root = schema if root is None else root
    node = dict(schema)
    for key, value in schema.items():
        safe = json_safe(value) if key == "pattern" and isinstance(value, str) else None
        if safe is not None and _pattern_ok(safe):
            node[key] = safe  # narrowed to what a JSON string holds raw (pattern_json)
        elif key == "pattern" or (key == "$ref" and isinstance(value, str) and not value.startswith("#")):
            relaxed.append(f"{path}/{key}")
            del node[key]
    while dropped := unenforced(node, root):  # leaving one out may change the converter's branch
        for key in dropped:
            relaxed.append(f"{path}/{key}")
            del node[key]
    out: dict[str, Any] = {}
    for key, value in node.items():
        where = f"{path}/{key}"
        if key == "allOf" and isinstance(value, list):  # read as property lists: relax their properties
            out[key] = [
                {
                    **c,
                    "properties": {
                        n: relax(v, relaxed, f"{where}/{i}/properties/{n}", root)
                        for n, v in c["properties"].items()
                    },
                }
                if isinstance(c, dict) and isinstance(c.get("properties"), dict)
                else c
                for i, c in enumerate(value)
            ]
        elif key in _ONE and isinstance(value, (dict, bool)):
            out[key] = (
                relax(value, relaxed, where, root)
                if value is not False or key != "additionalProperties"
                else False
            )
        elif key in _MANY and isinstance(value, list):
            out[key] = [relax(v, relaxed, f"{where}/{i}", root) for i, v in enumerate(value)]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {
                name: relax(v, relaxed, f"{where}/{name}", root)
                for name, v in value.items()
                if not (v is False and key == "properties")  # a property that must not appear: left out
            }
        else:
            out[key] = value
    return out


class UnenforcedSchema(ValueError):
    """A ``strict: true`` tool's schema holds what the grammar would not enforce."""


def _args_schema(tool: ToolDefinition, index: int, relaxed: list[str]) -> dict[str, Any]:
    """The arguments schema to build ``tool``'s grammar from: its own when
    the converter enforces all of it, else (non-strict tools only)
    :func:`relax`'s copy, else any JSON object.

    Raises:
        UnenforcedSchema: a ``strict: true`` tool whose schema holds a part
            the converter would not enforce (the driver answers 400: strict
            promises schema-exact arguments); the converter's own exception
            is raised later for one it refuses.
    """
    schema = _object_schema(tool.input_schema)
    notes: list[str] = []
    loose: dict[str, Any] = relax(schema, notes)
    if tool.strict:
        if notes:
            raise UnenforcedSchema("not enforced: " + ", ".join(f"tool '{tool.name}' {n}" for n in notes))
        return loose  # the same constraints (a true subschema written {})
    if _converts(loose, f"tool{index}"):
        relaxed.extend(f"tool '{tool.name}' {note}" for note in notes)
        return loose
    relaxed.append(f"tool '{tool.name}' (whole input_schema: any JSON object)")
    return {"type": "object"}


def _converts(schema: dict[str, Any], name: str) -> bool:
    try:
        converter = _converter()
        converter.visit(converter.resolve_refs(copy.deepcopy(schema), name), f"{name}-args")
        return True
    except Exception:  # noqa: BLE001 - the converter asserts, raises KeyError... on what it cannot do
        return False


def _class_char(ch: str) -> str:
    """``ch`` escaped for a GBNF character class."""
    if ch.isascii() and ch.isalnum():
        return ch
    return f"\\u{ord(ch):04X}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08X}"


@functools.cache
def _raw_language(parser: type[ToolParser]) -> RawValueLanguage:
    """The raw-value automaton of a format, built once per parser class."""
    return RawValueLanguage.build(parser.value_forbids())


def _raw_text_rule(converter: SchemaConverter, parser: type[ToolParser]) -> tuple[str, RawValueLanguage]:
    """The rule of a value written as raw text inside a parameter's tags:
    any text but what the parser would read as the end of the value or
    the call (:meth:`~missive.api.ToolParser.value_forbids`: code holding
    ``<``, ``</parameter>`` or ``]]>`` is written as it is), as one rule per
    state of :class:`~missive.api.RawValueLanguage`'s automaton. The rules
    are the grammar's, shared by every tool's string values."""
    language = _raw_language(parser)
    names = [f"raw-text{k}" for k in range(len(language.transitions))]
    if names[0] in converter._rules:
        return names[0], language
    others = "".join(_class_char(c) for c in sorted(language.alphabet))
    for k, moves in enumerate(language.transitions):
        by_target: dict[int, list[str]] = {}
        for ch, target in moves.items():
            if ch:
                by_target.setdefault(target, []).append(ch)
        alternatives = [
            f"[{''.join(_class_char(c) for c in chars)}] {names[t]}" for t, chars in by_target.items()
        ]
        if "" in moves:
            alternatives.append(f"[^{others}\\x00] {names[moves['']]}")
        converter._add_rule(names[k], f"({' | '.join(alternatives)})?" if alternatives else '""')
    return names[0], language


def _parameters_rule(
    converter: SchemaConverter, parser: type[ToolParser], schema: dict[str, Any], name: str
) -> str:
    """The rule of one call's arguments in a ``"parameters"`` format
    (Qwen3-Coder's ``<parameter=K>``, GLM's ``<arg_key>``, Gemma 4's
    ``key:value``...): the required properties in schema order, then each
    optional one or not; a property whose schema allows strings is raw text
    (when the format writes strings raw), any other the JSON its schema
    describes. Properties a schema leaves open (no ``properties``) are not
    written: the call then has no arguments.
    """
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = [k for k in schema.get("required", []) if k in properties]
    optional = [k for k in properties if k not in required]
    separator = converter._format_literal(parser.parameter_separator) if parser.parameter_separator else ""
    raw_text, language = _raw_text_rule(converter, parser)

    def item(index: int, key: str) -> str:
        prop = properties[key]
        string = parser.raw_string_values and allows_string(prop, schema)
        prefix, suffix = parser.parameter_syntax(key, string)
        if string:
            value = _string_value(converter, prop, raw_text, language)
        else:
            value = converter.visit(prop if isinstance(prop, dict) else {}, f"{name}-p{index}")
        return converter._add_rule(
            f"{name}-p{index}-item",
            f"{converter._format_literal(prefix)} {value} {converter._format_literal(suffix)}",
        )

    items = [item(i, k) for i, k in enumerate([*required, *optional])]
    fixed, loose = items[: len(required)], items[len(required) :]
    sep = f"{separator} " if separator else ""
    if fixed:
        body = f" {sep}".join(fixed) + "".join(f" ({sep}{x})?" for x in loose)
    elif loose:
        # No required argument: optional ones in order, each only after the previous.
        body = "(" + loose[0] + "".join(f" ({sep}{x})?" for x in loose[1:]) + ")?"
    else:
        body = ""
    return converter._add_rule(f"{name}-args", body or '""')


def _string_value(converter: SchemaConverter, prop: Any, raw_text: str, language: RawValueLanguage) -> str:
    """A string argument written raw: one of its enum strings, else any text
    the parser reads back."""
    enum = prop.get("enum") if isinstance(prop, dict) else None
    if isinstance(enum, list) and enum and all(isinstance(v, str) and language.accepts(v) for v in enum):
        return "(" + " | ".join(converter._format_literal(v) for v in enum) + ")"
    return raw_text


def tool_call_grammar(
    parser: type[ToolParser],
    tools: tuple[ToolDefinition, ...],
    choice: ToolChoice,
    relaxed: list[str] | None = None,
) -> str:
    """GBNF for a reply made only of calls (``choice.mode`` ``any`` or ``tool``).

    A non-strict tool's schema that llama.cpp cannot fully enforce is
    enforced as far as it can be (:func:`relax`; the API accepts any JSON
    Schema for tools without ``strict: true``, and clients send such schemas:
    zod records, unanchored patterns); what was left out is appended to
    ``relaxed``. A strict tool's schema must convert whole.

    Args:
        parser: the parser class whose ``call_syntax`` writes a call.
        tools: the offered tools; with mode ``tool`` only ``choice.name`` is allowed.
        choice: mode, name and whether several calls are allowed.
        relaxed: receives what was not enforced, e.g. ``tool 'f' #/properties/n/pattern``.

    Raises:
        Exception: from llama-cpp-python's converter, for a strict tool.
    """
    notes = relaxed if relaxed is not None else []
    allowed = [t for t in tools if choice.mode != "tool" or t.name == choice.name]
    converter = _converter()
    alternatives = []
    for i, tool in enumerate(allowed):
        schema = converter.resolve_refs(_args_schema(tool, i, notes), f"tool{i}")
        if parser.arguments_format == "parameters":
            args_rule = _parameters_rule(converter, parser, schema, f"tool{i}")
        else:
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


def json_schema_grammar(schema: dict[str, Any], relaxed: list[str] | None = None) -> str:
    """GBNF for a reply that is one JSON value valid against ``schema``
    (``output_config.format``), relaxed as :func:`tool_call_grammar` relaxes
    a non-strict tool (what was left out is appended to ``relaxed``); a
    schema not even its relaxed copy converts is any JSON object.
    """
    notes = relaxed if relaxed is not None else []
    schema = _output_schema(schema, notes)
    converter = _converter()
    resolved = converter.resolve_refs(schema, "output")
    converter.visit(resolved, "")
    return _strict_json(converter.format_grammar())


def _output_schema(schema: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The schema :func:`json_schema_grammar` builds its grammar from: the
    relaxed copy, else any JSON object; each part left out appended to ``notes``."""
    schema = copy.deepcopy(schema)
    schema.pop("$schema", None)
    found: list[str] = []
    loose = relax(schema, found)
    if _converts(loose, "output"):
        notes.extend(f"output_config.format {note}" for note in found)
        return loose
    notes.append("output_config.format (whole schema: any JSON object)")
    return {"type": "object"}


def output_relaxations(schema: dict[str, Any]) -> list[str]:
    """What :func:`json_schema_grammar` would leave out of ``schema``
    (``output_config.format #/properties/n/maximum``...), without building
    the grammar."""
    notes: list[str] = []
    _output_schema(schema, notes)
    return notes


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
