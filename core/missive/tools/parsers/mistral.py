"""Mistral ``[TOOL_CALLS]`` tool calls, both generations of the format.

* v3 tokenizers (Mistral-7B-Instruct-v0.3, Mixtral-8x22B, Mistral-Nemo): one
  JSON array after the token, ``[TOOL_CALLS] [{"name": "f", "arguments":
  {...}, "id": "abc123XYZ"}, ...]`` (the HF templates render history with
  ``"[TOOL_CALLS] ["`` and each call's ``function|tojson`` plus an ``id``);
* v11+ tokenizers (Mistral Small 3.1+, Devstral, Magistral, Ministral 3): one
  token per call, ``[TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}`` (HF
  templates: ``'[TOOL_CALLS]' + name + '[ARGS]' + arguments``); a
  ``[CALL_ID]id`` may sit between the name and ``[ARGS]``, and ``[ARGS]`` may
  be missing when the backend drops special tokens (``f{...}``), as vLLM's
  ``mistral_tool_parser.py`` also accepts.

Rules (beyond :mod:`missive.driver.parsing`):

* text outside calls is :class:`Text` (a partial ``[TOOL_CALLS]`` is held back);
* a v3 array is all or nothing: if any element is malformed or names a tool
  not offered, the whole ``[TOOL_CALLS] [...]`` text is given back as Text.
  With ``stream_arguments`` an element streams only while every earlier one
  was a valid call; a failure after that raises :class:`MalformedToolCall`;
* a malformed v11 call gives back its raw text up to the character that broke
  it; what follows is parsed as text again.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ...driver.parsing import CallArgs, CallEnd, CallStart, MalformedToolCall, ParseEvent, Text, ToolParser
from ._common import CallObject, InvalidCall, find_marker, give_back
from .jsonscan import JsonScanner, JsonSyntaxError, loads_strict

__all__ = ["MistralParser", "MistralV3Parser"]

_TEXT, _AFTER_BOT, _NAME, _MARKER, _CALL_ID, _BEFORE_ARGS, _ARGS, _ARRAY = range(8)
_WS = " \t\r\n"
_NAME_RE = re.compile(r"[A-Za-z0-9_\-]*")
_MAX_NAME = 64


class MistralParser(ToolParser):
    """Streaming parser of Mistral ``[TOOL_CALLS]`` calls; grammars write the v11 form."""

    name = "mistral"
    output_markers = ("[TOOL_CALLS]",)
    call_separator = ""
    BOT = "[TOOL_CALLS]"
    ARGS = "[ARGS]"
    CALL_ID = "[CALL_ID]"

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._reset()

    def _reset(self) -> None:
        self._state = _TEXT
        self._raw = ""
        self._name = ""
        self._json = ""
        self._scanner: JsonScanner | None = None
        self._call: CallObject | None = None
        self._started = False  # some call of this block was emitted (streaming)
        self._element_start = 0
        self._elements: list[tuple[int, int]] = []  # v3: spans of complete elements
        self._pending: list[ParseEvent] = []  # v3 buffered mode: calls awaiting the array end
        self._array_ok = True
        self._emitted = 0  # v11 streaming: characters of the arguments emitted

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f"{cls.BOT}{name}{cls.ARGS}", ""

    def feed(self, text: str) -> list[ParseEvent]:
        self._buf += text
        out: list[ParseEvent] = []
        while self._step(out):
            pass
        if self._call is not None and self._state in (_ARGS, _ARRAY):
            out += self._call.flush(self._json)
        return out

    def finish(self) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        if self._state == _TEXT:
            if self._buf:
                out.append(Text(self._buf))
        elif not self._cut or self.strict:  # cut by max_tokens inside a call: dropped (finish_cut)
            out += self._fail("unfinished tool call", self._raw + self._buf)
        self._buf = ""
        self._reset()
        return out

    def _fail(self, reason: str, raw: str) -> list[ParseEvent]:
        started = self._started or (self._call is not None and self._call.started)
        self._reset()
        return give_back(self.strict, started, raw, reason)

    def _consume(self, n: int) -> None:
        self._raw += self._buf[:n]
        self._buf = self._buf[n:]

    def _step(self, out: list[ParseEvent]) -> bool:
        buf = self._buf
        state = self._state
        if state == _TEXT:
            i, marker = find_marker(buf, (self.BOT,))
            if i:
                out.append(Text(buf[:i]))
            if marker is None:
                self._buf = buf[i:]
                return False
            self._buf = buf[i:]
            self._raw = ""
            self._consume(len(marker))
            self._state = _AFTER_BOT
            return True
        if state == _AFTER_BOT:
            stripped = buf.lstrip(_WS)
            self._consume(len(buf) - len(stripped))
            if not stripped:
                return False
            if stripped[0] == "[":
                self._scanner = JsonScanner("[", track_levels=2)
                self._state = _ARRAY
            else:
                self._state = _NAME
            return True
        if state == _NAME:
            n = _NAME_RE.match(buf).end()  # type: ignore[union-attr]
            self._name += buf[:n]
            self._consume(n)
            if len(self._name) > _MAX_NAME:
                out += self._fail("tool name too long", self._raw)
                return True
            if not self._buf:
                return False
            if not self._name:
                out += self._fail("expected a tool name after [TOOL_CALLS]", self._raw)
            elif self._buf[0] == "{":
                self._state = _BEFORE_ARGS
            elif self._buf[0] == "[":
                self._state = _MARKER
            else:
                out += self._fail("unexpected text after the tool name", self._raw)
            return True
        if state in (_MARKER, _CALL_ID):
            markers = (self.ARGS,) if state == _CALL_ID else (self.ARGS, self.CALL_ID)
            if state == _CALL_ID:
                n = _NAME_RE.match(buf).end()  # type: ignore[union-attr]
                self._consume(n)
                buf = self._buf
            for marker in markers:
                if buf.startswith(marker):
                    self._consume(len(marker))
                    self._state = _BEFORE_ARGS if marker == self.ARGS else _CALL_ID
                    return True
            if buf and any(m.startswith(buf) for m in markers):
                return False
            if not buf:
                return False
            out += self._fail("expected [ARGS]", self._raw)
            return True
        if state == _BEFORE_ARGS:
            if not buf:
                return False
            if buf[0] != "{":
                out += self._fail("expected a JSON object after [ARGS]", self._raw)
                return True
            self._scanner = JsonScanner("{", track_levels=0)
            self._json = ""
            if self.stream_arguments and self._name in self.tool_names:
                out.append(CallStart(self._name))
                self._started = True
            self._state = _ARGS
            return True
        assert self._scanner is not None
        try:
            n = self._scanner.feed(buf)
        except JsonSyntaxError as exc:
            n = exc.pos - len(self._json)
            self._json += buf[:n]
            self._consume(n)
            if state == _ARRAY:
                self._digest_array(out)
            out += self._fail(f"invalid JSON in tool call ({exc})", self._raw)
            return True
        self._json += buf[:n]
        self._consume(n)
        if state == _ARRAY:
            return self._digest_array(out)
        if self._started:
            out += self._flush_args()
        if not self._scanner.done:
            return False
        return self._complete_v11(out)

    # -- v11 ---------------------------------------------------------------

    def _flush_args(self) -> list[ParseEvent]:
        if len(self._json) > self._emitted:
            piece = self._json[self._emitted :]
            self._emitted = len(self._json)
            return [CallArgs(piece)]
        return []

    def _complete_v11(self, out: list[ParseEvent]) -> bool:
        try:
            if self._name not in self.tool_names:
                raise InvalidCall(f"tool {self._name!r} was not offered")
            if not isinstance(loads_strict(self._json), dict):
                raise InvalidCall("arguments are not a JSON object")
        except (InvalidCall, ValueError) as exc:
            out += self._fail(str(exc), self._raw)
            return True
        if self._started:
            out.append(CallEnd())
        else:
            out += [CallStart(self._name), CallArgs(self._json), CallEnd()]
        self._reset()
        return True

    # -- v3 ----------------------------------------------------------------

    def _digest_array(self, out: list[ParseEvent]) -> bool:
        """Follow the v3 array's elements; True when the array is complete."""
        assert self._scanner is not None
        for ev in self._scanner.events:
            if ev.level == 1 and ev.kind == "start":
                if self._json[ev.pos] != "{":
                    self._array_ok = False
                self._element_start = ev.pos
                stream = (
                    self.stream_arguments
                    and self._array_ok
                    and not self._pending
                    and (self._started or not self._elements)
                )
                self._call = CallObject(
                    level=2, args_keys=("arguments",), tool_names=self.tool_names, stream=stream
                )
            elif ev.level == 1 and ev.kind == "end":
                self._elements.append((self._element_start, ev.pos))
                call, self._call = self._call, None
                if call is None:
                    continue
                try:
                    events = call.complete(self._json, self._element_start, ev.pos)
                except InvalidCall:
                    if self._started:
                        raise MalformedToolCall("invalid element in a streamed [TOOL_CALLS] array") from None
                    self._array_ok = False
                    continue
                if call.started:
                    self._started = True
                    out += events
                else:
                    self._pending += events
            elif ev.level == 2 and self._call is not None:
                new = self._call.on_events([ev], self._json)
                if self._call.started:
                    self._started = True
                out += new
        self._scanner.events.clear()
        if not self._scanner.done:
            return False
        if self._array_ok and self._elements:
            out += self._pending
            self._reset()
        else:
            out += self._fail("invalid [TOOL_CALLS] array", self._raw)
        return True


class MistralV3Parser(MistralParser):
    """The same parser; grammars write the v3 array form, one call per array
    (``[TOOL_CALLS][{"name": "f", "arguments": {...}}]``), for models whose
    tokenizer predates ``[ARGS]``."""

    name = "mistral_v3"

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f'{cls.BOT}[{{"name": {json.dumps(name)}, "arguments": ', "}]"
