"""Every field path of a request TypedDict of the official SDK, at every depth.

:func:`request_paths` walks the ``anthropic`` package's request types
(``MessageCreateParams`` and ``MessageCountTokensParams``, beta and not) and
yields dotted paths such as ``messages[].content[image].source[url].url`` or
``tools[web_fetch_20260318].url_sources``:

* a TypedDict's key adds ``.key`` (the first has no dot);
* a list (``Iterable``, ``List``, ``Sequence``...) adds ``[]``, a mapping
  (``Dict``) adds ``{}``;
* TypedDicts that carry a ``type`` literal are named by it, ``[url]``, in a
  union of several and in a list (in place of ``[]``: ``content[text]``);
  other unions (the ``role`` of messages, ``str`` or blocks) share the path;
* ``Annotated``, ``Optional``, ``Required``, ``NotRequired`` are unwrapped,
  forward references resolved in the TypedDict's module, and a TypedDict
  already on the path is not entered again (recursion guard).

Leaves (``str``, ``Literal``, ``object``...) end a path; every path on the
way is yielded too, so a rule can name a field and another its subtree.
Used by :mod:`missive.protocol.coverage_nested` and its test
(``tests/test_api_coverage_nested.py``).
"""

from __future__ import annotations

import collections.abc
import typing
from collections.abc import Iterator
from typing import Any

import typing_extensions

__all__ = ["sdk_request_types", "request_paths", "walk"]

_WRAPPERS = {typing.Annotated, typing_extensions.Required, typing_extensions.NotRequired}
_LISTS = {list, tuple, set, frozenset, collections.abc.Iterable, collections.abc.Sequence}
_MAPPINGS = {dict, collections.abc.Mapping}


def sdk_request_types() -> list[Any]:
    """The installed SDK's request TypedDicts of ``messages.create`` and
    ``messages.count_tokens``, beta and not."""
    from anthropic.types import message_count_tokens_params, message_create_params
    from anthropic.types.beta import message_count_tokens_params as beta_count
    from anthropic.types.beta import message_create_params as beta_create

    return [
        message_create_params.MessageCreateParamsNonStreaming,
        message_create_params.MessageCreateParamsStreaming,
        beta_create.MessageCreateParamsNonStreaming,
        beta_create.MessageCreateParamsStreaming,
        message_count_tokens_params.MessageCountTokensParams,
        beta_count.MessageCountTokensParams,
    ]


def request_paths() -> list[str]:
    """Every path of :func:`sdk_request_types`, sorted, without repeats."""
    found: set[str] = set()
    for td in sdk_request_types():
        found.update(walk(td))
    return sorted(found)


def _is_typed_dict(tp: Any) -> bool:
    return isinstance(tp, type) and typing_extensions.is_typeddict(tp)


def _hints(td: Any) -> dict[str, Any]:
    return typing_extensions.get_type_hints(td, include_extras=True)


def _unwrap(tp: Any) -> list[Any]:
    """The members of ``tp`` once wrappers and unions are taken off, ``None`` left out."""
    origin = typing.get_origin(tp)
    if origin in _WRAPPERS:
        return _unwrap(typing.get_args(tp)[0])
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        return [m for arg in typing.get_args(tp) for m in _unwrap(arg)]
    if tp is type(None):
        return []
    return [tp]


def _variant(td: Any) -> str | None:
    """The ``type`` literal(s) of a TypedDict, joined with ``|``, else None."""
    spelled = _hints(td).get("type")
    if spelled is None:
        return None
    values = [
        v for m in _unwrap(spelled) if typing.get_origin(m) is typing.Literal for v in typing.get_args(m)
    ]
    return "|".join(str(v) for v in values) or None


def walk(td: Any, prefix: str = "", seen: tuple[Any, ...] = ()) -> Iterator[str]:
    """The paths below one TypedDict (see the module doc)."""
    seen = (*seen, td)
    for key, hint in _hints(td).items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        yield from _below(hint, path, seen)


def _below(hint: Any, path: str, seen: tuple[Any, ...], listed: bool = False) -> Iterator[str]:
    members = _unwrap(hint)
    dicts = [m for m in members if _is_typed_dict(m)]
    # Variants are named in a union of several, and in any list ("content[text]").
    named = (len(dicts) > 1 or listed) and bool(dicts) and all(_variant(d) for d in dicts)
    if listed and not named and (dicts or not members):
        path = f"{path}[]"
    for member in members:
        if _is_typed_dict(member):
            if member in seen:
                continue
            here = f"{path}[{_variant(member)}]" if named else path
            if named:
                yield here
            yield from walk(member, here, seen)
            continue
        origin = typing.get_origin(member)
        args = typing.get_args(member)
        if origin in _LISTS and args:
            yield from _below(args[0], path, seen, listed=True)
        elif origin in _MAPPINGS and len(args) == 2 and _unwrap(args[1]) != [object]:
            yield from _below(args[1], f"{path}{{}}", seen)


if __name__ == "__main__":
    print("\n".join(request_paths()))
