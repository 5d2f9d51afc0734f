"""gpt-oss tool calls in OpenAI's harmony format.

Source: openai/harmony ``docs/format.md``. A completion is a series of
messages ``<|start|>{header}<|message|>{content}<|end|>``; generation starts
after the prompt's ``<|start|>assistant``, so the first header comes without
it. The header names a channel (``<|channel|>final``) and, for a tool call, a
recipient ``to=functions.NAME``, in the role part or the channel part ("the
recipient might be defined in the role or channel section of the header"),
optionally with a content type (``<|constrain|>json``, or a bare ``json`` as the
HF chat template renders past calls). A call ends with the stop token
``<|call|>``, a final answer with ``<|return|>``::

    <|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>

Rules (beyond :mod:`missive.driver.parsing`):

* ``final`` and ``commentary`` messages without recipient (answers and the
  user-visible "preambles") are :class:`Text`; ``analysis`` messages are
  :class:`Reasoning` (the CoT, "not intended to be shown to end-users");
  headers and markers are never shown; text before any header is Text;
* a message to ``functions.NAME`` for an offered NAME is a call; its content
  must be one JSON object (whitespace around it allowed). A message to a
  function not offered, from another role, or with malformed JSON is given
  back whole as Text; one to a built-in tool (``python``, ``browser.*``:
  no ``functions.`` prefix) is dropped;
* ``<|call|>``, ``<|return|>`` and ``<|end|>`` all end a message where the
  next header or the end of the generation follows them (elsewhere they are
  text the model quoted), and so does the end of the generation (backends
  stop on ``<|call|>`` and may not show it); a ``<|start|>`` also ends the
  message before it.

The backend must render special tokens as text for this parser to see them.
"""  # noqa: E501 - the sample completion is one line, as the model writes it

from __future__ import annotations

import re
from typing import Any

from ...driver.parsing import (
    CallArgs,
    CallEnd,
    CallStart,
    MalformedToolCall,
    ParseEvent,
    Reasoning,
    Text,
    ToolParser,
)
from ._common import find_marker, give_back
from .jsonscan import JsonScanner, JsonSyntaxError

__all__ = ["HarmonyParser"]

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
TERMINATORS = ("<|end|>", "<|call|>", "<|return|>")
_LEADS = (" to=", "to=")  # a first header with the recipient in the role part
_MAX_HEADER = 1024
_WS = " \t\r\n"
_RECIPIENT = re.compile(r"(?:^|\s)to=([^\s<]+)")

_TEXT, _HEADER, _CONTENT = range(3)
# Message kinds.
_K_TEXT, _K_REASONING, _K_CALL, _K_RAW, _K_BUILTIN = range(5)


def parse_header(header: str) -> tuple[str, str | None, str | None]:
    """Split a harmony header into ``(role, channel, recipient)``.

    ``header`` is the text between ``<|start|>`` (or the start of generation)
    and ``<|message|>``, e.g. ``'assistant<|channel|>commentary to=functions.f <|constrain|>json'``
    or ``'assistant to=functions.f<|channel|>commentary json'``. Missing parts are
    ``''`` (role) or None.
    """
    flat = header.replace(CONSTRAIN, " ")
    role_part, has_channel, channel_part = flat.partition(CHANNEL)
    match = _RECIPIENT.search(flat)
    recipient = match.group(1) if match else None
    role_words = [w for w in role_part.split() if not w.startswith("to=")]
    role = role_words[0] if role_words else ""
    channel_words = [w for w in channel_part.split() if not w.startswith("to=")]
    channel = channel_words[0] if has_channel and channel_words else None
    return role, channel, recipient


