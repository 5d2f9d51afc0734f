"""What Chat Completions (:mod:`.chat_request`) and Responses
(:mod:`.responses_request`) translate alike: the checked reading of a field,
text and image content parts, function tools and calls, ``tool_choice``,
reasoning effort, JSON output formats and the sampling fields.

Types are checked as OpenAI checks them (the ``openai`` SDK 3.57.0's
``CompletionCreateParams`` and ``ResponseCreateParams``: ``stream``,
``parallel_tool_calls``, ``strict``, ``include_usage`` are ``bool``;
``max_completion_tokens``, ``max_output_tokens`` ``int``; ``temperature``,
``top_p`` ``float``; names, ids, ``arguments`` ``str``; ``parameters``,
``metadata`` objects): a wrong type is a 400 naming the ``param``, never
read as something else (``strict: "yes"`` is not "not strict").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from .calls import input_of
from .errors import OpenAIRequestError
from .turns import Origin, ToolIds

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "bad",
    "checked",
    "optional",
    "report_unknown",
    "image_block",
    "text_of",
    "user_blocks",
    "tool_use",
    "function_tool",
    "tool_choice",
    "effort_of",
    "json_format",
    "sampling",
]

#: ``max_tokens`` of a request that sets no maximum (OpenAI's default is
#: "until the model stops"; drivers clamp this to what the context leaves).
DEFAULT_MAX_TOKENS = 32768

_DATA_URL = re.compile(
    r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,(?P<data>.*)$", re.S
)
_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}
_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "string": (str, "a string"),
    "boolean": (bool, "a boolean"),
    "integer": (int, "an integer"),
    "number": ((int, float), "a number"),
    "object": (dict, "an object"),
    "list": (list, "a list"),
}


def bad(message: str, param: str | None, code: str | None = None) -> OpenAIRequestError:
    return OpenAIRequestError(message, param=param, code=code)


def checked(value: Any, kind: str, where: str) -> Any:
    """``value`` when it is of ``kind`` (``string``, ``boolean``, ``integer``,
    ``number``, ``object``, ``list``; a boolean is no number), else a 400."""
    types, name = _KINDS[kind]
    if not isinstance(value, types) or (kind in ("integer", "number") and isinstance(value, bool)):
        raise bad(f"{where}: expected {name}, got {type(value).__name__}", where)
    return value


def optional(raw: dict[str, Any], name: str, kind: str, where: str | None = None) -> Any:
    """``raw[name]`` checked as ``kind``, or None when absent or null."""
    value = raw.get(name)
    return None if value is None else checked(value, kind, where or name)


def report_unknown(obj: dict[str, Any], known: frozenset[str], where: str, ignored: list[str]) -> None:
    """Report the fields of ``obj`` (a message, item, part or tool) that are
    set and that the translation does not act on, as ``where.name``."""
    ignored.extend(f"{where}.{k}" for k, v in obj.items() if k not in known and v not in (None, [], {}))


def image_block(url: str, field: str, *, data_param: str) -> dict[str, Any]:
    """The Messages ``image`` block of an OpenAI image URL (a ``data:`` URL
    or an http(s) one). ``field`` names the URL's place in error messages;
    ``data_param`` is the ``param`` of a malformed data URL's error."""
    if url.startswith("data:"):
        found = _DATA_URL.match(url)
        if found is None or not found.group("type"):
            raise bad(f"{field}: a data URL must be data:<media type>;base64,<data>", data_param)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": found.group("type"), "data": found.group("data")},
        }
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise bad(f"{field}: expected a data: or http(s) URL", field)


def text_of(content: Any, where: str, kinds: tuple[str, ...], ignored: list[str]) -> str:
    """The text of content that holds only text: a string, or parts of
    ``kinds`` (their ``text``, or a ``refusal`` part's ``refusal``)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad(f"{where}: expected a string or a list of content parts", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise bad(
                f"{where}[{j}].type: content part type {kind!r} is not supported here", f"{where}[{j}].type"
            )
        key = "refusal" if kind == "refusal" else "text"
        texts.append(checked(part.get(key), "string", f"{where}[{j}].{key}"))
        report_unknown(part, _TEXT_PART_FIELDS, f"{where}[{j}]", ignored)
    return "".join(texts)


#: A door's image part at a path -> its ``image`` block and origin.
ImagePart = Callable[[dict[str, Any], str, list[str]], tuple[dict[str, Any], Origin]]


def user_blocks(
    content: Any, where: str, text_kinds: tuple[str, ...], images: tuple[str, ImagePart], ignored: list[str]
) -> list[tuple[dict[str, Any], Origin]]:
    """The blocks (with their origins) of user content at ``where``: a
    string, or parts: text (of ``text_kinds``; empty ones left out) and
    images (``images``: the part type and its reader); any other part type
    is a 400 naming it."""
    if isinstance(content, str):
        return [({"type": "text", "text": content}, Origin(where, {"text": ""}))] if content else []
    if not isinstance(content, list):
        raise bad(f"{where}: expected a string or a list of content parts", where)
    blocks: list[tuple[dict[str, Any], Origin]] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in text_kinds:
            text = checked(part.get("text"), "string", f"{at}.text")
            report_unknown(part, frozenset({"type", "text"}), at, ignored)
            if text:
                blocks.append(({"type": "text", "text": text}, Origin(at)))
        elif kind == images[0]:
            blocks.append(images[1](part, at, ignored))
        else:
            raise bad(f"{at}.type: content part type {kind!r} is not supported", f"{at}.type")
    return blocks


#: The fields of a text part read or harmless (``annotations``, ``logprobs``
#: of an ``output_text`` part sent back are reported only when not empty).
_TEXT_PART_FIELDS = frozenset({"type", "text", "refusal"})


def tool_use(
    call_id: Any, name: Any, arguments: Any, where: str, fields: dict[str, str], ids: ToolIds
) -> tuple[dict[str, Any], Origin]:
    """A ``tool_use`` block of a function call at ``where``; ``fields`` names
    ``id``, ``name`` and ``arguments`` below it.

    ``arguments`` that are not whole JSON are a call cut short (the server's
    own, ``status: "incomplete"``, sent back as Codex and the Agents SDK send
    history with ``store: false``): its ``input`` is what the core's fold
    makes of a cut call (:func:`.calls.input_of`: the members written in
    full, ``{}`` when nothing is), so a conversation is never blocked by a
    call this server wrote. Whole JSON that is not an object is still refused.
    """
    call_id = checked(call_id, "string", f"{where}.{fields['id']}")
    name = checked(name, "string", f"{where}.{fields['name']}")
    where_args = f"{where}.{fields['input']}"
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) or arguments is None else None
    except ValueError:
        cut = input_of(arguments)
        args = cut if isinstance(cut, dict) else {}
    if not isinstance(args, dict):
        raise bad(f"{where_args}: expected a JSON object as a string", where_args)
    block = {"type": "tool_use", "id": ids.inward(call_id), "name": name, "input": args}
    return block, Origin(where, fields)


#: The fields of a function tool (Chat: its ``function``; Responses: the tool).
_TOOL_FIELDS = frozenset({"name", "description", "parameters", "strict"})


def function_tool(
    spec: dict[str, Any], where: str, ignored: list[str], known: frozenset[str]
) -> dict[str, Any]:
    """The Messages tool of a function's ``name``, ``description``,
    ``parameters`` and ``strict`` in ``spec`` (at ``where``); other fields
    of ``spec`` than those and ``known`` are reported."""
    name = checked(spec.get("name"), "string", f"{where}.name")
    description = optional(spec, "description", "string", f"{where}.description")
    schema = optional(spec, "parameters", "object", f"{where}.parameters")
    strict = optional(spec, "strict", "boolean", f"{where}.strict")
    report_unknown(spec, _TOOL_FIELDS | known, where, ignored)
    out: dict[str, Any] = {"name": name, "input_schema": schema or {"type": "object", "properties": {}}}
    if description:
        out["description"] = description
    if strict:
        out["strict"] = True
    return out


def tool_choice(raw: Any, parallel: Any, named: tuple[str, ...]) -> dict[str, Any] | None:
    """The Messages ``tool_choice`` of ``tool_choice`` and
    ``parallel_tool_calls`` (None: the default, ``auto`` with parallel
    calls); ``named`` is the path of a named function's name in the choice
    (Chat ``function.name``, Responses ``name``)."""
    checked(True if parallel is None else parallel, "boolean", "parallel_tool_calls")
    choice: dict[str, Any]
    if raw is None or raw == "auto":
        choice = {"type": "auto"}
    elif raw in ("none", "required"):
        choice = {"type": "none" if raw == "none" else "any"}
    elif isinstance(raw, dict) and raw.get("type") == "function":
        name: Any = raw
        for key in named:
            name = name.get(key) if isinstance(name, dict) else None
        choice = {"type": "tool", "name": checked(name, "string", "tool_choice." + ".".join(named))}
    else:
        kind = raw.get("type") if isinstance(raw, dict) else raw
        raise bad(
            f"tool_choice: expected auto, none, required or a named function; got {kind!r}", "tool_choice"
        )
    if parallel is False and choice["type"] != "none":
        choice["disable_parallel_tool_use"] = True
    return None if raw is None and parallel is not False else choice


def effort_of(effort: Any, param: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(thinking, output_config.effort)`` of a reasoning effort: ``none``
    disables thinking; the others are adaptive thinking at that effort
    (``minimal``, which Messages lacks, as ``low``)."""
    if effort is None:
        return None, None
    if effort == "none":
        return {"type": "disabled"}, None
    if effort in _EFFORTS:
        return {"type": "adaptive"}, _EFFORTS[effort]
    raise bad(f"{param}: expected none, minimal, low, medium, high or xhigh", param)


