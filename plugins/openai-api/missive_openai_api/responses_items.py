"""A Responses request's ``input`` items as Messages turns (:mod:`.responses_request`
translates the rest of the request).

The item types are OpenAI's (API reference, "Create a model response",
``input``; the ``openai`` SDK 3.57.0's ``ResponseInputItemParam``):

* ``message`` items: ``user`` with ``input_text``/``input_image`` parts,
  ``assistant`` with ``output_text``/``refusal`` parts, ``system``/``developer``
  (leading ones join ``system``, later ones are mid-conversation ``system``
  messages);
* ``function_call`` (``tool_use`` blocks, ``arguments`` parsed; one with a
  ``namespace`` names the tool its namespace's function is offered as:
  :mod:`.responses_tools`) and
  ``function_call_output`` (``tool_result`` blocks), ``call_id`` the id
  (sent as an allowed id when it is not one: :class:`.turns.ToolIds`);
* ``reasoning`` items carrying ``encrypted_content`` (``thinking`` blocks
  with it as their signature: the core keeps those it signed; without it
  they are left out);

``web_search_call`` items (a search Missive's web search ran, sent back)
hold no results to show again: left out and reported. Consecutive items of
one side merge into one turn. Fields of an item or
part the translation does not read (besides ``id`` and ``status``, which
items sent back carry) are reported in ``missive-ignored``.
"""

from __future__ import annotations

from typing import Any

from .common import bad, checked, image_block, optional, report_unknown, text_of, tool_use, user_blocks
from .responses_tools import flat_name
from .turns import Origin, ToolIds, Turns

__all__ = ["items"]

_CALL_ORIGIN = {"id": "call_id", "name": "name", "input": "arguments"}
_RESULT_ORIGIN = {"tool_use_id": "call_id", "content": "output"}
#: The fields read of each item type (``id`` and ``status``: an output item sent back).
_ITEM_FIELDS = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "call_id", "name", "namespace", "arguments", "id", "status"}),
    # name and namespace repeat the call's, which call_id names
    "function_call_output": frozenset({"type", "call_id", "output", "id", "status", "name", "namespace"}),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
}
#: Text part types by role: OpenAI's input content parts are ``input_text``
#: (and, in an assistant message sent back, ``output_text``/``refusal``); a
#: ``text`` part is Chat's, and OpenAI refuses it in a Responses input.
_SYSTEM_KINDS = ("input_text",)
_ASSISTANT_KINDS = ("output_text", "refusal", "input_text")


def _image(part: dict[str, Any], at: str, ignored: list[str]) -> tuple[dict[str, Any], Origin]:
    if part.get("file_id") is not None and part.get("image_url") is None:
        raise bad(f"{at}.file_id: file ids are not supported; send image_url", f"{at}.file_id")
    url = checked(part.get("image_url"), "string", f"{at}.image_url")
    report_unknown(part, frozenset({"type", "image_url", "file_id", "detail"}), at, ignored)
    block = image_block(url, f"{at}.image_url", data_param=f"{at}.image_url")
    return block, Origin(at, {"source": "image_url"})


def _user_blocks(content: Any, where: str, ignored: list[str]) -> list[tuple[dict[str, Any], Origin]]:
    return user_blocks(content, where, ("input_text",), ("input_image", _image), ignored)


def _call_output(item: dict[str, Any], where: str, ids: ToolIds, ignored: list[str]) -> Any:
    call_id = checked(item.get("call_id"), "string", f"{where}.call_id")
    output = item.get("output")
    content: Any = (
        output
        if isinstance(output, str)
        else [b for b, _ in _user_blocks(output, f"{where}.output", ignored)]
    )
    block = {"type": "tool_result", "tool_use_id": ids.inward(call_id), "content": content}
    return block, Origin(where, _RESULT_ORIGIN)


def _call_name(item: dict[str, Any], where: str) -> Any:
    """The Messages tool name of a ``function_call`` item: its ``name``, or
    for a call with a ``namespace`` the name that namespace's function is
    offered under (:func:`.responses_tools.flat_name`)."""
    namespace = optional(item, "namespace", "string", f"{where}.namespace")
    name = item.get("name")
    if namespace is None or not isinstance(name, str):
        return name
    return flat_name(namespace, name)


def _reasoning(item: dict[str, Any], where: str) -> list[tuple[dict[str, Any], Origin]]:
    signature = optional(item, "encrypted_content", "string", f"{where}.encrypted_content")
    if not signature:
        return []  # nothing the model can be shown again (the core keeps only signed thinking)
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list):
        raise bad(f"{where}.content: expected a list", f"{where}.content")
    text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
    return [({"type": "thinking", "thinking": text, "signature": signature}, Origin(where))]


def _message(item: dict[str, Any], where: str, ignored: list[str]) -> tuple[str, list[Any]]:
    """``(role, blocks)`` of a user or assistant message item."""
    role, content = item.get("role"), item.get("content")
    if role == "user":
        return "user", _user_blocks(content, f"{where}.content", ignored)
    if role == "assistant":
        text = text_of(content, f"{where}.content", _ASSISTANT_KINDS, ignored)
        return "assistant", [({"type": "text", "text": text}, Origin(f"{where}.content"))] if text else []
    raise bad(
        f"{where}.role: expected one of user, assistant, system, developer; got {role!r}", f"{where}.role"
    )


def items(
    raw: Any, *, leading: bool, ids: ToolIds, ignored: list[str]
) -> tuple[list[tuple[str, str]], Turns]:
    """``(system texts with their paths, turns)`` of ``input``; ``leading``:
    system items before the first other item join ``system``."""
    if isinstance(raw, str):
        turns = Turns()
        turns.add("user", [({"type": "text", "text": raw}, Origin("input"))], "input")
        return [], turns.non_empty()  # "" or "   ": the user turn is sent as "." (Turns.non_empty)
    if not isinstance(raw, list) or not raw:
        raise bad("input: expected a string or a non-empty list of items", "input")
    system: list[tuple[str, str]] = []
    turns = Turns()
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise bad(f"{where}: expected an object", where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "item_reference":
            raise bad(f"{where}: item references are not supported; send the item itself", f"{where}.type")
        if kind == "web_search_call":
            ignored.append(f"{where} (web_search_call)")  # no results in it to show the model again
            continue
        if kind not in _ITEM_FIELDS:
            raise bad(f"{where}.type: input item type {kind!r} is not supported", f"{where}.type")
        report_unknown(item, _ITEM_FIELDS[kind], where, ignored)
        if kind == "message" and item.get("role") in ("system", "developer"):
            turns.instruction(
                text_of(item.get("content"), f"{where}.content", _SYSTEM_KINDS, ignored),
                where,
                leading,
                system,
            )
            continue
        leading = False
        if kind == "message":
            role, blocks = _message(item, where, ignored)
            turns.add(role, blocks, where)
        elif kind == "function_call":
            name = _call_name(item, where)
            call = tool_use(item.get("call_id"), name, item.get("arguments"), where, _CALL_ORIGIN, ids)
            turns.add("assistant", [call], where)
        elif kind == "function_call_output":
            turns.add("user", [_call_output(item, where, ids, ignored)], where)
        else:
            turns.add("assistant", _reasoning(item, where), where)
    return [(t, w) for t, w in system if t], turns.non_empty()
