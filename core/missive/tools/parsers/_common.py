"""Pieces the built-in parsers share: marker search with hold-back, and the
tracking of one ``{"name": ..., "arguments": {...}}`` call object."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from ...driver.parsing import CallArgs, CallEnd, CallStart, MalformedToolCall, ParseEvent, ToolParser
from .jsonscan import Key, ScanEvent, loads_strict

__all__ = [
    "find_marker",
    "InvalidCall",
    "InvalidCallHeader",
    "CallObject",
    "decode_arguments",
    "give_back",
    "SteppedParser",
]


def find_marker(buf: str, markers: Sequence[str]) -> tuple[int, str | None]:
    """Find the earliest complete marker in ``buf``.

    Returns:
        ``(index, marker)`` for the earliest (then longest) complete marker, or
        ``(safe, None)`` where ``buf[:safe]`` cannot be part of any marker and
        ``buf[safe:]`` (a proper prefix of some marker) must be held back.
    """
    best: tuple[int, str] | None = None
    for marker in markers:
        i = buf.find(marker)
        if i != -1 and (best is None or i < best[0] or (i == best[0] and len(marker) > len(best[1]))):
            best = (i, marker)
    if best is not None:
        return best
    n = len(buf)
    longest = max(len(m) for m in markers) - 1
    for k in range(min(n, longest), 0, -1):
        tail = buf[n - k :]
        if any(m.startswith(tail) for m in markers):
            return n - k, None
    return n, None


class InvalidCall(Exception):
    """A complete call object that is not a usable call (the reason is the message)."""


class InvalidCallHeader(InvalidCall):
    """A call whose head (its name) is not a call to an offered tool: no
    later end marker can make it one (:meth:`~missive.tools.parsers.blocks.BlockParser._find_call`
    gives it back at once)."""


def decode_arguments(raw_value: str) -> str:
    """The arguments JSON object text of a call, from the raw JSON text of its
    ``arguments`` value.

    An object is kept byte for byte (key order, escapes). A JSON string (some
    fine-tunes write ``"arguments": "{\\"city\\": \\"Paris\\"}"``) is decoded and
    used only if it holds a JSON object. Anything else is invalid.

    Raises:
        InvalidCall: not an object, nor a string holding one.
    """
    value = raw_value.strip()
    if value.startswith("{"):
        return value
    if value.startswith('"'):
        inner = loads_strict(value)
        assert isinstance(inner, str)
        try:
            decoded = loads_strict(inner)
        except ValueError:
            raise InvalidCall("arguments string is not JSON") from None
        if isinstance(decoded, dict):
            return inner.strip()
    raise InvalidCall("arguments is not a JSON object")


class CallObject:
    """Follows the scan events of one call object whose members sit at ``level``.

    Knows the ``name`` as soon as its string ends and, when streaming, emits
    :class:`CallStart` when the arguments object starts (only if the name came
    first and is offered) and :class:`CallArgs` as its characters arrive.

    Args:
        level: scan level of the object's members.
        name_key: member holding the tool name.
        args_keys: members that may hold the arguments (first present wins).
        tool_names: offered names.
        stream: stream arguments (``ToolParser.stream_arguments``).
    """

    def __init__(
        self,
        *,
        level: int,
        args_keys: tuple[str, ...],
        tool_names: frozenset[str],
        stream: bool,
        name_key: str = "name",
    ) -> None:
        self.level = level
        self.name_key = name_key
        self.args_keys = args_keys
        self.tool_names = tool_names
        self.stream = stream
        self.members: dict[Key, list[int]] = {}
        self.name: str | None = None
        self.started = False  # CallStart emitted
        self._streaming_key: str | None = None
        self._emitted_to = 0  # raw index up to which arguments were emitted
        self._args_done = False

    def on_events(self, events: Iterable[ScanEvent], raw: str) -> list[ParseEvent]:
        """Digest scan events (positions index ``raw``)."""
        out: list[ParseEvent] = []
        for ev in events:
            if ev.level != self.level:
                continue
            if ev.kind == "start":
                self.members[ev.key] = [ev.pos, -1]
                if (
                    self.stream
                    and not self.started
                    and ev.key in self.args_keys
                    and raw[ev.pos] == "{"
                    and self.name in self.tool_names
                ):
                    out.append(CallStart(self.name))
                    self.started = True
                    self._streaming_key = ev.key
                    self._emitted_to = ev.pos
            else:
                span = self.members.setdefault(ev.key, [ev.pos, -1])
                span[1] = ev.pos
                if ev.key == self.name_key and self.name is None and raw[span[0]] == '"':
                    self.name = json.loads(raw[span[0] : span[1]])
                if self.started and ev.key == self._streaming_key and not self._args_done:
                    if ev.pos > self._emitted_to:
                        out.append(CallArgs(raw[self._emitted_to : ev.pos]))
                    self._emitted_to = ev.pos
                    self._args_done = True
        return out

    def flush(self, raw: str) -> list[ParseEvent]:
        """Arguments characters that arrived since the last event (streaming only)."""
        if self.started and not self._args_done and len(raw) > self._emitted_to:
            piece = raw[self._emitted_to :]
            self._emitted_to = len(raw)
            return [CallArgs(piece)]
        return []

    def complete(self, raw: str, start: int = 0, end: int | None = None) -> list[ParseEvent]:
        """The object ``raw[start:end]`` is complete: validate it and emit the call.

        Returns:
            The remaining call events (``CallStart``/``CallArgs`` if not streamed, ``CallEnd``).

        Raises:
            InvalidCall: not a call to an offered tool (nothing was emitted for it).
            MalformedToolCall: invalid after its ``CallStart`` was emitted.
        """
        end = len(raw) if end is None else end
        try:
            obj = loads_strict(raw[start:end])
            if not isinstance(obj, dict):
                raise InvalidCall("call is not a JSON object")
            name = obj.get(self.name_key)
            if not isinstance(name, str):
                raise InvalidCall("call has no string name")
            if name not in self.tool_names:
                raise InvalidCall(f"tool {name!r} was not offered")
            key = next((k for k in self.args_keys if k in obj), None)
            if key is None:
                # A call without arguments: the unambiguous reading is an empty input.
                args = "{}"
            else:
                s, e = self.members[key]
                args = decode_arguments(raw[s:e])
        except (InvalidCall, ValueError) as exc:
            if self.started:
                raise MalformedToolCall(f"call changed after it was streamed: {exc}") from exc
            raise InvalidCall(str(exc)) from exc
        if self.started:
            if name != self.name or key != self._streaming_key or not self._args_done:
                raise MalformedToolCall("call object does not match the streamed call")
            return [CallEnd()]
        return [CallStart(name), CallArgs(args), CallEnd()]


def give_back(strict: bool, started: bool, raw: str, reason: str) -> list[ParseEvent]:
    """What a failed call becomes: its raw text as :class:`Text`, or
    :class:`MalformedToolCall` when output was constrained (``strict``) or the
    call's ``CallStart`` was already emitted (it cannot be retracted)."""
    from ...driver.parsing import Text

    if strict or started:
        raise MalformedToolCall(f"{reason}: {raw[:200]!r}")
    return [Text(raw)] if raw else []


class SteppedParser(ToolParser):
    """A parser that keeps unread text in ``_buf`` and reads it with
    ``_step`` until a step cannot go on."""

    _buf: str

    def feed(self, text: str) -> list[ParseEvent]:
        self._buf += text
        out: list[ParseEvent] = []
        while self._step(out):
            pass
        return out

    def _step(self, out: list[ParseEvent]) -> bool:
        """Read what the buffer allows, appending events to ``out``; True if
        the state moved on (another step may read more)."""
        raise NotImplementedError
