"""The Messages turns an OpenAI request's messages (or items) become, with
where each part came from, and the tool-call ids the Messages API allows.

Both doors merge consecutive messages of one side into one turn (a run of
``role: "tool"`` messages and a user message is one user turn) and pull the
leading system messages out into ``system``, so a Messages index is not the
request's: :class:`Turns` keeps, for each Messages turn and block, its
:class:`Origin` in the request (``messages[3].tool_calls[0]``,
``input[2]``), which :mod:`.errors` uses to name the request's own ``param``
in the core's errors.

:class:`ToolIds`: the Messages API's tool-call ids match
``^[a-zA-Z0-9_-]+$`` (``missive.protocol.ids.TOOL_ID_PATTERN``, the pattern
of its ``tool_use.id``); OpenAI's ids are free strings, and histories from
other servers carry ids such as Kimi's ``functions.get_weather:0``. Those are
sent as allowed ids derived from them (the same id, in any request, gives
the same one: a call and its result still match, and a chain of responses
kept by id goes on), and named as the originals in what goes back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Origin", "Turns", "ToolIds", "bracketed", "EMPTY_TURN"]

#: The text of a turn whose every message had empty (or whitespace-only)
#: content: the least text the Messages API takes (:meth:`Turns.non_empty`).
EMPTY_TURN = "."

_ALLOWED_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_NOT_ALLOWED = re.compile(r"[^a-zA-Z0-9_-]")


def bracketed(parts: list[str]) -> str:
    """A Messages path's tail as the request's: ``["properties", "0"]`` ->
    ``.properties[0]`` (OpenAI writes indices in brackets)."""
    return "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts)


@dataclass(frozen=True)
class Origin:
    """Where a Messages block (or tool) came from in the request.

    Attributes:
        path: its path in the request (``messages[2].tool_calls[0]``).
        fields: the block's Messages field -> its path below ``path`` in the
            request (``{"input": "function.arguments"}``; ``""``: ``path``
            itself); a field not listed keeps its name.
        deep: the fields whose own paths go on in the request
            (``input_schema.type`` -> ``parameters.type``); below the others
            (an image's ``source.media_type``), the mapped field is named.
    """

    path: str
    fields: Mapping[str, str] = field(default_factory=dict)
    deep: frozenset[str] = frozenset()

    def at(self, tail: list[str]) -> str:
        """The request's path of ``tail``, a Messages path below the block."""
        if not tail:
            return self.path
        if tail[0] in self.fields:
            mapped = self.fields[tail[0]]
            below = bracketed(tail[1:]) if tail[0] in self.deep else ""
            return self.path + (f".{mapped}" if mapped else "") + below
        return self.path + bracketed(tail)


class Turns:
    """Messages turns being built, consecutive turns of one side (not
    ``system``) merged, with each turn's and block's :class:`Origin`."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        #: Per turn: the path of the first request message it holds.
        self.starts: list[str] = []
        #: Per turn, per block: its origin.
        self.origins: list[list[Origin]] = []

    def add(self, role: str, blocks: list[tuple[dict[str, Any], Origin]], where: str) -> None:
        """Append ``blocks`` (each with its origin) as a ``role`` turn, merged
        into the last turn when it is of the same side; ``where`` is the
        path of the request message they come from."""
        if self.messages and self.messages[-1]["role"] == role and role != "system":
            self.messages[-1]["content"].extend(b for b, _ in blocks)
            self.origins[-1].extend(o for _, o in blocks)
            return
        self.messages.append({"role": role, "content": [b for b, _ in blocks]})
        self.starts.append(where)
        self.origins.append([o for _, o in blocks])

    def instruction(self, text: str, where: str, leading: bool, system: list[tuple[str, str]]) -> None:
        """A ``system``/``developer`` message's ``text`` (at ``where``): while
        ``leading`` (before any other message) it joins ``system`` (as
        ``(text, its path)``), later it is a mid-conversation ``system``
        turn (left out when empty)."""
        if leading:
            system.append((text, f"{where}.content"))
        elif text:
            self.add("system", [({"type": "text", "text": text}, Origin(f"{where}.content"))], where)

    def extend(self, other: Turns) -> None:
        """Append ``other``'s turns, merging at the seam."""
        for message, start, origins in zip(other.messages, other.starts, other.origins, strict=True):
            self.add(message["role"], list(zip(message["content"], origins, strict=True)), start)

    def non_empty(self) -> Turns:
        """These turns, empty ones sent as OpenAI reads them (its API takes
        ``"content": ""`` and whitespace-only text, the Messages API does
        not: "all messages must have non-empty content", "text content
        must contain non-whitespace text"): whitespace-only text blocks left
        out; a user turn left with no block is :data:`EMPTY_TURN`'s text (so
        it stays the user's turn, and the conversation does not end on an
        assistant turn the core would read as a prefill); an assistant turn
        left with none is left out, as before (a ``reasoning`` item without
        ``encrypted_content`` is one; the user turns around it merge). A turn
        with any other content is sent as it was."""
        kept = Turns()
        for message, start, origins in zip(self.messages, self.starts, self.origins, strict=True):
            blocks = [
                (b, o)
                for b, o in zip(message["content"], origins, strict=True)
                if b.get("type") != "text" or b["text"].strip()
            ]
            if not blocks:
                if message["role"] != "user":
                    continue
                blocks = [({"type": "text", "text": EMPTY_TURN}, Origin(start))]
            kept.add(message["role"], blocks, start)
        return kept

    @classmethod
    def of(cls, messages: list[dict[str, Any]], where: str) -> Turns:
        """Turns of Messages ``messages`` that all come from ``where`` (a
        kept conversation: ``previous_response_id``)."""
        turns = cls()
        for message in messages:
            turns.add(message["role"], [(b, Origin(where)) for b in message["content"]], where)
        return turns

    def start(self, index: int) -> str | None:
        return self.starts[index] if 0 <= index < len(self.starts) else None

    def origin(self, index: int, block: int) -> Origin | None:
        if 0 <= index < len(self.origins) and 0 <= block < len(self.origins[index]):
            return self.origins[index][block]
        return None


class ToolIds:
    """The ids of one request's tool calls, as the Messages API takes them
    (see the module doc); ids already allowed are sent as they are."""

    def __init__(self) -> None:
        self._originals: dict[str, str] = {}

    def inward(self, call_id: str) -> str:
        """The id sent for ``call_id``: itself when allowed, else its allowed
        characters and a digest of it (``functions_get_weather_0_1f2e3d4c``)."""
        if _ALLOWED_ID.match(call_id):
            return call_id
        digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
        sent = f"{_NOT_ALLOWED.sub('_', call_id)[:40]}_{digest}"
        self._originals[sent] = call_id
        return sent

    def outward(self, text: str) -> str:
        """``text`` (an error message) with each id sent for another named as that one."""
        for sent, original in self._originals.items():
            text = text.replace(sent, original)
        return text
