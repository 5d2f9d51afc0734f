"""``capabilities`` and ``lifecycle`` of ``GET /v1/models``.

The API always returns both (SDK 2.15 ``ModelInfo``: ``capabilities`` "keys
are always present for all known capabilities"; ``lifecycle`` is
``active``, ``deprecated`` or ``retired``). Clients read them to decide
what to send: llm-anthropic, for one, assumes every capability of the
newest models (thinking it cannot turn off, PDFs, web search) for a model
whose listing has none.

Each key of ``ModelCapabilities`` is derived from what the model's driver
declares (:class:`missive.driver.capabilities.Capabilities`) and what the core does
for every model, then a model's ``capabilities`` overrides in the
configuration (dotted keys, ``"pdf_input" = false``) are applied:

* ``thinking.types``: ``enabled`` and ``adaptive`` when the model reasons
  (declared ``thinking``; Missive accepts ``adaptive`` for any model, but a
  model that cannot reason never decides to); ``disabled`` always (the
  API: "true on a model that does not support thinking");
  ``between_tools`` when the model can call tools (its progress text
  between calls comes back as thinking blocks:
  :mod:`missive.thinking.between_tools`). ``thinking.supported`` is true
  when any type but ``disabled`` is, since each can return thinking blocks.
* ``effort``: the levels map to a reasoning model's depth
  (:mod:`missive.driver.thinking`); without reasoning, effort changes nothing.
* ``image_input``: the model takes an image type; ``pdf_input``: always (the
  core turns PDFs into text for every model, docs/media.md).
* ``structured_outputs``: declared ``structured_output``.
* ``compaction`` (``summarize``): every model writes its own summary
  (:mod:`missive.context_management.compaction`).
* ``context_management``: ``clear_tool_uses_20250919`` and
  ``clear_thinking_20251015`` are applied by the core for every model
  (:mod:`missive.context_management.editing`); ``compact_20260112`` is not.
* ``batch``: the Message Batches endpoints are on (``batches.enabled``).
* ``server_tools.web_search`` (and ``server_tools``): a search provider
  runs ``web_search`` calls (``[server_tools] web_search``) and the model
  can call tools; ``server_tools.code_execution``: never.
* ``citations``, ``code_execution``: false (citations are not produced; no
  code runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..config import ModelEntry
from ..driver.capabilities import Capabilities
from ..protocol.capabilities import CAPABILITY_KEYS, unknown_keys

__all__ = ["model_capabilities", "lifecycle_fields", "derived_keys", "unknown_keys", "CAPABILITY_KEYS"]


def _s(supported: bool) -> dict[str, bool]:
    return {"supported": bool(supported)}


def _derived(caps: Capabilities, *, batches: bool, web_search: bool = False) -> dict[str, Any]:
    reasons = caps.thinking
    tools = bool(caps.tool_choice)
    searches = web_search and tools
    types = {
        "adaptive": _s(reasons),
        "between_tools": _s(tools),
        "disabled": _s(True),
        "enabled": _s(reasons),
    }
    return {
        "batch": _s(batches),
        "citations": _s(False),
        "code_execution": _s(False),
        "compaction": {"supported": True, "summarize": _s(True)},
        "context_management": {
            "supported": True,
            "clear_thinking_20251015": _s(True),
            "clear_tool_uses_20250919": _s(True),
            "compact_20260112": _s(False),
        },
        "effort": {
            "supported": reasons,
            **{level: _s(reasons) for level in ("low", "medium", "high", "max", "xhigh")},
        },
        "image_input": _s(any(m.startswith("image/") for m in caps.input_media)),
        "pdf_input": _s(True),
        "server_tools": {"supported": searches, "code_execution": _s(False), "web_search": _s(searches)},
        "structured_outputs": _s(caps.structured_output),
        "thinking": {"supported": reasons or tools, "types": types},
    }


def _keys(tree: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            if "supported" in value:
                out.append(path)
            out += _keys({k: v for k, v in value.items() if k != "supported"}, path + ".")
    return out


def derived_keys() -> frozenset[str]:
    """The dotted keys of the tree this module derives (a test compares them
    with :data:`missive.protocol.capabilities.CAPABILITY_KEYS`)."""
    return frozenset(_keys(_derived(Capabilities(), batches=False)))


def _override(tree: dict[str, Any], dotted: str, value: bool) -> None:
    node = tree
    for part in dotted.split("."):
        node = node[part]
    node["supported"] = value


def model_capabilities(
    caps: Capabilities, entry: ModelEntry, *, batches: bool, web_search: bool = False
) -> dict[str, Any]:
    """The ``capabilities`` object of a model (see the module doc);
    ``web_search``: a search provider runs ``web_search`` calls
    (``[server_tools] web_search``). Override keys were checked with the
    configuration (:func:`unknown_keys`)."""
    tree = _derived(caps, batches=batches, web_search=web_search)
    for dotted, value in entry.capabilities.items():
        if dotted in CAPABILITY_KEYS:
            _override(tree, dotted, value)
    return tree


def _rfc3339(when: datetime | None) -> str | None:
    return when.isoformat().replace("+00:00", "Z") if when is not None else None


def lifecycle_fields(entry: ModelEntry) -> dict[str, Any]:
    """``lifecycle``, ``deprecated_at``, ``retires_at`` of a model."""
    return {
        "lifecycle": entry.lifecycle,
        "deprecated_at": _rfc3339(entry.deprecated_at),
        "retires_at": _rfc3339(entry.retires_at),
    }
