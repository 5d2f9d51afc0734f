"""``GET /v1/responses/{id}/input_items``: the items a kept response was
made from, listed a page at a time.

OpenAI's API reference ("List input items"; the ``openai`` SDK 3.57.0's
``InputItemListParams`` and ``ResponseItemList``): "Returns a list of input
items for a given response", a ``{"object": "list", "data", "first_id",
"last_id", "has_more"}`` page of ``ResponseItem`` objects; ``after`` ("An
item ID to list items after, used in pagination", the cursor the SDK's
``SyncCursorPage`` sends for the next page: the last item's ``id``),
``limit`` ("can range between 1 and 100, and the default is 20"), ``order``
(``asc`` or ``desc``, "Default is ``desc``"), ``include`` (as for creating
a response). ``before`` (an item ID to list items before) is taken too, as
OpenAI's other cursor lists take it.

Each listed item is a ``ResponseItem``: it has an ``id`` (the client's, or
one made from the response's id and the item's place) and a ``status``, a
message's content is a list of parts (a string becomes one ``input_text``,
or for an assistant message ``output_text``, part). The items are those
"used to generate this response": those of the responses it continued
(``previous_response_id``, their input and output, oldest first), then its
own input (:meth:`.responses_store.ResponseStore.input_items`).
"""

from __future__ import annotations

from typing import Any

from .common import bad

__all__ = ["listed_items", "page_of"]

#: The ``limit`` range and default (API reference, "List input items").
MAX_LIMIT, DEFAULT_LIMIT = 100, 20
_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def _parts(content: Any, role: Any) -> Any:
    if not isinstance(content, str):
        return content
    if role == "assistant":
        return [{"type": "output_text", "text": content, "annotations": []}]
    return [{"type": "input_text", "text": content}]


def listed_items(raw_input: Any, response_id: str) -> list[dict[str, Any]]:
    """The request's ``input`` (already checked by the translation) as
    ``ResponseItem`` objects of the response ``response_id``."""
    found = [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else list(raw_input)
    out = []
    suffix = response_id.removeprefix("resp_")
    for index, item in enumerate(found):
        kind = item.get("type") or "message"
        listed = {"type": kind, **item}
        listed.setdefault("id", f"{_PREFIX.get(kind, 'item')}_{suffix}i{index:03d}")
        listed.setdefault("status", "completed")
        if kind == "message":
            listed["content"] = _parts(item.get("content"), item.get("role"))
        if kind == "reasoning":
            listed.setdefault("summary", [])
        out.append(listed)
    return out


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise bad(f"limit: expected an integer from 1 to {MAX_LIMIT}; got {raw!r}", "limit")
    return limit


def _index(items: list[dict[str, Any]], item_id: str, name: str) -> int:
    for i, item in enumerate(items):
        if item.get("id") == item_id:
            return i
    raise bad(f"{name}: no input item of this response has the id '{item_id}'", name)


def page_of(items: list[dict[str, Any]], args: dict[str, str | None]) -> dict[str, Any]:
    """The page of ``items`` (oldest first) that the query ``args``
    (``after``, ``before``, ``limit``, ``order``) asks for.

    Raises:
        OpenAIRequestError: a ``limit`` out of its range, an ``order``
            other than ``asc``/``desc``, an ``after``/``before`` id not listed.
    """
    order = args.get("order") or "desc"
    if order not in ("asc", "desc"):
        raise bad(f"order: expected 'asc' or 'desc'; got {order!r}", "order")
    limit = _limit(args.get("limit"))
    ordered = items if order == "asc" else items[::-1]
    start, end = 0, len(ordered)
    if after := args.get("after"):
        start = _index(ordered, after, "after") + 1
    if before := args.get("before"):
        end = _index(ordered, before, "before")
    window = ordered[start:end]
    data = window[:limit] if not before or after else window[-limit:]
    has_more = len(window) > len(data)
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }
