"""Moved to :mod:`missive.driver.parsing`; the name stays for plugins that import it."""

from __future__ import annotations

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

__all__ = [
    "Text",
    "CallStart",
    "CallArgs",
    "CallEnd",
    "Reasoning",
    "ParseEvent",
    "ToolParser",
    "MalformedToolCall",
]
