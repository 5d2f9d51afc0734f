"""An incremental JSON scanner: where a JSON value ends, and whether what came
so far can still become valid JSON.

The tool parsers feed it the model's text piece by piece. It accepts exactly
the grammar of RFC 8259 (https://www.rfc-editor.org/rfc/rfc8259), the same
text :func:`json.loads` accepts except the ``NaN``/``Infinity`` extensions,
which are rejected: a raw control character inside a string, a trailing comma,
a bare word or a leading zero is refused at the character that makes it
invalid, so a parser can give up on a call as soon as it cannot be JSON.

Besides validity it reports the *structure* the parsers need, as
:attr:`JsonScanner.events`: where each value inside the top-level container
(and one level deeper) starts and ends, with its object key or array index.
That is how a parser knows the ``"name"`` of a call before its
``"arguments"`` start, and which characters are the arguments object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["JsonScanner", "JsonSyntaxError", "ScanEvent", "loads_strict"]

_WS = frozenset(" \t\n\r")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrt')

# Scanner states.
_VALUE, _ARR_FIRST, _OBJ_FIRST, _OBJ_KEY, _COLON, _AFTER, _STRING, _ESC, _UHEX, _NUM, _LIT, _DONE = range(12)
# Number sub-states (RFC 8259 section 6); the "end" ones may be followed by a delimiter.
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_CAN_END = frozenset({_N_ZERO, _N_INT, _N_FRAC, _N_EXP})

Key = str | int | None


class JsonSyntaxError(ValueError):
    """The text cannot be (the start of) a JSON value.

    Attributes:
        pos: index, counted from the first character fed, of the offending character.
    """

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at character {pos}")
        self.pos = pos


@dataclass(frozen=True, slots=True)
class ScanEvent:
    """A value started (``kind="start"``, ``pos`` = its first character) or
    ended (``kind="end"``, ``pos`` = one past its last character).

    ``level`` is the nesting depth of the container holding the value (0 for
    the top-level value itself, 1 for members of the top-level container...);
    ``key`` is the member's object key (decoded) or array index, None at level 0.
    """

    kind: str
    level: int
    key: Key
    pos: int


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def loads_strict(text: str) -> object:
    """:func:`json.loads` without the ``NaN``/``Infinity`` extensions.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError`` is a subclass).
    """
    return json.loads(text, parse_constant=_reject_constant)


class JsonScanner:
    """Validates one JSON value character by character.

    Args:
        openers: characters the top-level value may start with (``"{"`` for an
            object only, ``"{["`` for an object or array). Leading whitespace is
            allowed. Scalars at top level are not supported (their end cannot be
            known before the next character).
        track_levels: report :class:`ScanEvent` for values up to this level.
    """

    def __init__(self, openers: str = "{", *, track_levels: int = 2) -> None:
        self.openers = openers
        self.track_levels = track_levels
        self.pos = 0
        self.events: list[ScanEvent] = []
        self._stack: list[list[Key | str]] = []  # [kind "o"/"a", current key or index]
        self._state = _VALUE
        self._is_key = False
        self._key_chars: list[str] = []
        self._hex_left = 0
        self._num = _N_INT
        self._lit = ""

    @property
    def done(self) -> bool:
        """The top-level value is complete; further input is not consumed."""
        return self._state == _DONE

    @property
    def depth(self) -> int:
        """How many containers are open."""
        return len(self._stack)

    def feed(self, text: str) -> int:
        """Consume ``text`` until the top-level value is complete.

        Returns:
            How many characters were consumed (``len(text)`` unless the value
            completed before the end of ``text``).

        Raises:
            JsonSyntaxError: a character makes the text invalid; the characters
                before it were consumed (``pos`` says which one failed).
        """
        for i, ch in enumerate(text):
            if self._state == _DONE:
                return i
            self._push(ch)
            self.pos += 1
        return len(text)

    # -- internals --------------------------------------------------------

    def _error(self, message: str) -> JsonSyntaxError:
        return JsonSyntaxError(message, self.pos)

    def _event(self, kind: str, level: int, key: Key, pos: int) -> None:
        if level <= self.track_levels:
            self.events.append(ScanEvent(kind, level, key, pos))

    def _current_key(self) -> Key:
        return self._stack[-1][1] if self._stack else None

    def _value_ended(self, end: int) -> None:
        self._event("end", len(self._stack), self._current_key(), end)
        self._state = _AFTER if self._stack else _DONE

    def _start_value(self, ch: str) -> None:
        if not self._stack and ch not in self.openers:
            raise self._error(f"expected one of {self.openers!r}, got {ch!r}")
        self._event("start", len(self._stack), self._current_key(), self.pos)
        if ch == "{":
            self._stack.append(["o", None])
            self._state = _OBJ_FIRST
        elif ch == "[":
            self._stack.append(["a", 0])
            self._state = _ARR_FIRST
        elif ch == '"':
            self._is_key = False
            self._state = _STRING
        elif ch == "-":
            self._num, self._state = _N_MINUS, _NUM
        elif ch == "0":
            self._num, self._state = _N_ZERO, _NUM
        elif ch in _DIGITS:
            self._num, self._state = _N_INT, _NUM
        elif ch in "tfn":
            self._lit = {"t": "rue", "f": "alse", "n": "ull"}[ch]
            self._state = _LIT
        else:
            raise self._error(f"unexpected {ch!r}")

    def _close(self) -> None:
        self._stack.pop()
        self._value_ended(self.pos + 1)

    def _push(self, ch: str) -> None:
        state = self._state
        if state == _STRING:
            if ch == '"':
                if self._is_key:
                    self._stack[-1][1] = json.loads('"' + "".join(self._key_chars) + '"')
                    self._state = _COLON
                else:
                    self._value_ended(self.pos + 1)
            elif ch == "\\":
                self._state = _ESC
                if self._is_key:
                    self._key_chars.append(ch)
            elif ch < " ":
                raise self._error("control character in string")
            elif self._is_key:
                self._key_chars.append(ch)
            return
        if state == _ESC:
            if ch == "u":
                self._hex_left, self._state = 4, _UHEX
            elif ch in _ESCAPES:
                self._state = _STRING
            else:
                raise self._error(f"invalid escape \\{ch}")
            if self._is_key:
                self._key_chars.append(ch)
            return
        if state == _UHEX:
            if ch not in _HEX:
                raise self._error("invalid \\u escape")
            self._hex_left -= 1
            if self._hex_left == 0:
                self._state = _STRING
            if self._is_key:
                self._key_chars.append(ch)
            return
        if state == _NUM:
            if self._number_char(ch):
                return
            if self._num not in _N_CAN_END:
                raise self._error("incomplete number")
            self._value_ended(self.pos)
            self._push(ch)  # the delimiter belongs to the container
            return
        if state == _LIT:
            if ch != self._lit[0]:
                raise self._error(f"unexpected {ch!r}")
            self._lit = self._lit[1:]
            if not self._lit:
                self._value_ended(self.pos + 1)
            return
        if state == _DONE:
            raise self._error("value already complete")
        if ch in _WS:
            return
        if state == _VALUE:
            self._start_value(ch)
        elif state == _ARR_FIRST:
            if ch == "]":
                self._close()
            else:
                self._start_value(ch)
        elif state in (_OBJ_FIRST, _OBJ_KEY):
            if ch == '"':
                self._is_key = True
                self._key_chars = []
                self._state = _STRING
            elif ch == "}" and state == _OBJ_FIRST:
                self._close()
            else:
                raise self._error(f"expected a key, got {ch!r}")
        elif state == _COLON:
            if ch != ":":
                raise self._error(f"expected ':', got {ch!r}")
            self._state = _VALUE
        else:  # _AFTER
            top = self._stack[-1]
            if ch == ",":
                if top[0] == "o":
                    self._state = _OBJ_KEY
                else:
                    top[1] += 1  # type: ignore[operator]
                    self._state = _VALUE
            elif (ch == "}" and top[0] == "o") or (ch == "]" and top[0] == "a"):
                self._close()
            else:
                raise self._error(f"unexpected {ch!r}")

    def _number_char(self, ch: str) -> bool:
        """Advance the number sub-state; False if ``ch`` is not part of the number."""
        n = self._num
        digit = ch in _DIGITS
        if n == _N_MINUS:
            if ch == "0":
                self._num = _N_ZERO
            elif digit:
                self._num = _N_INT
            else:
                raise self._error("expected a digit after '-'")
        elif n in (_N_ZERO, _N_INT):
            if digit and n == _N_INT:
                pass
            elif digit:
                raise self._error("leading zero")
            elif ch == ".":
                self._num = _N_DOT
            elif ch in "eE":
                self._num = _N_E
            else:
                return False
        elif n == _N_DOT:
            if not digit:
                raise self._error("expected a digit after '.'")
            self._num = _N_FRAC
        elif n == _N_FRAC:
            if ch in "eE":
                self._num = _N_E
            elif not digit:
                return False
        elif n == _N_E:
            if ch in "+-":
                self._num = _N_ESIGN
            elif digit:
                self._num = _N_EXP
            else:
                raise self._error("expected an exponent")
        elif n == _N_ESIGN:
            if not digit:
                raise self._error("expected an exponent digit")
            self._num = _N_EXP
        elif not digit:  # _N_EXP
            return False
        return True
