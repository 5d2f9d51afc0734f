"""Llama 4 pythonic tool calls (``llama4_pythonic``).

Syntax, from the Llama 4 model card's zero-shot function calling format
(``[func_name1(param1=value1, param2=value2), func_name2(...)]``), vLLM's
``examples/tool_chat_template_llama4_pythonic.jinja`` and
``llama4_pythonic_tool_parser.py``::

    [get_weather(city="Paris", days=3), search(q="rain")]

optionally between ``<|python_start|>`` and ``<|python_end|>``. Values are
Python literals (strings, numbers, ``True``/``False``/``None``, lists,
dicts); ``true``/``false``/``null`` are read too, so JSON values work.
(Llama 4's own Hugging Face template asks for Llama 3's JSON form instead,
which the ``llama3`` parser reads.)

Rules (as the ``llama3`` parser's): the reply is read as calls only when it
starts (after whitespace) with ``[`` or ``<|python_start|>``; a list that
turns out not to be calls to offered tools is given back as text, and so is
anything once the start cannot be a call (``[1]``, ``[see](url)``). Calls are
emitted when their list closes; text after it stays text, and a further list
right after is read as calls too.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from ...driver.parsing import CallArgs, CallEnd, CallStart, ParseEvent, Text
from ._common import InvalidCall, SteppedParser, give_back
from .values import arguments_json

__all__ = ["Llama4PythonicParser"]

_START, _CALLS, _TEXT = range(3)
_OPEN_TAG = "<|python_start|>"
_CLOSE_TAG = "<|python_end|>"
#: A buffer that may still be the start of a call list.
_PREFIX = re.compile(r"\s*(?:<\|python_start\|>\s*)?\[\s*(?:[A-Za-z_][\w.]*\s*)?$")
#: A buffer that has committed to a call list (``[name(``).
_COMMITTED = re.compile(r"\s*(?:<\|python_start\|>\s*)?\[\s*[A-Za-z_][\w.]*\s*\(")
_WORDS: dict[str, Any] = {"true": True, "false": False, "null": None}


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _WORDS:
        return _WORDS[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, value in zip(node.keys, node.values, strict=False):
            if key is None:
                raise InvalidCall("** in a dict")
            k = _literal(key)
            if not isinstance(k, str):
                raise InvalidCall("a dict key that is not a string")
            out[k] = _literal(value)
        return out
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError) as exc:
        raise InvalidCall(f"not a literal ({exc})") from None
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise InvalidCall("a value JSON cannot carry") from None
    return value


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    raise InvalidCall("a call of something that is not a name")


def parse_calls(source: str) -> list[tuple[str, str]]:
    """``[f(a=1), ...]`` as ``(name, arguments JSON)`` pairs.

    Raises:
        InvalidCall: not a list of calls with keyword literal arguments.
    """
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise InvalidCall(f"not a Python list ({exc})") from None
    if not isinstance(tree.body, ast.List) or not tree.body.elts:
        raise InvalidCall("not a list of calls")
    calls = []
    for element in tree.body.elts:
        if not isinstance(element, ast.Call) or element.args:
            raise InvalidCall("an element that is not a call with keyword arguments")
        pairs = []
        for keyword in element.keywords:
            if keyword.arg is None:
                raise InvalidCall("**kwargs in a call")
            pairs.append((keyword.arg, _literal(keyword.value)))
        calls.append((_name(element.func), arguments_json(pairs)))
    return calls


class Llama4PythonicParser(SteppedParser):
    """Streaming parser of ``[name(key=value, ...), ...]`` replies."""

    name = "llama4_pythonic"
    arguments_format = "parameters"
    raw_string_values = False
    parameter_separator = ", "
    call_separator = ""
    output_markers = (_OPEN_TAG,)

    def __init__(self, tool_names: frozenset[str], **options: Any) -> None:
        super().__init__(tool_names, **options)
        self._buf = ""
        self._state = _START
        self._after = False  # a call list just ended

    @classmethod
    def call_syntax(cls, name: str) -> tuple[str, str]:
        return f"[{name}(", ")]"

    @classmethod
    def parameter_syntax(cls, key: str, string: bool) -> tuple[str, str]:
        return f"{key}=", ""

    def finish(self) -> list[ParseEvent]:
        buf, self._buf = self._buf, ""
        if self._state == _CALLS and self._cut and not self.strict:
            return []  # cut by max_tokens inside the call list: dropped (finish_cut)
        if self._state == _CALLS:
            return give_back(self.strict, False, buf, "unfinished call list")
        if self._after and _CLOSE_TAG.startswith(buf.strip()):
            return []  # whitespace, or a <|python_end|> cut off by the end
        return [Text(buf)] if buf else []

    def _step(self, out: list[ParseEvent]) -> bool:
        buf = self._buf
        if not buf:
            return False
        if self._state == _TEXT:
            out.append(Text(buf))
            self._buf = ""
            return False
        if self._state == _START:
            if self._after:
                # Right after a call list: its <|python_end|> is not text.
                stripped = buf.lstrip()
                if stripped.startswith(_CLOSE_TAG):
                    self._buf = stripped[len(_CLOSE_TAG) :]
                    self._after = False
                    return True
                if _CLOSE_TAG.startswith(stripped):
                    return False
                self._after = False
            if _COMMITTED.match(buf):
                self._state = _CALLS
                return True
            if _PREFIX.match(buf) or (_OPEN_TAG.startswith(buf.lstrip()) and buf.strip()) or not buf.strip():
                return False
            self._state = _TEXT
            return True
        # _CALLS: try each closing bracket as the end of the list.
        start = buf.find("[")
        pos = buf.find("]", start)
        while pos >= 0:
            try:
                calls = parse_calls(buf[start : pos + 1])
            except InvalidCall:
                pos = buf.find("]", pos + 1)
                continue
            if any(name not in self.tool_names for name, _ in calls):
                out += give_back(self.strict, False, buf[: pos + 1], "a call to a tool not offered")
                self._state = _TEXT
            else:
                out += [ev for name, args in calls for ev in (CallStart(name), CallArgs(args), CallEnd())]
                self._state = _START
            self._buf = buf[pos + 1 :]
            self._after = True
            return True
        return False
