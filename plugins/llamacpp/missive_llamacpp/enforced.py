"""Which JSON Schema keywords llama-cpp-python's converter enforces.

``llama_cpp.llama_grammar.SchemaConverter.visit`` (llama-cpp-python 0.3.x, a
port of llama.cpp's ``examples/json_schema_to_grammar.py``) turns a (sub)schema
into a grammar rule by the *first* of these branches whose condition holds,
reads only that branch's keywords, and silently ignores every other keyword of
the node: no error, so a grammar built from ``{"type": "integer",
"maximum": 10}`` admits ``500`` (measured on SmolLM2 with a strict tool).

=============  ======================================  =======================================
branch         condition (in this order)               keywords it enforces
=============  ======================================  =======================================
ref            ``$ref``                                ``$ref`` (a local ``#/...`` pointer)
union          ``oneOf`` or ``anyOf``                  ``oneOf`` (else ``anyOf``), as ``anyOf``
types          ``type`` is a list                      ``type`` (each type bare)
const          ``const``                               ``const``
enum           ``enum``                                ``enum``
object         type null/object, ``properties`` or     ``type``, ``properties``, ``required``
               ``additionalProperties`` not ``true``   (declared names), ``additionalProperties``
                                                       (absent: closed)
allOf          type null/object, ``allOf``             ``allOf`` of plain property lists (every
                                                       property required)
array          type null/array, ``items`` or           ``type``, ``items`` (a schema, with
               ``prefixItems``                         ``minItems``/``maxItems``; a list: a tuple)
pattern        type null/string, ``pattern``           ``type``, ``pattern`` (anchored subset)
format         type null/string, ``format`` uuid,      ``type``, ``format``
               date, time or date-time
length         type string, ``minLength``/``maxLength``  ``type``, ``minLength``, ``maxLength``
any object     type object, or the empty schema        ``type``
primitive      anything else                           ``type`` (boolean, integer, number,
                                                       string, array, null)
=============  ======================================  =======================================

So never enforced, whatever the branch: ``minimum``, ``maximum``,
``exclusiveMinimum``, ``exclusiveMaximum``, ``multipleOf``, ``not``,
``if``/``then``/``else``, ``uniqueItems``, ``contains``/``minContains``/
``maxContains``, ``minProperties``/``maxProperties`` (unless the declared
properties already satisfy them), ``patternProperties`` and ``propertyNames``
on an open object, ``dependentRequired``/``dependentSchemas``/
``dependencies``, ``unevaluatedProperties``/``unevaluatedItems``, a ``format``
other than those above; and, by branch, what the table does not list (a
``maximum`` beside a ``type`` list, ``minLength`` beside a ``pattern``,
``properties`` beside ``anyOf``, ``minItems`` without ``items``...). A
``minLength``/``maxLength``/``minItems``/``maxItems`` above
:data:`~missive_llamacpp.grammar_size.MAX_REPEAT` is not enforced either:
it would not be written into a grammar (:mod:`missive_llamacpp.grammar_size`).

:func:`unenforced` lists those keywords of one node; a keyword that cannot
apply to what the branch produces (``minLength`` beside ``"type":
"integer"``) is a no-op, not reported; a ``const``/``enum`` beside other
keywords is exact when every allowed value satisfies them. Keywords that are
annotations or unknown to JSON Schema (``description``, ``x-...``) assert
nothing (JSON Schema 2020-12 Core, section 6.5) and are never reported.
Source read: llama-cpp-python 0.3.x ``llama_cpp/llama_grammar.py``,
``SchemaConverter.visit``, ``_build_object_rule``, ``STRING_FORMAT_RULES``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import jsonschema

from .grammar_size import MAX_REPEAT

__all__ = ["unenforced"]

#: Keywords that assert something (JSON Schema 2020-12 Validation and Core
#: applicators, plus draft-7's ``dependencies`` and ``additionalItems``); any
#: other key is an annotation or unknown and constrains nothing.
ASSERTIONS = frozenset(
    {
        "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "maxItems", "minItems",
        "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties", "required",
        "dependentRequired", "dependencies", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
        "dependentSchemas", "prefixItems", "items", "additionalItems", "contains", "properties",
        "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
        "unevaluatedProperties", "$ref", "$dynamicRef", "$recursiveRef",
    }
)  # fmt: skip

_NUMBER = {"integer", "number"}
#: The JSON types a keyword applies to (JSON Schema 2020-12 Validation, sections 6.2-6.5).
_APPLIES: dict[str, set[str]] = {
    **dict.fromkeys(("multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"), _NUMBER),
    **dict.fromkeys(("maxLength", "minLength", "pattern", "format"), {"string"}),
    **dict.fromkeys(
        ("items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
         "minItems", "maxItems", "uniqueItems", "unevaluatedItems"),
        {"array"},
    ),
    **dict.fromkeys(
        ("properties", "patternProperties", "additionalProperties", "propertyNames", "required",
         "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
         "unevaluatedProperties"),
        {"object"},
    ),
}  # fmt: skip
#: Counts the converter writes out item by item (at most ``MAX_REPEAT``).
_COUNTS = frozenset({"minLength", "maxLength", "minItems", "maxItems"})
_FORMATS = re.compile(r"^(uuid[1-5]?|date|time|date-time)$")
_PRIMITIVES = {"boolean", "integer", "number", "string", "array", "null", "object"}


def _branch(node: Mapping[str, Any]) -> tuple[str, set[str], set[str] | None]:
    """The converter's branch for ``node`` (the module's table): its name,
    the keywords it reads and the JSON types it can produce (None: any)."""
    kind = node.get("type")
    if "$ref" in node:
        return "ref", {"$ref"}, None
    if "oneOf" in node or "anyOf" in node:
        return "union", {"oneOf" if node.get("oneOf") else "anyOf"}, None
    if isinstance(kind, list):
        return "types", {"type"}, {str(t) for t in kind}
    if "const" in node:
        return "const", {"const"}, None
    if "enum" in node:
        return "enum", {"enum"}, None
    if kind in (None, "object") and (
        "properties" in node or ("additionalProperties" in node and node["additionalProperties"] is not True)
    ):
        return "object", {"type", "properties", "required", "additionalProperties"}, {"object"}
    if kind in (None, "object") and "allOf" in node:
        return "allOf", {"type", "allOf", "required"}, {"object"}
    if kind in (None, "array") and ("items" in node or "prefixItems" in node):
        return "array", {"type", "items", "prefixItems", "minItems", "maxItems"}, {"array"}
    if kind in (None, "string") and "pattern" in node:
        return "pattern", {"type", "pattern"}, {"string"}
    if kind in (None, "string") and _FORMATS.match(str(node.get("format", ""))):
        return "format", {"type", "format"}, {"string"}
    if kind == "string" and ("minLength" in node or "maxLength" in node):
        return "length", {"type", "minLength", "maxLength"}, {"string"}
    if kind == "object" or not node:
        return "any object", {"type"}, {"object"}
    return "primitive", {"type"}, {str(kind)} if kind in _PRIMITIVES else None


def _declared(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """The node's ``properties`` (empty when absent or malformed)."""
    properties = node.get("properties")
    return properties if isinstance(properties, Mapping) else {}


