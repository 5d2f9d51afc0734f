"""OpenAI's value rules for request fields the translation otherwise only
type-checks (:mod:`.common`): a value OpenAI refuses is a 400 naming the
field, not accepted and dropped.

* ``metadata`` (API reference, "Create chat completion" and "Create a
  model response", ``metadata``: "Set of 16 key-value pairs that can be
  attached to an object ... Keys are strings with a maximum length of 64
  characters. Values are strings with a maximum length of 512 characters");
* ``stream_options`` ("Options for streaming response. Only set this when
  you set ``stream: true``"; OpenAI answers otherwise "The 'stream_options'
  parameter is only allowed when 'stream' is enabled.");
* Chat's ``stop`` ("Up to 4 sequences where the API will stop generating");
* Responses' ``truncation`` (``auto`` or ``disabled``) and
  ``max_output_tokens`` (OpenAI refuses a value below 16: "integer below
  minimum value. Expected a value >= 16").
"""

from __future__ import annotations

from typing import Any

from .common import bad

__all__ = [
    "MAX_METADATA",
    "MAX_STOP",
    "MIN_OUTPUT_TOKENS",
    "check_metadata",
    "check_stream_options",
    "check_stop",
    "check_truncation",
    "check_min_output_tokens",
]

#: ``metadata``: pairs at most, key and value lengths at most.
MAX_METADATA = (16, 64, 512)
#: Chat's ``stop``: sequences at most.
MAX_STOP = 4
#: Responses' ``max_output_tokens``: the least OpenAI takes.
MIN_OUTPUT_TOKENS = 16
_TRUNCATIONS = ("auto", "disabled")


def check_metadata(raw: dict[str, Any]) -> None:
    """``metadata`` (already known to be an object or null): at most 16
    pairs, keys of at most 64 characters, values strings of at most 512."""
    metadata = raw.get("metadata")
    if not metadata:
        return
    pairs, key_length, value_length = MAX_METADATA
    if len(metadata) > pairs:
        raise bad(
            f"Invalid 'metadata': too many properties. Expected an object with at most {pairs} properties, "
            f"but got an object with {len(metadata)} properties instead.",
            "metadata",
            "object_above_max_properties",
        )
    for key, value in metadata.items():
        where = f"metadata.{key}"
        if len(key) > key_length:
            raise bad(
                f"Invalid 'metadata': a key is too long. Expected keys of at most {key_length} characters, "
                f"but got a key of {len(key)} characters instead.",
                "metadata",
                "invalid_value",
            )
        if not isinstance(value, str):
            raise bad(
                f"Invalid type for '{where}': expected a string, but got {_kind(value)} instead.",
                where,
                "invalid_type",
            )
        if len(value) > value_length:
            raise bad(
                f"Invalid '{where}': string too long. Expected a string with maximum length "
                f"{value_length}, but got a string with length {len(value)} instead.",
                where,
                "string_above_max_length",
            )


def check_stream_options(raw: dict[str, Any]) -> None:
    """``stream_options`` only with ``stream: true``."""
    if raw.get("stream_options") is not None and raw.get("stream") is not True:
        raise bad(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        )


def check_stop(stop: list[str]) -> None:
    """Chat's ``stop``: at most :data:`MAX_STOP` sequences."""
    if len(stop) > MAX_STOP:
        raise bad(
            f"Invalid 'stop': array too long. Expected an array with maximum length {MAX_STOP}, "
            f"but got an array with length {len(stop)} instead.",
            "stop",
            "array_above_max_length",
        )


def check_truncation(raw: dict[str, Any]) -> None:
    """Responses' ``truncation`` (already known to be a string or null)."""
    value = raw.get("truncation")
    if value is not None and value not in _TRUNCATIONS:
        raise bad(
            f"Invalid value: '{value}'. Supported values are: 'auto' and 'disabled'.",
            "truncation",
            "invalid_value",
        )


def check_min_output_tokens(raw: dict[str, Any]) -> None:
    """Responses' ``max_output_tokens`` (already known to be an integer or
    null): at least :data:`MIN_OUTPUT_TOKENS`."""
    value = raw.get("max_output_tokens")
    if value is not None and value < MIN_OUTPUT_TOKENS:
        raise bad(
            f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{MIN_OUTPUT_TOKENS}, but got {value} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a decimal", list: "an array", dict: "an object"}
    return "null" if value is None else names.get(type(value), "a value of another type")
