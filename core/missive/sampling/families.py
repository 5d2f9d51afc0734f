"""Recommended sampling settings per model family, from the model authors.

Used when a model's file states none (:mod:`missive.sampling.defaults`
prefers the GGUF's ``general.sampling.*`` keys). Each row names the family
by a pattern over the model's names (GGUF ``general.name``,
``general.basename``, ``general.finetune``, the file name; lower case, spaces
and underscores as ``-``), the values, and where the authors publish them.
The first matching row wins, so a specific variant (Qwen3-Coder) comes
before its family (Qwen3).

Only families whose authors publish numbers are listed; the rest sample with
the Messages API's defaults (temperature 1.0, no top-p, top-k or min-p cut).
SmolLM2 (the embedded default model) is deliberately absent: its model card
shows an example call, not a recommendation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Family", "FAMILIES", "Values", "family_for", "normalise"]


@dataclass(frozen=True)
class Values:
    """One set of sampling values (None: the API default for that field)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None


@dataclass(frozen=True)
class Family:
    """A row of the table.

    Attributes:
        name: the family as docs and logs name it (``qwen3-coder``).
        pattern: regular expression searched in the model's normalised names.
        values: the recommended values (with thinking off, for hybrid models).
        thinking: the values for a request with thinking on, where the
            authors recommend other ones for their thinking mode; None: as
            ``values``.
        source: where the authors publish them.
    """

    name: str
    pattern: str
    values: Values
    source: str
    thinking: Values | None = None


_QWEN3_THINKING = Values(0.6, 0.95, 20, 0.0)
_QWEN3_INSTRUCT = Values(0.7, 0.8, 20, 0.0)

#: The table (docs/models.md repeats it with the sources).
FAMILIES: tuple[Family, ...] = (
    Family(
        "qwen3-coder",
        r"qwen3-coder",
        Values(0.7, 0.8, 20),
        "Qwen/Qwen3-Coder-30B-A3B-Instruct model card, Best Practices",
    ),
    Family(
        "qwen3-thinking-2507",
        r"qwen3(?![.\d]).*thinking",
        _QWEN3_THINKING,
        "Qwen/Qwen3-4B-Thinking-2507 model card, Best Practices",
    ),
    Family(
        "qwen3-instruct-2507",
        r"qwen3(?![.\d]).*instruct",
        _QWEN3_INSTRUCT,
        "Qwen/Qwen3-4B-Instruct-2507 model card, Best Practices",
    ),
    Family(
        "qwen3",
        r"qwen3(?![.\d])",
        _QWEN3_INSTRUCT,
        "Qwen/Qwen3-8B model card, Best Practices (thinking and non-thinking mode)",
        thinking=_QWEN3_THINKING,
    ),
    Family("qwq", r"qwq", Values(0.6, 0.95, 40, 0.0), "Qwen/QwQ-32B model card, Usage Guidelines"),
    Family(
        "deepseek-r1",
        r"deepseek-r1",
        Values(0.6, 0.95),
        "deepseek-ai/DeepSeek-R1 model card, Usage Recommendations",
    ),
    Family(
        "minimax-m2",
        r"minimax-m2",
        Values(1.0, 0.95, 40),
        "MiniMaxAI/MiniMax-M2 model card, recommended inference parameters",
    ),
    Family(
        "glm-4.5+",
        r"glm-4\.[5-7]",
        Values(1.0, 0.95, 40),
        "zai-org/GLM-4.6 model card, evaluation parameters",
    ),
    Family(
        "kimi-k2-thinking",
        r"kimi-k2.*thinking",
        Values(1.0),
        "moonshotai/Kimi-K2-Thinking model card, recommended temperature",
    ),
    Family(
        "kimi-k2", r"kimi-k2", Values(0.6), "moonshotai/Kimi-K2-Instruct model card, recommended temperature"
    ),
    Family(
        "seed-oss",
        r"seed-oss",
        Values(1.1, 0.95),
        "ByteDance-Seed/Seed-OSS-36B-Instruct model card, inference",
    ),
    Family("gpt-oss", r"gpt-oss", Values(1.0, 1.0), "openai/gpt-oss repository README, recommended sampling"),
    Family(
        "magistral", r"magistral", Values(0.7, 0.95), "mistralai/Magistral-Small-2509 model card, sampling"
    ),
    Family(
        "devstral",
        r"devstral",
        Values(0.15),
        "mistralai/Devstral-Small-2507 model card, recommended temperature",
    ),
    Family(
        "mistral-small-3",
        r"mistral-small-3",
        Values(0.15),
        "mistralai/Mistral-Small-3.2-24B-Instruct-2506 model card, recommended temperature",
    ),
    Family(
        "gemma-3",
        r"gemma-?3(?![.\d])",
        Values(1.0, 0.95, 64, 0.0),
        "google/gemma-3 generation_config.json (top_k 64, top_p 0.95), recommended temperature 1.0",
    ),
    Family(
        "smollm3", r"smollm3", Values(0.6, 0.95), "HuggingFaceTB/SmolLM3-3B model card, recommended sampling"
    ),
)

_SEPARATORS = re.compile(r"[\s_]+")


def normalise(name: str) -> str:
    """``name`` in lower case with spaces and underscores as ``-`` (GGUF
    ``general.name`` writes ``Qwen3 Coder 30B A3B Instruct``)."""
    return _SEPARATORS.sub("-", name.strip().lower())


def family_for(names: list[str]) -> Family | None:
    """The first row whose pattern matches one of the model's ``names``, or None."""
    texts = [normalise(n) for n in names if n]
    for family in FAMILIES:
        pattern = re.compile(family.pattern)
        if any(pattern.search(text) for text in texts):
            return family
    return None
