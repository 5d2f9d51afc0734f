"""Moved to :mod:`missive.driver.thinking`; the name stays for plugins that import it."""

from __future__ import annotations

from ..driver.thinking import Effort, ThinkingPlan, plan_thinking

__all__ = ["ThinkingPlan", "plan_thinking", "Effort"]
