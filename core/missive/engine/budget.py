"""The thinking budget, enforced in the model's thread.

``thinking: {type: "enabled", budget_tokens: N}``: a parser of the model's
reasoning format follows the output; when ``N`` output tokens have been spent
inside the reasoning, the format's closing text (``\\n</think>\\n\\n``) is
written into the context (:meth:`missive.engine.runner.Runner.append`) and
generation goes on from there, so the model answers instead of reasoning
further (the technique of llama.cpp's ``--reasoning-budget`` and vLLM's
thinking budget processors). Used by :mod:`missive.engine.producer`.
"""

from __future__ import annotations

from ..driver.interface import GenerationRequest
from ..driver.parsing import ReasoningParser
from ..protocol.errors import InvalidRequestError

__all__ = ["ThinkingBudget", "refuse_under_constraint"]


def refuse_under_constraint(request: GenerationRequest, reasons: bool, model_id: str, driver: str) -> None:
    """A thinking budget (``thinking.type: "enabled"``) on a reasoning
    model (``reasons``) cannot come with a constrained reply: the grammar
    constrains the whole output, so the model could not reason first.

    Raises:
        InvalidRequestError: naming the model, the driver and the way out.
    """
    if request.thinking.budget_tokens is None or not reasons:
        return
    forced = bool(request.tools) and request.tool_choice.mode in ("any", "tool")
    if forced or request.output_schema is not None:
        raise InvalidRequestError(
            "thinking {\"type\": \"enabled\"} cannot be combined with a constrained output "
            f"(output_config.format) on model '{model_id}' (driver {driver}): its grammar "
            "would forbid the reasoning; use thinking \"adaptive\" or \"disabled\""
        )


class ThinkingBudget:
    """Counts reasoning tokens of one generation; runs in the model's thread.

    Args:
        parser: a fresh parser of the model's reasoning format.
        opened: the reasoning tag the prompt left open (``<think>``), or "".
        budget: reasoning tokens allowed (``budget_tokens``, >= 1).
        close_tokens: the tokens of the format's closing text
            (:meth:`~missive.reasoning.base.ReasoningParser.close_text`).
    """

    def __init__(self, parser: ReasoningParser, opened: str, budget: int, close_tokens: list[int]) -> None:
        self.parser = parser
        self.budget = budget
        self.close_tokens = close_tokens
        self.spent = 0
        if opened:
            parser.feed(opened)

    def exhausted(self, text: str) -> bool:
        """Account one output token whose text is ``text`` (possibly "", for a
        token completing no character); True when reasoning must end now."""
        reasoning = self.parser.in_reasoning
        self.parser.feed(text)
        if reasoning or self.parser.in_reasoning:
            self.spent += 1
        return self.parser.in_reasoning and self.spent >= self.budget

    def closed(self, text: str) -> None:
        """The closing text was written into the output."""
        self.parser.feed(text)
