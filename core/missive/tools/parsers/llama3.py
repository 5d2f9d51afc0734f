"""Llama 3.1 / 3.2 / 3.3 JSON tool calls.

Meta's chat templates ask for ``{"name": function name, "parameters":
dictionary of argument name and its value}`` and render a past call as
``{"name": "...", "parameters": {...}}``; the model may put ``<|python_tag|>``
first, and writes several calls separated by ``;`` (Meta's llama-models
prompt format docs; vLLM's ``llama3_json`` parser accepts the same, and also
``"arguments"`` for ``"parameters"``, as here).

Rules (beyond :mod:`missive.driver.parsing`):

* the reply is parsed as calls when it *starts* (after whitespace) with
  ``{``, or wherever ``<|python_tag|>`` stands; other text is :class:`Text`;
* a reply starting with ``[`` or ``<|python_start|>`` is read by the
  ``llama4_pythonic`` parser: Llama 4 writes ``[f(x=1)]`` when prompted as its
  model card does, and JSON when prompted as its Hugging Face template does;
* whitespace around and between calls is dropped; after the last call,
  anything but whitespace (and ``;`` separators) is given back as Text;
* a malformed call or one to a name not offered gives its raw text back as
  Text, and everything after it is Text too (there is no closing tag to
  resynchronise on);
* ``"parameters"`` may also be a JSON string holding an object (decoded), and
  may be missing (empty arguments), as for Hermes.
"""

from __future__ import annotations

import json
from typing import Any

from ...driver.parsing import ParseEvent, Text, ToolParser
from ._common import CallObject, InvalidCall, find_marker, give_back
from .jsonscan import JsonScanner, JsonSyntaxError

__all__ = ["Llama3JsonParser"]

_START, _TEXT, _BEFORE_OBJ, _JSON, _AFTER = range(5)
_PYTHON_START = "<|python_start|>"
_WS = " \t\r\n"


class Llama3JsonParser(ToolParser):
    """Streaming parser of Llama 3.x JSON tool calls."""

    name = "llama3"
    space_before_call = False  # "text <|python_tag|>{...}": the space is the text's
    output_markers = ("<|python_tag|>",)
    call_separator = "; "
    PYTHON_TAG = "<|python_tag|>"
    ARGS_KEYS: tuple[str, ...] = ("parameters", "arguments")

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._state = _START
        self._new_call("")
        self._held = ""  # whitespace / separators after a call, given back if text follows
        #: The pythonic reader, once the reply turned out to be a pythonic
        #: call list (Llama 4 prompted as Meta's docs prompt it).
        self._pythonic: ToolParser | None = None

    def _new_call(self, raw: str) -> None:
        self._raw = raw
        self._json = ""
        self._scanner: JsonScanner | None = None
        self._call: CallObject | None = None

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f'{{"name": {json.dumps(name)}, "parameters": ', "}"

    def feed(self, text: str) -> list[ParseEvent]:
        if self._pythonic is not None:
            return self._pythonic.feed(text)
        self._buf += text
        out: list[ParseEvent] = []
        while self._step(out):
            pass
        if self._call is not None and self._state == _JSON:
            out += self._call.flush(self._json)
        return out

    def finish(self) -> list[ParseEvent]:
        if self._pythonic is not None:
            self._pythonic._cut = self._cut
            return self._pythonic.finish()
        out: list[ParseEvent] = []
        if self._state in (_START, _TEXT):
            if self._buf:
                out.append(Text(self._buf))
        elif self._cut and not self.strict:
            self._new_call("")  # cut by max_tokens inside a call: dropped (finish_cut)
        elif self._state in (_BEFORE_OBJ, _JSON):
            out += self._fail("unfinished tool call", self._raw + self._buf)
        # _AFTER: trailing whitespace and separators are dropped.
        self._buf = ""
        self._state = _TEXT
        return out

    def _fail(self, reason: str, raw: str) -> list[ParseEvent]:
        started = self._call is not None and self._call.started
        self._new_call("")
        self._state = _TEXT
        return give_back(self.strict, started, raw, reason)

    def _step(self, out: list[ParseEvent]) -> bool:
        buf = self._buf
        state = self._state
        if state == _TEXT:
            # <|python_tag|> (a special token) starts calls after text too
            # (SGLang's llama3 detector; Llama 3.3 writes "text <|python_tag|>{...}").
            i, marker = find_marker(buf, (self.PYTHON_TAG,))
            if i:
                out.append(Text(buf[:i]))
            if marker is None:
                self._buf = buf[i:]
                return False
            self._buf = buf[i + len(marker) :]
            self._new_call(marker)
            self._state = _BEFORE_OBJ
            return True
        if state == _START:
            stripped = buf.lstrip(_WS)
            if not stripped:
                return False
            if stripped.startswith("{"):
                self._buf = stripped
                self._state = _BEFORE_OBJ
            elif stripped.startswith(self.PYTHON_TAG):
                self._buf = stripped[len(self.PYTHON_TAG) :]
                self._new_call(self.PYTHON_TAG)
                self._state = _BEFORE_OBJ
            elif stripped.startswith(("[", _PYTHON_START)):
                # Llama 4 writes pythonic calls when prompted with Meta's
                # format (its model card): read by the pythonic parser.
                from .pythonic import Llama4PythonicParser

                self._pythonic = Llama4PythonicParser(
                    self.tool_names,
                    stream_arguments=self.stream_arguments,
                    strict=self.strict,
                    schemas=self.schemas,
                )
                self._buf = ""
                out += self._pythonic.feed(buf)
                return False
            elif self.PYTHON_TAG.startswith(stripped) or _PYTHON_START.startswith(stripped):
                return False
            else:
                self._state = _TEXT
            return True
        if state == _BEFORE_OBJ:
            stripped = buf.lstrip(_WS)
            self._raw += buf[: len(buf) - len(stripped)]
            self._buf = stripped
            if not stripped:
                return False
            if stripped[0] != "{":
                out += self._fail("expected a JSON object", self._raw)
                return True
            self._scanner = JsonScanner("{", track_levels=1)
            self._call = CallObject(
                level=1, args_keys=self.ARGS_KEYS, tool_names=self.tool_names, stream=self.stream_arguments
            )
            self._state = _JSON
            return True
        if state == _AFTER:
            i = 0
            while i < len(buf) and (buf[i] in _WS or buf[i] == ";"):
                i += 1
            self._held += buf[:i]
            self._buf = buf = buf[i:]
            if not buf:
                return False
            if buf[0] == "{" and ";" in self._held:
                self._held = ""
                self._new_call("")
                self._state = _BEFORE_OBJ
            else:  # text after the calls
                self._buf = self._held + buf
                self._held = ""
                self._state = _TEXT
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
            out += self._fail(f"invalid JSON in tool call ({exc})", self._raw)
            return True
        self._json += buf[:n]
        self._raw += buf[:n]
        self._buf = buf[n:]
        out += self._call.on_events(self._scanner.events, self._json)
        self._scanner.events.clear()
        if not self._scanner.done:
            return False
        try:
            out += self._call.complete(self._json)
        except InvalidCall as exc:
            out += self._fail(str(exc), self._raw)
            return True
        self._new_call("")
        self._state = _AFTER
        return True
