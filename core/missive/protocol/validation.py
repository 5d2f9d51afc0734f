"""Turning request bodies into validated models, with the API's error wording."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .errors import InvalidRequestError
from .fastjson import NOT_READ, loads_exact

__all__ = ["parse_json", "validate_body", "format_validation_error"]

M = TypeVar("M", bound=BaseModel)


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are Python's extensions, not
    JSON (RFC 8259, section 6): refused as invalid JSON, not read as numbers."""
    raise ValueError(f"{name} is not a JSON value (RFC 8259 numbers are finite)")


def parse_json(raw: bytes) -> Any:
    """Decode a JSON request body.

    Raises:
        InvalidRequestError: empty body, not UTF-8, not JSON, or not an object.
    """
    if not raw.strip():
        raise InvalidRequestError("request body is empty; send a JSON object")
    body = loads_exact(raw)  # orjson, when it reads it as json would: valid UTF-8, no lone surrogate
    if body is not NOT_READ:
        if not isinstance(body, dict):
            raise InvalidRequestError("request body must be a JSON object")
        return body
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequestError("request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4300 digits (int max_str_digits)
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    try:
        # JSON may escape lone UTF-16 surrogates ("\ud800"), which are not
        # Unicode text: nothing downstream (tokenizers, the response) can encode them.
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(
            "request body is not valid JSON: it contains an unpaired surrogate escape (\\ud800-\\udfff)"
        ) from None
    except RecursionError:
        raise InvalidRequestError("request body is not valid JSON: nested too deeply") from None
    return body


def _path(loc: tuple[Any, ...]) -> str:
    """Pydantic locations as API field paths: ``messages.0.content.1.text``.

    Union branch labels (``str``, ``list[...]``, discriminator tags that follow
    a list index) are dropped.
    """
    parts: list[str] = []
    previous: Any = None
    for i, item in enumerate(loc):
        text = str(item)
        last = i == len(loc) - 1  # a tag is followed by the field it names; last, it is a field ("text")
        is_label = isinstance(item, str) and (
            "[" in text
            or text in {"str", "int", "float", "bool", "dict", "list", "none"}
            or (isinstance(previous, int) and text in _BLOCK_TAGS and (not last or text == "misplaced"))
            or (previous == "tool_choice" and text in _CHOICE_TAGS)
            or (previous == "source" and text in _SOURCE_TAGS)
        )
        previous = item
        if not is_label:
            parts.append(text)
    return ".".join(parts)


_BLOCK_TAGS = {
    "text",
    "image",
    "document",
    "search_result",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "tool_search_tool_result",
    "tool_addition",
    "tool_removal",
    "server_tool",
    "misplaced",
    "mcp_tool_use",
    "mcp_tool_result",
    "mcp_tool_listing",
    "compaction",
    "fallback",
    "unknown",
}
_CHOICE_TAGS = {"auto", "any", "none", "tool"}
#: ``content.3: ...``: a validator's message naming a path below its model.
_SUB_PATH = re.compile(r"^((?:[a-z_]+|\d+)(?:\.(?:[a-z_]+|\d+))*): (?=`)")
_SOURCE_TAGS = {"base64", "url", "file", "text", "content"}


def _drop_shadowed_branches(errors: list[Any]) -> list[Any]:
    """For ``str | list[...]`` fields, keep the list branch's precise errors and
    drop "Input should be a valid string" when the client clearly sent a list."""
    list_prefixes = {
        tuple(err["loc"][:i])
        for err in errors
        for i, part in enumerate(err["loc"])
        if isinstance(part, str) and part.startswith("list[")
    }
    return [
        err
        for err in errors
        if not (err["loc"] and err["loc"][-1] == "str" and tuple(err["loc"][:-1]) in list_prefixes)
    ]


#: pydantic's words for a value that is not an object where a model is
#: expected, as the API says it (pydantic's ``model_attributes_type``):
#: its ``model_type`` message names the Python class ("or instance of Message").
_NOT_AN_OBJECT = "Input should be a valid dictionary or object to extract fields from"


_TEXT_OR_LIST = "Input should be a valid string or a list of content blocks"


def _merge_text_or_list(errors: list[Any]) -> list[Any]:
    """For a ``str | list[...]`` field (``system``, a message's ``content``)
    sent as neither, one error saying both (:data:`_TEXT_OR_LIST`), not the
    list branch's alone."""
    merged = []
    for err in errors:
        loc = err["loc"]
        if err["type"] == "list_type" and loc and str(loc[-1]).startswith("list["):
            err = {**err, "loc": loc[:-1], "msg": _TEXT_OR_LIST}
        merged.append(err)
    return merged


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``path: message`` (first 5, then a count)."""
    lines: list[str] = []
    for err in _merge_text_or_list(_drop_shadowed_branches(exc.errors(include_url=False))):
        message = err["msg"].removeprefix("Value error, ")
        loc = tuple(err["loc"])
        if err["type"] == "model_type":
            message = _NOT_AN_OBJECT
            if len(loc) > 1 and isinstance(loc[-2], int) and loc[-1] in _BLOCK_TAGS:
                loc = loc[:-1]  # the fallback branch's tag ("unknown"), not a field of the block
        path = _path(loc)
        inner = _SUB_PATH.match(message)  # a model validator pointing below its model
        if inner and path:
            path, message = f"{path}.{inner.group(1)}", message[inner.end() :]
        if err["type"] == "union_tag_invalid" or err["type"] == "literal_error":
            message = f"{message} (got {err.get('input')!r})" if "input" in err else message
        elif err["type"] == "union_tag_not_found":
            # pydantic: "Unable to extract tag using discriminator 'type'"; the API names the field.
            field = str(err.get("ctx", {}).get("discriminator", "type")).strip("'\"")
            path, message = (f"{path}.{field}" if path else field), "Field required"
        lines.append(f"{path}: {message}" if path else message)
    lines = list(dict.fromkeys(lines))
    if len(lines) > 5:
        lines = lines[:5] + [f"... and {len(lines) - 5} more"]
    return "; ".join(lines)


def validate_body(model: type[M], body: Any) -> M:
    """Validate ``body`` as ``model``.

    Raises:
        InvalidRequestError: with field paths, e.g.
            ``messages.0.role: Input should be 'user', 'assistant' or 'system'``.
    """
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequestError(format_validation_error(exc)) from None
    except RecursionError:
        raise InvalidRequestError("request body is nested too deeply") from None
