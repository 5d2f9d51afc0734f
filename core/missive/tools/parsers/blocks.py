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

from ...driver.parsing import CallArgs, CallEnd, CallStart, ParseEvent, Text
from ._common import InvalidCall, InvalidCallHeader, SteppedParser, find_marker, give_back

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
    #: What may follow a call's end marker (after whitespace) for it to end
    #: the call: the block's closing marker, the next call's opening one.
    #: An end marker followed by other text (and, where the block's close
    #: ends its one call, before which the call parses only by recovering a
    #: missing closing tag or not at all) is taken to sit inside a value (a
    #: model writing about the format: ``</function>`` in a file's content)
    #: while a later one ends the call; if none does,
    #: the first end marker before which the call parses is used at the end
    #: of the generation. Empty: the first end marker ends the call.
    FOLLOWERS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._opener: str | None = None
        self._pending = ""  # raw text of the block read but not yet part of an emitted call
        self._calls = 0  # calls emitted from the current block
        self._final = False  # finish() is reading: nothing more will come
        #: The call text handed to parse_call ended at an end marker (a
        #: closing tag missing inside it may be recovered), not at the end
        #: of the generation.
        self._bounded = True
        #: parse_call recovered a missing closing tag in the call it read.
        self._lenient = False

    def call_end(self, opener: str) -> str:
        """The marker ending a call in the block ``opener`` opened."""
        return self.CALL_END or self.BLOCKS[opener]

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
        if self._cut and self._opener is not None and not self.strict:
            # Cut by max_tokens inside a block: the unfinished call is dropped.
            self._buf = ""
            self._reset()
            return out
        self._final = True
        while self._step(out):
            pass
        self._final = False
        buf, self._buf = self._buf, ""
        if self._opener is None:
            if buf:
                out.append(Text(buf))
            return out
        opener = self._opener
        body = buf.strip(_WS)
        for marker in (self.call_end(opener), self.BLOCKS[opener]):
            # A closing marker cut off by the end of the generation.
            if marker and body:
                for k in range(len(marker), 0, -1):
                    if body.endswith(marker[:k]):
                        body = body[: len(body) - k].rstrip(_WS)
                        break
        if body:
            try:
                # Not bounded by an end marker: a value cut by the end of
                # the generation is not run to the end (never completed).
                self._bounded = False
                calls = self._checked(body, opener)
            except InvalidCall as exc:
                return out + self._fail(str(exc), self._pending + buf)
            finally:
                self._bounded = True
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
                raise InvalidCallHeader(f"tool {name!r} was not offered")
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
            # A one-call block is over. A closing marker right after it is
            # the model's, written without its opening marker (Qwen3-Coder's
            # bare <function=...></function></tool_call>): not text.
            stray = [c for c in self.BLOCKS.values() if c]
            if any(c.startswith(buf) and c != buf for c in stray) and not self._final:
                return False
            for c in stray:
                if buf.startswith(c):
                    self._buf = buf[len(c) :]
                    break
            self._reset()
            return True
        if close and buf.startswith(close):
            # A block without calls (Kimi-K2 writes one) says nothing: dropped.
            self._buf = buf[len(close) :]
            self._reset()
            return True
        if close and close.startswith(buf):
            return False
        found = self._find_call(buf, opener)
        if found is None:
            return False
        consumed, calls, error = found
        self._buf = buf[consumed:]
        if calls is None:
            out += self._fail(error, self._pending + buf[:consumed])
            return True
        out += self._emit(calls)
        if self.CALL_END is None:
            self._reset()  # the closing marker ended the block's only call
        return True

    def _follows(self, rest: str) -> bool | None:
        """Whether ``rest``, the text after an end marker, lets it end the
        call (see :attr:`FOLLOWERS`); None: not known yet."""
        if not self.FOLLOWERS:
            return True
        rest = rest.lstrip(_WS)
        if not rest:
            return True if self._final else None
        if any(rest.startswith(f) for f in self.FOLLOWERS):
            return True
        if any(f.startswith(rest) for f in self.FOLLOWERS):
            return True if self._final else None
        return False

    def _find_call(self, buf: str, opener: str) -> tuple[int, list[ParsedCall] | None, str] | None:
        """The first call in ``buf``: ``(characters consumed, calls, "")``,
        ``(consumed, None, reason)`` for a call that does not parse, or None
        until more text arrives (see :attr:`FOLLOWERS`)."""
        end = self.call_end(opener)
        fallback: tuple[int, list[ParsedCall] | None, str] | None = None
        start = 0
        while (j := buf.find(end, start)) >= 0:
            consumed = j + len(end)
            follows = self._follows(buf[consumed:])
            if follows is None:
                return None
            self._lenient = False
            try:
                calls = self._checked(buf[:j], opener)
            except InvalidCall as exc:
                if follows or isinstance(exc, InvalidCallHeader):
                    return consumed, None, str(exc)
                start = j + 1
                continue
            if follows or (self.CALL_END is None and not self._lenient):
                # Where the block's close ends its one call (GLM, Gemma 4),
                # text may follow a call: one that parses without recovering
                # a missing closing tag ends here. Where a call has an end
                # marker of its own, only the block's close or the next call
                # follow it (</parameter> </function> inside a value parses
                # too, and is followed by more of the value).
                return consumed, calls, ""
            if fallback is None:
                fallback = (consumed, calls, "")
            start = j + 1
        if not self._final:
            return None
        close = self.BLOCKS[opener]
        c = buf.find(close) if self.CALL_END and close else -1
        if fallback is None and c >= 0 and end not in buf[:c]:
            # The generation ended with the block closed before the call's
            # end marker: a call written without it (DeepSeek-V4's
            # self-closing <｜DSML｜invoke name="f"/>) ends there, if it parses.
            try:
                return c, self._checked(buf[:c].rstrip(_WS), opener), ""
            except InvalidCall:
                pass
        return fallback
