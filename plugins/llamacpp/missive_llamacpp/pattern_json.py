"""A ``pattern`` rewritten so its grammar can only write valid JSON strings.

llama-cpp-python's converter (``SchemaConverter._visit_pattern``) copies a
pattern's characters into the grammar of a JSON string as they are: ``.``
and ``[^a]`` admit a raw ``"`` (which ends the string early) or a raw control
character (RFC 8259 section 7 requires them escaped), and a literal ``"``
is written raw. Measured on SmolLM2: ``"pattern": "^\\"x\\"$"`` gave
``{"a": ""x""``. An escape it does not translate (``\\1``, ``\\D``) reaches
llama.cpp as grammar text it refuses.

:func:`json_safe` returns the pattern with every character set that could
produce one of those characters narrowed to exclude them (``.`` and negated
classes lose ``"``, ``\\`` and U+0000-U+001F, U+007F, as the converter's own
``char`` rule; ``\\s`` becomes a space), so the strings the grammar admits are
a subset of the pattern's; or None when the pattern needs such a character
(a literal quote, a backslash, ``\\n``, a class that names one) or uses an
escape the converter cannot translate: the caller then leaves the pattern
out of the grammar, as any keyword it does not enforce.
"""

from __future__ import annotations

import re

__all__ = ["json_safe"]

_QUANTIFIER = re.compile(r"\{\d*(?:,\d*)?\}")

#: What a JSON string holds only escaped (RFC 8259 section 7), as the
#: converter's ``char`` rule excludes it, written for a regex class.
_EXCLUDED = '"\\\\\\x00-\\x1F\\x7F'
_DOT = f"[^{_EXCLUDED}]"
#: Shorthand escapes the converter leaves as text, as classes of safe characters.
_SHORTHANDS = {"d": "[0-9]", "w": "[a-zA-Z0-9_]", "s": "[ ]", "D": f"[^0-9{_EXCLUDED}]",
               "W": f"[^a-zA-Z0-9_{_EXCLUDED}]", "S": f"[^ {_EXCLUDED}]"}  # fmt: skip
#: Escaped characters the converter itself unescapes (its
#: ``ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS``), and others written so it reads
#: them as the character: ``\\.`` as ``[.]`` (the converter would copy
#: ``\\.`` into the grammar, an escape llama.cpp refuses), punctuation raw.
_KEPT_ESCAPES = set("[]()|{}*+?")
_AS_CLASS = {".": "[.]", "$": "[$]"}
_RAW_ESCAPES = set("/-,:=!<>#&~'%@ _")
_PLAIN_ESCAPES = _KEPT_ESCAPES | set(_AS_CLASS) | _RAW_ESCAPES
_UNSAFE = {'"', "\\"}
#: Characters llama-cpp-python's ``_visit_pattern`` has no branch for outside
#: a class: it loops forever on ``^]$`` or ``^a}$`` (a regex that Python's
#: ``re`` reads as a literal ``]``/``}``), so such a pattern is left out.
_STRAY = {"]", "}"}


def _class_body(body: str, negated: bool) -> str | None:
    """A class's members written as llama.cpp's grammar reads them (it knows
    the escapes ``\\x \\u \\t \\r \\n \\\\ \\" \\[ \\]`` only; the
    converter copies a class as it is), or None. A positive class must admit
    none of ``"``, ``\\`` and the control characters (checked
    conservatively); a negated one has them added by the caller."""
    out: list[str] = []
    dash = False
    i = 0
    if not body or "[" in body.replace("\\[", ""):
        return None  # ``[]...]``, ``[[:alpha:]]``: classes the converter misreads (its loop hung on them)
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1] if i + 1 < len(body) else ""
            i += 2
            if nxt == "d":
                out.append("0-9")
            elif nxt == "w":
                out.append("a-zA-Z0-9_")
            elif nxt == "s" and negated:
                out.append(" ")
            elif nxt in ("[", "]") or (negated and nxt in ("\\", "n", "r", "t")):
                out.append("\\" + nxt)
            elif nxt == "-":
                dash = True
            elif nxt and nxt in _RAW_ESCAPES | set(".^$|?*+(){}"):
                out.append(nxt if nxt != "^" or out else "\\x5E")
            else:
                return None
            continue
        if not negated:
            if ch in _UNSAFE or ord(ch) < 0x20 or ord(ch) == 0x7F:
                return None
            if ch == "-" and out and i + 1 < len(body):
                low, high = ord(out[-1][-1]), ord(body[i + 1])
                if low <= 0x22 <= high or low <= 0x5C <= high:
                    return None
        out.append(ch)
        i += 1
    return "".join(out) + ("-" if dash else "")


def json_safe(pattern: str) -> str | None:
    """``pattern`` narrowed to what a JSON string holds raw (module doc), or None."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 >= len(pattern):
                return None
            nxt = pattern[i + 1]
            if nxt in _SHORTHANDS:
                out.append(_SHORTHANDS[nxt])
            elif nxt in _KEPT_ESCAPES:
                out.append(pattern[i : i + 2])
            elif nxt in _AS_CLASS:
                out.append(_AS_CLASS[nxt])
            elif nxt in _RAW_ESCAPES:
                out.append(nxt)
            else:
                return None  # a backreference, \\b, \\n, \\", \\\\, \\x41...: not written here
            i += 2
        elif ch == "[":
            end = i + 1
            while end < len(pattern) and pattern[end] != "]":
                end += 2 if pattern[end] == "\\" else 1
            if end >= len(pattern):
                return None
            negated = pattern[i + 1 : i + 2] == "^"
            body = _class_body(pattern[i + 1 + negated : end], negated)
            if body is None:
                return None
            out.append(f"[^{body}{_EXCLUDED}]" if negated else f"[{body}]")
            i = end + 1
        elif ch == ".":
            out.append(_DOT)
            i += 1
        elif ch in _UNSAFE or ord(ch) < 0x20 or ord(ch) == 0x7F:
            return None
        elif ch == "{" and (count := _QUANTIFIER.match(pattern, i)):
            out.append(count.group(0))
            i = count.end()
        elif ch in _STRAY or ch == "{":
            return None  # the converter's loop never advances past it (measured: a request hung)
        else:
            out.append(ch)
            i += 1
    return "".join(out)
