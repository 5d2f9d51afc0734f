"""JSON at the edges (core/missive/fastjson.py): orjson's speed, the standard library's results."""

from __future__ import annotations

import json

import pytest

from missive.protocol.errors import InvalidRequestError
from missive.protocol.fastjson import NOT_READ, dumps, loads, loads_exact
from missive.protocol.validation import parse_json

BODIES = [
    b'{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"h\\u00e9llo \\ud83d\\ude00"}]}',
    b'{"a":1,"a":2}',  # the last duplicate wins, as in json
    '{"text": "é ✓", "n": -0.0, "f": 1e300, "z": 0.1}'.encode(),
    b'[1, 2.5, true, null, "x"]',
]


@pytest.mark.parametrize("raw", BODIES)
def test_loads_is_the_standard_librarys(raw: bytes) -> None:
    assert loads(raw) == json.loads(raw)
    assert loads(raw.decode()) == json.loads(raw)


def test_integers_beyond_64_bits_stay_exact() -> None:
    raw = b'{"input": {"id": 123456789012345678901234567890}}'
    assert loads_exact(raw) is NOT_READ  # orjson would read a float
    assert loads(raw)["input"]["id"] == 123456789012345678901234567890
    assert parse_json(raw)["input"]["id"] == 123456789012345678901234567890


def test_refused_input_gets_the_standard_librarys_error() -> None:
    for raw in (b'{"a": NaN}', b'{"a": 1,}', b'\xff'):
        assert loads_exact(raw) is NOT_READ
    assert loads(b'{"a": NaN}')["a"] != loads(b'{"a": NaN}')["a"]  # NaN, as json reads it
    with pytest.raises(json.JSONDecodeError) as caught:
        loads(b'{"a": 1,}')
    assert "Illegal trailing comma" in str(caught.value) or "Expecting property name" in str(caught.value)
    with pytest.raises(InvalidRequestError, match="unpaired surrogate"):
        parse_json(b'{"a": "\\ud800"}')
    with pytest.raises(InvalidRequestError, match="request body must be a JSON object"):
        parse_json(b'[1]')


@pytest.mark.parametrize(
    "value",
    [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "é \n\"x\" ✓ 😀"},
        },
        {"a": [1, 2.5, True, None], "b": {"c": -0.0, "d": 1e300, "e": 0.1}},
        {"big": 10**30},  # beyond orjson: the standard library writes it
    ],
)
def test_dumps_is_the_standard_librarys(value: object) -> None:
    assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def test_dumps_refuses_lone_surrogates_as_encode_does() -> None:
    with pytest.raises(UnicodeEncodeError):
        dumps({"a": "\ud800"})
