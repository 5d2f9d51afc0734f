"""The capability keys a configuration may override (:mod:`missive.protocol.capabilities`)
are exactly the keys ``GET /v1/models`` derives (:mod:`missive.models.capabilities`)."""

from __future__ import annotations

from missive.models.capabilities import derived_keys
from missive.protocol.capabilities import CAPABILITY_KEYS, unknown_keys


def test_the_listed_keys_are_the_derived_tree() -> None:
    assert derived_keys() == CAPABILITY_KEYS


def test_unknown_keys_are_named_sorted() -> None:
    assert unknown_keys(["vision", "image_input", "thinking.types.sometimes"]) == [
        "thinking.types.sometimes",
        "vision",
    ]
