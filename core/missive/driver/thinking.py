"""The request's thinking settings, resolved once.

Sources: the Messages API's ``thinking`` parameter (``enabled`` with
``budget_tokens``, ``adaptive``, ``disabled``, ``between_tools``, absent = no
thinking) with its
optional ``display`` (``summarized`` or ``omitted``; any other value is treated
as ``summarized``, the API's default), and ``output_config.effort``.

Per-model switches (:meth:`ThinkingPlan.template_kwargs`) follow the published
chat templates:

* ``enable_thinking`` - Qwen3, GLM-4.5+, Hunyuan, SmolLM3 (``/think``), many
  fine-tunes: ``False`` renders an empty ``<think></think>`` so the model answers
  directly;
* ``thinking`` - DeepSeek-V3.1 (``thinking=True`` opens ``<think>``);
* ``reasoning_effort`` - gpt-oss (``low``/``medium``/``high``; it cannot be
  switched off, so "no thinking" is ``low`` and its reasoning is dropped);
* ``thinking_budget`` - Seed-OSS (tokens; -1 unlimited, its template's
  default; 0 answers without reasoning): ``budget_tokens`` for ``enabled``,
  -1 for ``adaptive``, 0 without thinking.

* ``preserve_thinking`` (Qwen3.6) true and ``clear_thinking`` (GLM-4.7,
  GLM-5) false: the reasoning of every replayed assistant turn is rendered,
  not only that of the current tool loop. The client decides what thinking
  it replays (as with the Messages API, which keeps previous turns' thinking
  for current Claude models); and a prompt that only grows keeps its KV
  cache prefix across turns, where dropping a finished turn's reasoning
  would make the next turn decode the conversation again from there.

Templates read only the variables they know, so all of them are passed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ThinkingPlan", "plan_thinking", "Effort"]

Effort = Literal["low", "medium", "high"]

#: ``output_config.effort`` values mapped to the three levels local models know.
_EFFORTS: dict[str, Effort] = {
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "high",
    "xhigh": "high",
}


@dataclass(frozen=True)
class ThinkingPlan:
    """What the client asked for.

    Attributes:
        requested: thinking blocks may be returned (``enabled`` or ``adaptive``).
            False (absent or ``disabled``): the model's reasoning switch is
            turned off where it has one, and any reasoning it still produces is
            dropped from the answer (but counted in ``output_tokens``).
        budget_tokens: for ``enabled``, the most tokens to spend reasoning;
            None: no budget (``adaptive``, or no thinking).
        display: ``summarized`` (thinking text is returned) or ``omitted``
            (thinking blocks carry an empty ``thinking`` and only the signature).
        effort: reasoning depth for models that take a level (gpt-oss).
        between_tools: ``thinking: {"type": "between_tools"}``: the
            reasoning switch is off (``requested`` is False) and the text the
            model writes before a tool call comes back as a thinking block
            (:mod:`missive.thinking.between_tools`).
    """

    requested: bool = False
    budget_tokens: int | None = None
    display: Literal["summarized", "omitted"] = "summarized"
    effort: Effort = "medium"
    between_tools: bool = False

    @property
    def shows_blocks(self) -> bool:
        """Whether the answer may hold thinking blocks (``requested``, or
        progress text under ``between_tools``)."""
        return self.requested or self.between_tools

    def template_kwargs(self) -> dict[str, Any]:
        """Chat-template variables switching the model's reasoning on or off
        (see the module documentation for which templates read which)."""
        budget = (-1 if self.budget_tokens is None else self.budget_tokens) if self.requested else 0
        return {
            "enable_thinking": self.requested,
            "thinking": self.requested,
            "reasoning_effort": self.effort if self.requested else "low",
            "thinking_budget": budget,
            "preserve_thinking": True,
            "clear_thinking": False,
        }


def _effort(effort: str | None, budget: int | None) -> Effort:
    if effort is not None and effort in _EFFORTS:
        return _EFFORTS[effort]
    if budget is not None:
        # Budgets mapped to levels: gpt-oss "low" reasons for a few hundred to
        # ~2k tokens, "high" for 10k+ (OpenAI's gpt-oss model card).
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    return "medium"


def plan_thinking(thinking: Any, output_config: Any) -> ThinkingPlan:
    """The :class:`ThinkingPlan` of a validated request's ``thinking`` and
    ``output_config`` (either may be None). Never raises: the schema already
    enforced the API's rules (``budget_tokens`` >= 1024 and < ``max_tokens``)."""
    effort = getattr(output_config, "effort", None)
    if thinking is None or thinking.type == "disabled":
        return ThinkingPlan(requested=False, effort=_effort(effort, None))
    display: Literal["summarized", "omitted"] = "omitted" if thinking.display == "omitted" else "summarized"
    if thinking.type == "between_tools":
        # Thinking turned off: the model's switch as for "disabled".
        return ThinkingPlan(
            requested=False, display=display, effort=_effort(effort, None), between_tools=True
        )
    budget = thinking.budget_tokens if thinking.type == "enabled" else None
    return ThinkingPlan(requested=True, budget_tokens=budget, display=display, effort=_effort(effort, budget))
