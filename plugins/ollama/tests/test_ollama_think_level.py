"""``think_level = "effort"`` sends the thinking plan's level (unit)."""

from __future__ import annotations

import pytest

from missive.testing import generation_request
from missive_ollama.convert import think_value
from missive_ollama.settings import OllamaSettings

HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}, "high"),
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, "low"),
        ({"thinking": {"type": "adaptive"}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "low"),
        ({"thinking": {"type": "enabled", "budget_tokens": 20000}}, "high"),
    ],
)
def test_effort_is_the_plans_level(fields: dict[str, object], expected: str) -> None:
    request = generation_request(HI, max_tokens=32000, **fields)
    settings = OllamaSettings(model="gpt-oss:20b", think_level="effort")
    assert think_value(request, model_thinks=True, settings=settings) == expected


def test_no_thinking_sends_false_whatever_the_level() -> None:
    request = generation_request(HI, output_config={"effort": "high"})
    assert (
        think_value(
            request, model_thinks=True, settings=OllamaSettings(model="gpt-oss:20b", think_level="effort")
        )
        is False
    )