class HarmonyParser(ToolParser):
    """Streaming parser of harmony messages (gpt-oss)."""

    name = "harmony"
    output_markers = ("<|channel|>",)
    call_separator = "<|start|>assistant"
    handles_reasoning = True  # analysis messages are Reasoning events

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._at_start = True
        self._final = False  # finish() is reading: nothing more will come
        self._reset()

    def _reset(self) -> None:
        self._state = _TEXT
        self._raw = ""
        self._kind = _K_TEXT
        self._name = ""
        self._content = ""
        self._scanner: JsonScanner | None = None
        self._started = False

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f"{CHANNEL}commentary to=functions.{name} {CONSTRAIN}json{MESSAGE}", "<|call|>"

    def feed(self, text: str) -> list[ParseEvent]:
        self._buf += text
        out: list[ParseEvent] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> list[ParseEvent]:
        out: list[ParseEvent] = []
        self._final = True
        try:
            while self._step(out):
                pass
        finally:
            self._final = False
        if self._state == _TEXT:
            if self._buf:
                out.append(Text(self._buf))
        elif self._state == _HEADER and self._cut and not self.strict:
            pass  # cut by max_tokens in a header: dropped (finish_cut)
        elif self._state == _HEADER:
            out += self._fail("unfinished message header", self._raw + self._buf)
        else:
            if self._kind == _K_CALL and not self._json_done():
                self._scan_call(out)
            self._take_content(self._buf, out)
            self._buf = ""
            out += self._end_message()
        self._buf = ""
        self._reset()
        return out

    def _fail(self, reason: str, raw: str) -> list[ParseEvent]:
        started = self._started
        self._reset()
        return give_back(self.strict, started, raw, reason)

    def _step(self, out: list[ParseEvent]) -> bool:
        buf = self._buf
        if self._state == _TEXT:
            if self._at_start:
                if not buf:
                    return False
                if any(buf.startswith(lead) for lead in _LEADS):
                    self._at_start = False
                    self._raw = ""
                    self._state = _HEADER
                    return True
                if any(lead.startswith(buf) for lead in _LEADS):
                    return False
                self._at_start = False
            i, marker = find_marker(buf, (START, CHANNEL))
            if i:
                out.append(Text(buf[:i]))
            self._buf = buf[i:]
            if marker is None:
                return False
            self._raw = ""
            if marker == START:
                self._raw = START
                self._buf = self._buf[len(START) :]
            self._state = _HEADER
            return True
        if self._state == _HEADER:
            i = buf.find(MESSAGE)
            stop, marker = find_marker(buf if i == -1 else buf[:i], (START,) + TERMINATORS)
            if marker is not None:
                # A header broken by another message or a terminator.
                self._buf = buf[stop:]
                out += self._fail("malformed message header", self._raw + buf[:stop])
                return True
            if i == -1:
                if len(buf) > _MAX_HEADER:
                    out += self._fail("message header too long", self._raw + buf)
                    return True
                return False
            header = buf[:i]
            self._raw += header + MESSAGE
            self._buf = buf[i + len(MESSAGE) :]
            self._begin_message(header, out)
            return True
        # _CONTENT
        if self._kind == _K_CALL and not self._json_done():
            self._scan_call(out)
            if not self._json_done() and self._kind == _K_CALL:
                return False
            return True
        i, marker = self._message_end(buf)
        self._take_content(buf[:i], out)
        self._buf = buf[i:]
        if marker is None:
            return False
        if marker != START:
            self._raw += marker
            self._buf = self._buf[len(marker) :]
        out += self._end_message()
        return True

    def _message_end(self, buf: str) -> tuple[int, str | None]:
        """Where the content in ``buf`` ends: ``(i, marker)``, or ``(safe, None)``
        when ``buf[:safe]`` is content and the rest must wait.

        A terminator ends the message where the next message's header, or
        the end of the generation, follows it; one followed by other text
        was written inside the content (a model quoting the format in its
        reasoning: those are ordinary text tokens there, not the special
        token), and is content."""
        at = 0
        while True:
            i, marker = find_marker(buf[at:], TERMINATORS + (START,))
            i += at
            if marker is None or marker == START or self._kind == _K_CALL:
                # After a call's complete arguments object a terminator is
                # the call's end.
                return i, marker
            rest = buf[i + len(marker) :].lstrip(_WS)
            if rest.startswith((START, CHANNEL)):
                return i, marker
            if not rest or START.startswith(rest) or CHANNEL.startswith(rest):
                return (i, marker) if self._final else (i, None)
            at = i + len(marker)

    def _json_done(self) -> bool:
        return self._scanner is not None and self._scanner.done

    def _scan_call(self, out: list[ParseEvent]) -> None:
        """Feed the call's arguments to the scanner: terminators inside JSON
        strings are text, and text that cannot be JSON ends the call early."""
        assert self._scanner is not None
        buf = self._buf
        if self._scanner.pos == 0:
            stripped = buf.lstrip(_WS)
            self._raw += buf[: len(buf) - len(stripped)]
            buf = stripped
        try:
            n = self._scanner.feed(buf)
        except JsonSyntaxError as exc:
            if self._started:
                raise MalformedToolCall(f"invalid JSON in a streamed call ({exc})") from None
            n = exc.pos - len(self._content)
            self._kind = _K_RAW  # given back whole when the message ends
        self._raw += buf[:n]
        self._content += buf[:n]
        if self._started and n:
            out.append(CallArgs(buf[:n]))
        self._buf = buf[n:]

    def _begin_message(self, header: str, out: list[ParseEvent]) -> None:
        role, channel, recipient = parse_header(header)
        self._state = _CONTENT
        if role not in ("", "assistant"):
            self._kind = _K_RAW
        elif recipient is None:
            self._kind = _K_REASONING if channel == "analysis" else _K_TEXT
        elif not recipient.startswith("functions."):
            self._kind = _K_BUILTIN
        elif recipient[len("functions.") :] in self.tool_names:
            self._kind = _K_CALL
            self._name = recipient[len("functions.") :]
            self._scanner = JsonScanner("{", track_levels=0)
            if self.stream_arguments:
                out.append(CallStart(self._name))
                self._started = True
        else:
            self._kind = _K_RAW

    def _take_content(self, piece: str, out: list[ParseEvent]) -> None:
        if not piece:
            return
        if self._kind == _K_TEXT:
            out.append(Text(piece))
        elif self._kind == _K_REASONING:
            out.append(Reasoning(piece))
        elif self._kind == _K_CALL and piece.strip(_WS):
            # Text after the arguments object.
            if self._started:
                raise MalformedToolCall("text after the arguments of a streamed call")
            self._kind = _K_RAW
            self._raw += piece
        else:
            self._raw += piece

    def _end_message(self) -> list[ParseEvent]:
        kind, raw = self._kind, self._raw
        if kind in (_K_TEXT, _K_REASONING):
            self._reset()
            return []
        if kind == _K_BUILTIN and not self.strict:
            # A call to a built-in tool (python, browser): not a function
            # the client offered or can run, and not answer text (llama.cpp
            # drops it too).
            self._reset()
            return []
        if kind == _K_BUILTIN:
            return self._fail("message to a built-in tool", raw)
        if kind == _K_RAW:
            return self._fail("message to a recipient that was not offered", raw)
        if not self._json_done():
            return self._fail("call arguments are not a JSON object", raw)
        if self._started:
            self._reset()
            return [CallEnd()]
        name, args = self._name, self._content
        self._reset()
        return [CallStart(name), CallArgs(args), CallEnd()]