def json_format(kind: Any, schema: Any, where: str, kind_at: str) -> dict[str, Any] | None:
    """``output_config.format`` of an output format of ``kind`` (``text``:
    None; ``json_object``: any object), its schema at ``where.schema``;
    ``kind_at`` is the path of ``kind`` (Chat's ``response_format.type``
    sits beside its ``json_schema``, not in it)."""
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_schema", "schema": {"type": "object"}}
    if kind == "json_schema":
        return {"type": "json_schema", "schema": checked(schema, "object", f"{where}.schema")}
    raise bad(f"{kind_at}: expected text, json_object or json_schema; got {kind!r}", kind_at)


def _number(raw: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = optional(raw, name, "number")
    if value is not None and not low <= value <= high:
        raise bad(f"{name}: expected a number between {low:g} and {high:g}", name)
    return None if value is None else float(value)


def sampling(raw: dict[str, Any], body: dict[str, Any], maximum: str, ignored: list[str]) -> None:
    """``max_tokens`` (from the field ``maximum``; :data:`DEFAULT_MAX_TOKENS`
    when absent), ``temperature`` (OpenAI's 0-2: above 1 is sent as 1 and
    reported) and ``top_p`` into ``body``."""
    most = optional(raw, maximum, "integer")
    if most is not None and most < 1:
        raise bad(f"{maximum}: expected an integer >= 1", maximum)
    body["max_tokens"] = most or DEFAULT_MAX_TOKENS
    temperature = _number(raw, "temperature", 0, 2)
    if temperature is not None:
        if temperature > 1:
            ignored.append(f"temperature {temperature:g} sent as 1 (Missive's range is 0-1)")
        body["temperature"] = min(temperature, 1.0)
    top_p = _number(raw, "top_p", 0, 1)
    if top_p is not None:
        body["top_p"] = top_p
