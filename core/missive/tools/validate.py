"""Checking a generated tool input or structured output against its full schema.

A backend may enforce only part of a schema while sampling (llama.cpp's
grammars leave out ``not``, unanchored patterns...: see
``missive_llamacpp.grammar.relax``), and a model that is not constrained at
all may write anything. The pipeline checks each complete ``tool_use`` input
and each structured-output answer here and logs what does not conform, so an
operator sees it; the answer itself is returned as generated (the API does not
validate the inputs of non-strict tools either).

Uses ``jsonschema`` (the reference Python implementation): the draft is read
from the schema's ``$schema``, default 2020-12, as the API's tool schemas are.

**Nothing is ever fetched.** A ``$ref`` to another document (``http://...``)
would make jsonschema download it (its deprecated default resolver, with
``urlopen`` and no timeout, in the event loop): a client could make the
server request any URL, itself included, and freeze it. Every check here
uses :data:`REGISTRY`, whose retrieval refuses: a remote ``$ref`` is left
unchecked (and relaxed by the grammar, ``missive_llamacpp.grammar.relax``),
and a local one that points nowhere (``#/$defs/missing``) makes the schema
invalid (:func:`schema_error`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

__all__ = ["parsed", "schema_violation", "schema_error", "schema_too_deep", "MAX_SCHEMA_DEPTH", "REGISTRY"]

#: Objects and arrays one inside another a request's JSON schema may hold
#: (a tool's ``input_schema``, ``output_config.format.schema``). The checks
#: and grammar converters that read a schema recurse per level (jsonschema,
#: llama.cpp's and llguidance's converters): a deeper one met Python's
#: recursion limit there, a 400 saying nothing of the schema, or none at all
#: (jsonschema's check gave up and passed it). OpenAI's own limit for a
#: structured output's schema is 10 levels of nesting (the Structured
#: Outputs guide, "Supported schemas"); this one is far above what real
#: schemas use (a level of properties is two here: the object and its
#: ``properties``).
MAX_SCHEMA_DEPTH = 64

#: The base URI a schema is resolved against (never fetched).
_BASE = "urn:missive:schema"


def _refuse(uri: str) -> Resource[Any]:
    """``referencing``'s retrieval hook: never fetch a document."""
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs-generated __init__


#: The registry every check uses: no remote document is ever retrieved.
REGISTRY: Registry[Any] = Registry(retrieve=_refuse)  # type: ignore[call-arg]


def _refs(node: Any) -> Iterator[str]:
    """Every ``$ref`` string in a schema, depth first."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _dangling_ref(schema: dict[str, Any]) -> str | None:
    """The first local ``$ref`` (``#...``) of ``schema`` that resolves to
    nothing in it, or None. Remote references are not looked up."""
    resource = Resource.from_contents(schema, default_specification=DRAFT202012)
    resolver = REGISTRY.with_resource(_BASE, resource).resolver(base_uri=_BASE)
    for ref in _refs(schema):
        if not ref.startswith("#"):
            continue
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return ref
    return None


def schema_too_deep(schema: Any, limit: int = MAX_SCHEMA_DEPTH) -> str | None:
    """Why ``schema`` is too deep to be read (:data:`MAX_SCHEMA_DEPTH`), or
    None; walked without recursion, so any depth the JSON parser took is
    measured."""
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return (
                f"the JSON schema is nested more than {limit} levels deep (objects and arrays inside "
                "one another), beyond this server's limit; flatten it, or share parts with $defs and $ref"
            )
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None


def schema_error(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (its draft from ``$schema``,
    default 2020-12), as ``path: message``, or None when it is. The API
    refuses such a tool (``input_schema: JSON schema is invalid``). Results
    are cached by the schema's JSON (clients send the same tools every turn)."""
    try:
        key = json.dumps(schema, sort_keys=True)
    except (TypeError, ValueError):
        return "not JSON"
    return _schema_error(key)


@functools.lru_cache(maxsize=1024)
def _schema_error(key: str) -> str | None:
    import jsonschema
    from jsonschema.exceptions import SchemaError

    schema = json.loads(key)
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except SchemaError as exc:
        path = ".".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"{path}: {exc.message}"
    except Exception:  # noqa: BLE001 - a check that cannot run (unknown $schema...) refuses nothing
        return None
    try:
        dangling = _dangling_ref(schema)
    except Exception:  # noqa: BLE001 - an $id or dialect referencing cannot read: refuse nothing
        return None
    if dangling is not None:
        return f"$ref '{dangling}' points to nothing in the schema"
    return None


def schema_violation(schema: dict[str, Any] | None, value: Any) -> str | None:
    """The first way ``value`` breaks ``schema``, as ``path: message``
    (``location: '12' does not match '^\\d+$'``), or None when it conforms,
    when there is no schema, or when the schema itself is not valid JSON
    Schema (nothing to check against). Never raises."""
    if not schema:
        return None
    try:
        import jsonschema
        from jsonschema.exceptions import SchemaError

        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        error = jsonschema.exceptions.best_match(cls(schema, registry=REGISTRY).iter_errors(value))
    except SchemaError:
        return None
    except Exception as exc:  # noqa: BLE001 - a check must never fail a request (unresolvable $ref...)
        return f"(not checked: {type(exc).__name__})"
    if error is None:
        return None
    path = ".".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{path}: {error.message}"


def parsed(text: str) -> Any:
    """``text`` as JSON, or the text itself when it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text
