"""Conversation management done by the server (issue 26, part B).

* :mod:`.editing` - ``context_management`` edits (``clear_tool_uses_20250919``,
  ``clear_thinking_20251015``) applied before rendering, and the response's
  ``context_management.applied_edits``;
* :mod:`.compaction` - the ``compaction`` parameter (the model summarises the
  conversation into a signed ``compaction`` block) and ``compaction`` blocks
  sent back at the head of ``messages``;
* :mod:`.fallbacks` - the ``fallbacks`` chain, tried in order on Missive's
  own models;
* :mod:`.routing` - ``speed``, ``inference_geo`` and the workspace and user
  profile headers: honoured, or reported as ignored with the reason;
* :mod:`.capabilities` - ``capabilities`` and ``lifecycle`` of ``GET /v1/models``;
* :mod:`.prepare` - the order in which these run before a driver sees a
  request, and what they add to the response (:mod:`.response`).
"""

from __future__ import annotations

#: ``anthropic-beta`` values of the features this package implements (not
#: reported as ignored): context editing, compaction, server-side fallback
#: (the values the SDK 2.15 docstrings and the Anthropic docs name).
HANDLED_BETAS = frozenset(
    {
        "context-management-2025-06-27",
        "compact-2026-09-04",
        "server-side-fallback-2026-06-01",
        "server-side-fallback-2026-07-01",
    }
)

__all__ = ["HANDLED_BETAS"]
