"""Request fields that manage the conversation rather than shape one answer:
``context_management`` (context editing), ``compaction`` and ``fallbacks``.

Shapes and defaults follow the SDK's request types (anthropic 2.15,
``types/beta/``): ``BetaContextManagementConfigParam`` with the edits
``BetaClearToolUses20250919EditParam`` (``trigger``, ``keep``,
``clear_at_least``, ``exclude_tools``, ``clear_tool_inputs``),
``BetaClearThinking20251015EditParam`` (``keep``: ``{"type":
"thinking_turns", "value": N}``, ``{"type": "all"}`` or ``"all"``) and
``BetaCompact20260112EditParam``; ``BetaCompactionConfigParam``
(``{"type": "summarize", "instructions"?}``); ``BetaFallbacksParam`` (a list of
``BetaFallbackParam`` or ``"default"``). Defaults of the edits are the API's
(Anthropic docs, "Context editing"): ``clear_tool_uses_20250919`` triggers at
100,000 input tokens and keeps 3 tool uses; ``clear_thinking_20251015`` keeps
the thinking of the last assistant turn.

Like every request model these keep unknown keys (reported as ignored),
except a fallback entry: the SDK documents that "any other key is rejected
at parse time".
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from .blocks import Open

__all__ = [
    "InputTokens",
    "ToolUses",
    "ThinkingTurns",
    "ClearToolUsesEdit",
    "ClearThinkingEdit",
    "CompactEdit",
    "ContextManagement",
    "CompactionConfig",
    "FallbackEntry",
    "DEFAULT_TRIGGER_TOKENS",
    "DEFAULT_KEEP_TOOL_USES",
    "DEFAULT_KEEP_THINKING_TURNS",
]

#: ``clear_tool_uses_20250919`` defaults (Anthropic docs, "Context editing").
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
#: ``clear_thinking_20251015`` default: the thinking of the last assistant turn.
DEFAULT_KEEP_THINKING_TURNS = 1


class InputTokens(Open):
    """``{"type": "input_tokens", "value": N}`` (a trigger, or ``clear_at_least``)."""

    type: Literal["input_tokens"]
    value: Annotated[int, Field(ge=0)]


class ToolUses(Open):
    """``{"type": "tool_uses", "value": N}`` (a trigger, or ``keep``)."""

    type: Literal["tool_uses"]
    value: Annotated[int, Field(ge=0)]


class ThinkingTurns(Open):
    """``{"type": "thinking_turns", "value": N}`` (``clear_thinking`` ``keep``)."""

    type: Literal["thinking_turns"]
    value: Annotated[int, Field(ge=0)]


class AllThinkingTurns(Open):
    """``{"type": "all"}``: keep every turn's thinking."""

    type: Literal["all"]


Trigger = Annotated[InputTokens | ToolUses, Field(discriminator="type")]


class ClearToolUsesEdit(Open):
    """``clear_tool_uses_20250919``: replace the results (and optionally the
    inputs) of older tool uses by a placeholder once the prompt is large."""

    type: Literal["clear_tool_uses_20250919"]
    trigger: Trigger | None = None
    keep: ToolUses | None = None
    clear_at_least: InputTokens | None = None
    exclude_tools: list[str] | None = None
    clear_tool_inputs: bool | list[str] | None = None


class ClearThinkingEdit(Open):
    """``clear_thinking_20251015``: leave the thinking of older assistant turns
    out of the prompt."""

    type: Literal["clear_thinking_20251015"]
    keep: Annotated[ThinkingTurns | AllThinkingTurns, Field(discriminator="type")] | Literal["all"] | None = (
        None
    )

    def kept_turns(self) -> int | None:
        """How many of the latest assistant turns keep their thinking (None: all)."""
        if self.keep is None:
            return DEFAULT_KEEP_THINKING_TURNS
        if self.keep == "all" or isinstance(self.keep, AllThinkingTurns):
            return None
        return self.keep.value


class CompactEdit(Open):
    """``compact_20260112``: automatic compaction at a trigger. Not run by
    Missive (reported as ignored); the ``compaction`` parameter is."""

    type: Literal["compact_20260112"]


class UnknownEdit(Open):
    """An edit type this version does not know (reported as ignored)."""

    type: str


def _edit_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    known = ("clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112")
    return kind if isinstance(kind, str) and kind in known else "unknown"


Edit = Annotated[
    (
        Annotated[ClearToolUsesEdit, Tag("clear_tool_uses_20250919")]
        | Annotated[ClearThinkingEdit, Tag("clear_thinking_20251015")]
        | Annotated[CompactEdit, Tag("compact_20260112")]
        | Annotated[UnknownEdit, Tag("unknown")]
    ),
    Discriminator(_edit_tag),
]


class ContextManagement(Open):
    """``context_management``: the edits, applied in order before rendering."""

    edits: list[Edit] | None = None

    @field_validator("edits")
    @classmethod
    def _thinking_first(cls, edits: list[Any] | None) -> list[Any] | None:
        """``clear_thinking_20251015`` must come first when edits are combined
        (Anthropic docs, "Context editing": thinking is cleared before tool
        uses are counted)."""
        if edits and any(isinstance(e, ClearThinkingEdit) for e in edits[1:]):
            raise ValueError("clear_thinking_20251015 must be the first edit when combined with other edits")
        return edits


class CompactionConfig(Open):
    """``compaction``: ``{"type": "summarize", "instructions"?}``; blank
    ``instructions`` count as absent (the SDK's docstring)."""

    type: Literal["summarize"]
    instructions: str | None = None

    def prompt_override(self) -> str | None:
        """The client's summarisation instructions, None when absent or blank."""
        return self.instructions if self.instructions and self.instructions.strip() else None


class FallbackEntry(BaseModel):
    """One entry of ``fallbacks``: ``model`` and the per-attempt overrides
    ``max_tokens``, ``thinking``, ``output_config``, ``speed``. A key left
    out means "as the request"; a key set to ``null`` means "the model's
    default" (``BetaFallbackParam``); :attr:`model_fields_set` tells them apart."""

    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    speed: Literal["standard", "fast"] | None = None