def _valid(value: Any, schema: Mapping[str, Any]) -> bool:
    try:
        checker = jsonschema.FormatChecker()
        return bool(jsonschema.Draft202012Validator(dict(schema), format_checker=checker).is_valid(value))
    except Exception:  # noqa: BLE001 - an unresolvable $ref, a malformed keyword: not shown to hold
        return False


def _resolve(root: Mapping[str, Any], ref: Any) -> Any:
    """The local ``#/...`` target of ``ref`` in ``root``, or None."""
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    target: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(target, Mapping) or part not in target:
            return None
        target = target[part]
    return target


def _plain_properties(component: Any, root: Mapping[str, Any]) -> bool:
    """Whether an ``allOf`` component is what the converter reads whole: an
    object schema (or a local ``$ref`` to one) of ``properties`` and
    ``required`` only (it makes every property required: stricter)."""
    if isinstance(component, Mapping) and "$ref" in component:
        component = _resolve(root, component["$ref"])
    if not isinstance(component, Mapping):
        return False
    keys = {k for k in component if k in ASSERTIONS}
    closed = component.get("additionalProperties", False) is False
    return keys <= {"type", "properties", "required", "additionalProperties"} and (
        component.get("type", "object") == "object" and closed
    )


def _exact_anyway(node: Mapping[str, Any], branch: str, key: str, root: Mapping[str, Any]) -> bool:
    """Whether ``key``, not read by ``branch``, holds for every value the
    branch's grammar admits."""
    value = node[key]
    if branch in ("const", "enum"):
        allowed = [node["const"]] if branch == "const" else node["enum"]
        return isinstance(allowed, list) and all(_valid(v, {key: value}) for v in allowed)
    if branch == "object":
        declared = _declared(node)
        closed = node.get("additionalProperties", False) is False
        required = [k for k in node.get("required", []) if k in declared]
        if key == "minProperties":
            return isinstance(value, int) and len(required) >= value
        if key == "maxProperties":
            return closed and isinstance(value, int) and len(declared) <= value
        if key == "propertyNames":
            return closed and all(_valid(name, value) for name in declared)
        if key == "patternProperties":
            return (
                closed
                and isinstance(value, Mapping)
                and not any(re.search(p, name) for p in value for name in declared)
            )
        if key == "unevaluatedProperties":
            return closed
    if branch == "array" and isinstance(node.get("items") or node.get("prefixItems"), list):
        size = len(node.get("items") or node["prefixItems"])  # a tuple: exactly this many items
        if key in ("additionalItems", "unevaluatedItems"):
            return True
        if key == "uniqueItems":
            return value is False or size <= 1
    if key == "uniqueItems":
        return value is False or (branch == "array" and node.get("maxItems") in (0, 1))
    return False


