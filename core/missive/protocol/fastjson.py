"""JSON at the edges with orjson: request bodies, SSE frames, backend bodies and chunks.

Every request crosses JSON four times or more (its body, the body sent to a
remote backend, each of the backend's chunks, each SSE frame or the
response). orjson (Rust) does these 3 to 15 times faster than the standard
library's ``json``; measured on the gateway path (issue 19) that is about
5 % of a request's CPU with a one-line prompt, and far more for the large
bodies a coding agent sends (a 100 kB conversation is parsed in about a
tenth of the time).

The results are the standard library's, exactly:

* :func:`loads` falls back to ``json.loads`` where orjson would differ or
  refuse: a run of 19 or more digits anywhere (orjson reads an integer
  beyond 64 bits as a float, ``json`` as the exact integer; a long run inside
  a string only costs the slower path), and any input orjson refuses (so a
  malformed body gets ``json``'s error and wording, and ``NaN`` is read as
  ``json`` reads it).
* :func:`dumps` writes what ``json.dumps(obj, ensure_ascii=False,
  separators=(",", ":"))`` writes, as UTF-8 bytes, for the types Missive
  builds (dicts with string keys, lists, strings, integers, floats, booleans,
  None), and falls back to it for what orjson refuses (an integer beyond 64
  bits). One difference: a NaN or infinite float is written ``null``
  (``json`` writes ``NaN``, which is not JSON).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["loads", "dumps", "loads_exact", "NOT_READ"]

#: Every ASCII digit as ``0`` (other bytes unchanged): a run of 19 digits,
#: the shortest integer that may not fit in 64 bits, becomes 19 zeros, found
#: with a plain substring search (a regular expression costs more than
#: orjson's whole parse).
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def _long_number(data: bytes | str) -> bool:
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _LONG_RUN in raw.translate(_DIGITS_AS_ZERO)


#: What :func:`loads_exact` returns when orjson cannot read the input exactly.
NOT_READ: Any = object()


def loads_exact(data: bytes | str) -> Any:
    """``data`` parsed by orjson when that is exactly what ``json.loads``
    gives, else :data:`NOT_READ` (a long digit run; anything orjson refuses,
    malformed JSON, ``NaN``, a lone surrogate escape or invalid UTF-8 among
    them). A value read here is valid UTF-8 without lone surrogates."""
    if _long_number(data):
        return NOT_READ
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return NOT_READ


def loads(data: bytes | str) -> Any:
    """``json.loads(data)``, faster (module doc).

    Raises:
        ValueError: as ``json.loads`` (``json.JSONDecodeError``, ``UnicodeDecodeError``).
    """
    value = loads_exact(data)
    return json.loads(data) if value is NOT_READ else value


def dumps(obj: Any) -> bytes:
    """``json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()``, faster (module doc).

    Raises:
        TypeError: an object JSON cannot hold; UnicodeEncodeError: a lone
            surrogate in a string (as the standard library's ``encode()``).
    """
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
