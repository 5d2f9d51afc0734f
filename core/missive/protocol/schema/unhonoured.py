"""Declared request fields whose value Missive does not act on, reported.

:func:`missive.protocol.schema.ignored.collect_ignored` reports keys the
models do not declare. Some declared fields are taken but a value of them
would be silently dropped; they are reported here the same way
(``missive-ignored``, a 400 in strict mode), each found by
``tests/test_api_coverage_nested.py`` walking the SDK 2.16 types:

* ``thinking.display: "updates"`` (``BetaThinkingConfigAdaptiveParam``):
  thinking is returned whole, as ``summarized``;
* ``thinking.budget_tokens`` with a type other than ``enabled`` (only
  ``BetaThinkingConfigEnabledParam`` has it): no budget is applied;
* ``citations: {"enabled": true}`` of a ``search_result`` block
  (``BetaSearchResultBlockParam``): no citations are produced (documents
  are reported by :mod:`missive.media.pipeline`);
* ``tool_changes`` of a ``compaction`` block (``BetaCompactionBlockParam``):
  inline tool changes are not applied;
* keys of a ``fallbacks`` entry's ``thinking`` and ``output_config`` that the
  request's own models do not declare (``BetaFallbackParam``), such as
  ``block_binding`` or ``task_budget``: the entry is merged into the
  attempt's body, which is not reported again (:mod:`missive.routing.chain`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .blocks import CompactionBlock, SearchResultBlock, ToolResultBlock
from .request import OutputConfig, Thinking

__all__ = ["unhonoured"]


def unhonoured(request: BaseModel) -> list[str]:
    """The ``missive-ignored`` paths of declared fields not acted on (module doc)."""
    found: list[str] = []
    _thinking(getattr(request, "thinking", None), "thinking", found)
    for i, message in enumerate(getattr(request, "messages", None) or []):
        content = message.content if isinstance(message.content, list) else []
        for j, block in enumerate(content):
            _block(block, f"messages.{i}.content.{j}", found)
            if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                for k, inner in enumerate(block.content):
                    _block(inner, f"messages.{i}.content.{j}.content.{k}", found)
    fallbacks = getattr(request, "fallbacks", None)
    for i, entry in enumerate(fallbacks if isinstance(fallbacks, list) else []):
        _fallback(entry, f"fallbacks.{i}", found)
    return found


def _thinking(thinking: Any, path: str, found: list[str]) -> None:
    def field(name: str) -> Any:
        return thinking.get(name) if isinstance(thinking, dict) else getattr(thinking, name, None)

    display = field("display")
    kind = field("type")
    if field("budget_tokens") is not None and kind is not None and kind != "enabled":
        found.append(f'{path}.budget_tokens (type "{kind}" takes no budget: only "enabled" does)')
    if display == "updates":
        found.append(f'{path}.display ("updates": thinking is returned whole)')


def _block(block: Any, path: str, found: list[str]) -> None:
    if isinstance(block, SearchResultBlock) and (block.citations or {}).get("enabled"):
        found.append(f"{path}.citations")
    if isinstance(block, CompactionBlock) and block.tool_changes:
        found.append(f"{path}.tool_changes")


def _fallback(entry: Any, path: str, found: list[str]) -> None:
    for name, model in (("thinking", Thinking), ("output_config", OutputConfig)):
        value = getattr(entry, name, None)
        if not isinstance(value, dict):
            continue
        declared = {f.alias or key for key, f in model.model_fields.items()}
        found.extend(f"{path}.{name}.{key}" for key in value if key not in declared)
        if name == "thinking":
            _thinking(value, f"{path}.thinking", found)
