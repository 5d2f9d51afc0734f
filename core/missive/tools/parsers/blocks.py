"""The base of formats whose calls sit in delimited blocks, read call by call.

Most formats mark a tool call with literal delimiters (often special tokens):
a block opens (``<tool_call>``, ``<minimax:tool_call>``,
``<|tool_calls_section_begin|>``), holds one or more calls each ending with
its own marker (``</function>``, ``</invoke>``, ``<|tool_call_end|>``), and
closes. :class:`BlockParser` does the streaming part once for all of them:

* text outside blocks is :class:`~.base.Text`; a tail that may still become
  an opening marker is held back;
* inside a block, a call is read once its end marker arrived
  (:meth:`BlockParser.parse_call`, one per format) and emitted whole
  (``CallStart`` + one ``CallArgs`` + ``CallEnd``), so calls of a block
  stream one by one; whitespace between calls is not text;
* a call that does not parse, or names a tool not offered, is given back as
  the raw text from the block's unread part on (its opening marker included
  when it is the block's first call), and what follows is text again; with
  ``strict`` (constrained output) it raises :class:`~.base.MalformedToolCall`;
* at the end of the generation, a block whose closing markers were cut off
  (a backend stopping on them) still yields its last call when that call is
  complete up to them; a call cut inside (``max_tokens`` in a value) is
  given back, never completed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._common import InvalidCall, SteppedParser, find_marker, give_back
from .base import CallArgs, CallEnd, CallStart, ParseEvent, Text

__all__ = ["BlockParser", "ParsedCall"]

#: One call read from a block: its name and the JSON text of its arguments object.
ParsedCall = tuple[str, str]

_WS = " \t\r\n"


class BlockParser(SteppedParser):
    """Streaming parser of calls in delimited blocks (see the module doc).

    Subclasses set :attr:`BLOCKS`, :attr:`CALL_END` and implement
    :meth:`parse_call`.
    """

    #: Opening marker -> closing marker of a block. An empty closing marker:
    #: the block is the one call that the opening marker starts.
    BLOCKS: ClassVar[Mapping[str, str]] = {}
    #: Opening markers that are part of the first call's text (``<function=``
    #: written without Qwen's ``<tool_call>`` around it).
    KEEP_OPENER: ClassVar[frozenset[str]] = frozenset()
    #: Marker that ends one call inside a block; None: the closing marker ends
    #: the block's only call.
    CALL_END: ClassVar[str | None] = None

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._opener: str | None = None
        self._pending = ""  # raw text of the block read but not yet part of an emitted call
        self._calls = 0  # calls emitted from the current block

    def parse_call(self, text: str, opener: str) -> list[ParsedCall]:
        """The call(s) written as ``text`` (between the previous call's end,
        or the block's opening marker, and this call's end marker, both
        excluded; leading whitespace removed).

        Raises:
            InvalidCall: not a valid call to an offered tool.
        """
        raise NotImplementedError

    def finish(self) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        buf, self._buf = self._buf, ""
        if self._opener is None:
            if buf:
                out.append(Text(buf))
            return out
        opener = self._opener
        body = buf.strip(_WS)
        for marker in (self.CALL_END, self.BLOCKS[opener]):
            # A closing marker cut off by the end of the generation.
            if marker and body:
                for k in range(len(marker), 0, -1):
                    if body.endswith(marker[:k]):
                        body = body[: len(body) - k].rstrip(_WS)
                        break
        if body:
            try:
                calls = self._checked(body, opener)
            except InvalidCall as exc:
                return out + self._fail(str(exc), self._pending + buf)
            out += self._emit(calls)
        elif not self._calls:
            return out + self._fail("empty tool call block", self._pending + buf)
        self._reset()
        return out

    # -- internals ------------------------------------------------------------

    def _reset(self) -> None:
        self._opener = None
        self._pending = ""
        self._calls = 0

    def _fail(self, reason: str, raw: str) -> list[ParseEvent]:
        self._reset()
        return give_back(self.strict, False, raw, reason)

    def _checked(self, text: str, opener: str) -> list[ParsedCall]:
        calls = self.parse_call(text, opener)
        if not calls:
            raise InvalidCall("no call")
        for name, _ in calls:
            if name not in self.tool_names:
                raise InvalidCall(f"tool {name!r} was not offered")
        return calls

    def _emit(self, calls: list[ParsedCall]) -> list[ParseEvent]:
        self._calls += len(calls)
        self._pending = ""
        return [ev for name, args in calls for ev in (CallStart(name), CallArgs(args), CallEnd())]

    def _step(self, out: list[ParseEvent]) -> bool:
        """Process what the buffer allows; True if the state moved on."""
        buf = self._buf
        if self._opener is None:
            i, marker = find_marker(buf, tuple(self.BLOCKS))
            if i:
                out.append(Text(buf[:i]))
            if marker is None:
                self._buf = buf[i:]
                return False
            self._opener = marker
            if marker in self.KEEP_OPENER:
                self._buf = buf[i:]
            else:
                self._pending = marker
                self._buf = buf[i + len(marker) :]
            return True
        opener = self._opener
        close = self.BLOCKS[opener]
        if not (opener in self.KEEP_OPENER and not self._calls):
            stripped = buf.lstrip(_WS)
            self._pending += buf[: len(buf) - len(stripped)]
            self._buf = buf = stripped
        if not buf:
            return False
        if self._calls and not close:
            self._reset()  # a one-call block is over
            return True
        if close and buf.startswith(close):
            self._buf = buf[len(close) :]
            if not self._calls:
                out += self._fail("empty tool call block", self._pending + close)
            else:
                self._reset()
            return True
        if close and close.startswith(buf):
            return False
        end = self.CALL_END or close
        j = buf.find(end)
        if j < 0:
            return False
        consumed = j + len(end)
        try:
            calls = self._checked(buf[:j], opener)
        except InvalidCall as exc:
            self._buf = buf[consumed:]
            out += self._fail(str(exc), self._pending + buf[:consumed])
            return True
        self._buf = buf[consumed:]
        out += self._emit(calls)
        if self.CALL_END is None:
            self._reset()  # the closing marker ended the block's only call
        return True
