"""The ``[routing]`` settings: ``[[routing.rules]]`` and ``default_fallbacks``.

How rules are matched is :mod:`missive.routing.rules`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["RoutingRule", "RoutingConfig"]

ThinkingType = Literal["enabled", "adaptive"]


class RoutingRule(BaseModel):
    """One ``[[routing.rules]]`` entry (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    to: str = Field(min_length=1)
    model: list[str] = Field(default_factory=list)
    images: bool | None = None
    min_prompt_tokens: int | None = Field(default=None, ge=1)
    thinking: bool | list[ThinkingType] | None = None
    subagent: bool | None = None
    agent_id: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_a_condition(self) -> RoutingRule:
        if (
            not self.model
            and self.images is None
            and self.min_prompt_tokens is None
            and self.thinking is None
            and self.subagent is None
            and not self.agent_id
        ):
            raise ValueError(
                f"rule '{self.name}' has no condition "
                "(model, images, min_prompt_tokens, thinking, subagent or agent_id)"
            )
        return self

    def describe(self) -> str:
        """The rule in one line: ``images and thinking (enabled) -> model``."""
        parts = []
        if self.model:
            parts.append("model " + " or ".join(self.model))
        if self.images is not None:
            parts.append("images" if self.images else "no images")
        if self.min_prompt_tokens is not None:
            parts.append(f"prompt >= {self.min_prompt_tokens} tokens (estimated)")
        if self.thinking is not None:
            kinds = (
                self.thinking
                if isinstance(self.thinking, list)
                else (["enabled", "adaptive"] if self.thinking else [])
            )
            parts.append(f"thinking ({', '.join(kinds)})" if kinds else "no thinking")
        if self.subagent is not None:
            parts.append("a subagent" if self.subagent else "not a subagent")
        if self.agent_id:
            parts.append("agent " + " or ".join(self.agent_id))
        return f"{' and '.join(parts)} -> {self.to}"


class RoutingConfig(BaseModel):
    """``[routing]``: the rules, tried in order, and whether each model's
    ``fallbacks`` chain applies to requests that name none
    (:mod:`missive.routing.fallbacks`)."""

    model_config = ConfigDict(extra="forbid")

    rules: list[RoutingRule] = Field(default_factory=list)
    default_fallbacks: bool = False
