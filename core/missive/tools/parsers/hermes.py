"""Hermes-style tool calls: Hermes 2/3, Qwen2.5, Qwen3 and many fine-tunes.

The model writes each call as a JSON object between tags, possibly several in
a row (format of NousResearch's Hermes function calling and of the Qwen2.5 /
Qwen3 chat templates, which render a past call as
``'<tool_call>\\n{"name": "' + name + '", "arguments": ' + args + '}\\n</tool_call>'``)::

    Let me check.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Rules (beyond :mod:`missive.driver.parsing`):

* text outside the tags is :class:`Text` (a partial ``<tool_call>`` tag is held back);
* ``"arguments"`` is an object, or (as some fine-tunes write it) a JSON string
  holding an object, which is then decoded; any other value is malformed;
  a call with no ``"arguments"`` member means empty arguments (``{}``);
* a call to a name not offered, malformed JSON, or anything but whitespace
  between the object and ``</tool_call>`` gives the raw text back as Text;
* ``</tool_call>`` may be missing at the very end of the generation (some
  backends stop on it): a complete, valid object then still counts.
"""

from __future__ import annotations

import json
from typing import Any

from ...driver.parsing import ParseEvent, Text, ToolParser
from ._common import CallObject, InvalidCall, find_marker, give_back
from .jsonscan import JsonScanner, JsonSyntaxError

__all__ = ["HermesParser"]

_TEXT, _OPENED, _JSON, _CLOSING = range(4)
_WS = " \t\r\n"


class HermesParser(ToolParser):
    """Streaming parser of ``<tool_call>{...}</tool_call>`` calls."""

    name = "hermes"
    output_markers = ("<tool_call>\n{", "<tool_call>{")
    call_separator = "\n"
    OPEN = "<tool_call>"
    CLOSE = "</tool_call>"
    ARGS_KEYS: tuple[str, ...] = ("arguments",)

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._reset()

    def _reset(self) -> None:
        self._state = _TEXT
        self._raw = ""  # raw text of the current call block
        self._json = ""  # the part fed to the scanner
        self._scanner: JsonScanner | None = None
        self._call: CallObject | None = None

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f'{cls.OPEN}\n{{"name": {json.dumps(name)}, "arguments": ', f"}}\n{cls.CLOSE}"

    def feed(self, text: str) -> list[ParseEvent]:
        self._buf += text
        out: list[ParseEvent] = []
        while self._step(out):
            pass
        if self._call is not None and self._state == _JSON:
            out += self._call.flush(self._json)
        return out

    def finish(self) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        if self._state == _TEXT:
            if self._buf:
                out.append(Text(self._buf))
        elif self._cut and not self.strict:
            pass  # cut by max_tokens inside a call: dropped (finish_cut)
        elif self._state == _CLOSING and self.CLOSE.startswith(self._buf.strip(_WS)):
            # Complete object, closing tag cut off by the end of generation.
            self._raw += self._buf
            out += self._complete()
        else:
            out += self._fail("unfinished tool call", self._raw + self._buf)
        self._buf = ""
        self._reset()
        return out

    def _fail(self, reason: str, raw: str) -> list[ParseEvent]:
        started = self._call is not None and self._call.started
        self._reset()
        return give_back(self.strict, started, raw, reason)

    def _complete(self) -> list[ParseEvent]:
        assert self._call is not None
        try:
            events = self._call.complete(self._json)
        except InvalidCall as exc:
            return self._fail(str(exc), self._raw)
        self._reset()
        return events

    def _step(self, out: list[ParseEvent]) -> bool:
        """Process what the buffer allows; True if the state moved on."""
        buf = self._buf
        if self._state == _TEXT:
            i, marker = find_marker(buf, (self.OPEN,))
            if i:
                out.append(Text(buf[:i]))
            if marker is None:
                self._buf = buf[i:]
                return False
            self._raw = marker
            self._buf = buf[i + len(marker) :]
            self._state = _OPENED
            return True
        if self._state in (_OPENED, _CLOSING):
            stripped = buf.lstrip(_WS)
            self._raw += buf[: len(buf) - len(stripped)]
            self._buf = buf = stripped
            if not buf:
                return False
            if self._state == _OPENED:
                if buf[0] != "{":
                    out += self._fail("expected '{' after <tool_call>", self._raw)
                    return True
                self._scanner = JsonScanner("{", track_levels=1)
                self._call = CallObject(
                    level=1,
                    args_keys=self.ARGS_KEYS,
                    tool_names=self.tool_names,
                    stream=self.stream_arguments,
                )
                self._state = _JSON
                return True
            if buf.startswith(self.CLOSE):
                self._raw += self.CLOSE
                self._buf = buf[len(self.CLOSE) :]
                out += self._complete()
                return True
            if self.CLOSE.startswith(buf):
                return False
            out += self._fail("text between the call object and </tool_call>", self._raw)
            return True
        # _JSON
        assert self._scanner is not None and self._call is not None
        try:
            n = self._scanner.feed(buf)
        except JsonSyntaxError as exc:
            n = exc.pos - len(self._json)
            self._json += buf[:n]
            self._raw += buf[:n]
            self._buf = buf[n:]
            out += self._call.on_events(self._scanner.events, self._json)
            out += self._fail(f"invalid JSON in tool call ({exc})", self._raw)
            return True
        self._json += buf[:n]
        self._raw += buf[:n]
        self._buf = buf[n:]
        out += self._call.on_events(self._scanner.events, self._json)
        self._scanner.events.clear()
        if self._scanner.done:
            self._state = _CLOSING
            return True
        return False