def unenforced(node: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> list[str]:
    """The keywords of ``node`` (one subschema, not its children) that the
    converter's grammar does not enforce (module doc), in the node's order.

    Args:
        node: a schema object (booleans and ``$ref`` targets are the caller's).
        root: the whole schema, for local ``$ref`` of ``allOf`` components.
    """
    root = node if root is None else root
    if "allOf" in node and not isinstance(node["allOf"], list):
        return ["allOf"]
    branch, reads, produces = _branch(node)
    found: list[str] = []
    for key in node:
        if key not in ASSERTIONS:
            continue
        if key in reads:
            if _read_but_loose(node, branch, key, root):
                found.append(key)
            continue
        applies = _APPLIES.get(key)
        if produces is not None and applies is not None and not applies & produces:
            continue  # cannot apply to what is produced: a no-op
        if not _exact_anyway(node, branch, key, root):
            found.append(key)
    return found


def _read_but_loose(node: Mapping[str, Any], branch: str, key: str, root: Mapping[str, Any]) -> bool:
    """A keyword the branch reads but only in part."""
    value = node[key]
    if branch == "object" and key == "required":
        declared = _declared(node)
        return isinstance(value, list) and any(k not in declared for k in value)
    if branch == "allOf" and key in ("allOf", "required"):
        parts = [
            _resolve(root, c["$ref"]) if isinstance(c, Mapping) and "$ref" in c else c for c in node["allOf"]
        ]
        if not all(_plain_properties(c, root) for c in parts):
            return key == "allOf"
        merged = {name for part in parts for name in (part.get("properties") or {})}
        wanted = [*node.get("required", []), *(k for part in parts for k in part.get("required", []))]
        return any(k not in merged for k in wanted)  # every merged property is required, no other
    if key in _COUNTS and isinstance(value, int) and value > MAX_REPEAT:
        return True  # not written into a grammar (grammar_size)
    if branch == "array":
        items = node.get("items")
        if key == "prefixItems":
            return isinstance(items, Mapping) and bool(items)  # the converter reads items, not these
        if key in ("minItems", "maxItems") and isinstance(items or node.get("prefixItems"), list):
            size = len(items or node["prefixItems"])
            return not (isinstance(value, int) and (size >= value if key == "minItems" else size <= value))
    return False
