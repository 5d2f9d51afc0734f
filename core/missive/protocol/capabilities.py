"""The keys of ``capabilities`` in ``GET /v1/models`` (SDK 2.15 ``ModelCapabilities``).

Each key is a dotted path to an object with ``supported`` (``thinking.types.adaptive``).
A model's ``capabilities`` overrides in the configuration name these keys
(:class:`missive.config.ModelEntry`); :mod:`missive.models.capabilities`
derives the values, and a test keeps its tree and this list equal.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CAPABILITY_KEYS", "unknown_keys"]

#: Every dotted key of ``ModelCapabilities`` that holds ``supported``.
CAPABILITY_KEYS = frozenset(
    {
        "batch",
        "citations",
        "code_execution",
        "compaction",
        "compaction.summarize",
        "context_management",
        "context_management.clear_thinking_20251015",
        "context_management.clear_tool_uses_20250919",
        "context_management.compact_20260112",
        "effort",
        "effort.high",
        "effort.low",
        "effort.max",
        "effort.medium",
        "effort.xhigh",
        "image_input",
        "pdf_input",
        "server_tools",
        "server_tools.code_execution",
        "server_tools.web_search",
        "structured_outputs",
        "thinking",
        "thinking.types.adaptive",
        "thinking.types.between_tools",
        "thinking.types.disabled",
        "thinking.types.enabled",
    }
)


def unknown_keys(overrides: Iterable[str]) -> list[str]:
    """Override keys that name no capability, sorted."""
    return sorted(key for key in overrides if key not in CAPABILITY_KEYS)
