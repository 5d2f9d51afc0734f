"""Reasoning parsers over awkward chunk boundaries (issue 4)."""

from __future__ import annotations

import pytest

from missive.driver.parsing import Reasoning, Text
from missive.reasoning.base import MistralThinkParser, ReasoningParser, SeedThinkParser, ThinkParser
from missive.reasoning.harmony import HarmonyReasoningParser
from missive.reasoning.registry import reasoning_parser_class, reasoning_parser_for_template


def run(parser: ReasoningParser, pieces: list[str]) -> tuple[str, str, list[str]]:
    """(reasoning, text, kinds in order) from feeding ``pieces``."""
    events = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, Reasoning))
    text = "".join(e.text for e in events if isinstance(e, Text))
    kinds: list[str] = []
    for e in events:
        kind = "reasoning" if isinstance(e, Reasoning) else "text"
        if not kinds or kinds[-1] != kind:
            kinds.append(kind)
    return reasoning, text, kinds


def splits(text: str) -> list[list[str]]:
    """Every split of ``text`` in two and three pieces, and one char at a time."""
    out = [[text], list(text)]
    for i in range(1, len(text)):
        out.append([text[:i], text[i:]])
        for j in range(i + 1, len(text), 3):
            out.append([text[:i], text[i:j], text[j:]])
    return out


SAMPLE = "<think>\nThe user wants 2+2. ünïcode → 4.\n</think>\n\nThe answer is 4."


def test_think_tags_split_anywhere() -> None:
    for pieces in splits(SAMPLE):
        reasoning, text, kinds = run(ThinkParser(), pieces)
        assert reasoning == "The user wants 2+2. ünïcode → 4.", pieces
        assert text == "The answer is 4.", pieces
        assert kinds == ["reasoning", "text"], pieces


def test_nothing_shown_then_retracted() -> None:
    parser = ThinkParser()
    assert parser.feed("<th") == []  # may be the tag
    assert parser.feed("ink>") == []
    assert parser.in_reasoning
    assert parser.feed("a</th") == [Reasoning("a")]
    assert parser.feed("x") == [Reasoning("</thx")]
    assert parser.feed("</think>") == []
    assert not parser.in_reasoning
    assert parser.feed("\n\nok") == [Text("ok")]


def test_answer_without_reasoning_is_text_and_later_tags_stay_text() -> None:
    reasoning, text, _ = run(ThinkParser(), ["Use ", "<think> tags like <think>x</think>."])
    assert reasoning == ""
    assert text == "Use <think> tags like <think>x</think>."


def test_a_short_answer_that_could_be_a_tag_is_given_back() -> None:
    assert run(ThinkParser(), ["<th"]) == ("", "<th", ["text"])


def test_unterminated_reasoning_stays_reasoning() -> None:
    reasoning, text, kinds = run(ThinkParser(), ["<think>I am still thinking", " when cut off</th"])
    assert (reasoning, text, kinds) == ("I am still thinking when cut off</th", "", ["reasoning"])


def test_whitespace_inside_reasoning_is_kept_only_between_words() -> None:
    reasoning, text, _ = run(ThinkParser(), ["<think>  \n a", "  \n", "b \n", "</think>", "  \n", " c  "])
    assert reasoning == "a  \nb"
    assert text == "c  "


def test_prompt_prefix_for_templates_that_open_the_tag() -> None:
    assert ThinkParser.prompt_prefix("<|im_start|>assistant\n<think>\n") == "<think>"
    assert ThinkParser.prompt_prefix("<|im_start|>assistant\n<think>\n\n</think>\n\n") == ""
    assert ThinkParser.prompt_prefix("<|im_start|>assistant\n") == ""
    # the driver feeds the prefix first: output then starts inside the reasoning
    reasoning, text, _ = run(ThinkParser(), ["<think>", "step one\n</think>\n\nDone."])
    assert (reasoning, text) == ("step one", "Done.")


@pytest.mark.parametrize(
    ("cls", "sample"),
    [
        (MistralThinkParser, "[THINK]plan[/THINK]answer"),
        (SeedThinkParser, "<seed:think>plan</seed:think>answer"),
    ],
)
def test_other_tag_formats(cls: type[ReasoningParser], sample: str) -> None:
    for pieces in splits(sample):
        assert run(cls(), pieces)[:2] == ("plan", "answer")


def test_close_text_ends_the_reasoning() -> None:
    parser = ThinkParser()
    parser.feed("<think>long reasoning")
    parser.feed(ThinkParser.close_text())
    assert not parser.in_reasoning
    assert parser.feed("Answer") == [Text("Answer")]


HARMONY = (
    "<|channel|>analysis<|message|>Think about it.<|end|><|start|>assistant<|channel|>final<|message|>Hello!"
)


def test_harmony_analysis_is_reasoning() -> None:
    for pieces in (list(HARMONY), [HARMONY], [HARMONY[:20], HARMONY[20:55], HARMONY[55:]]):
        reasoning, text, kinds = run(HarmonyReasoningParser(), pieces)
        assert (reasoning, text, kinds) == ("Think about it.", "Hello!", ["reasoning", "text"])


def test_parser_chosen_from_the_template() -> None:
    specs: dict = {}  # the built-ins
    assert reasoning_parser_for_template("{{ '<think>\\n' }}", specs) == "think"
    assert reasoning_parser_for_template("<|channel|>analysis", specs) == "harmony"
    assert reasoning_parser_for_template("[THINK]", specs) == "mistral_think"
    assert reasoning_parser_for_template("<|im_start|>", specs) is None
    assert reasoning_parser_for_template("<think>", specs, override="none") is None
    assert reasoning_parser_for_template("", specs, override="seed_think") == "seed_think"
    assert reasoning_parser_class(specs, "think") is ThinkParser


def test_harmony_prompt_prefix_is_the_open_assistant_header() -> None:
    """A prompt (a prefill, or a template) leaving an assistant message open:
    its header is fed first; the prefill's own text is not output."""
    prefix = HarmonyReasoningParser.prompt_prefix
    assert prefix("<|start|>user<|message|>Hi<|end|><|start|>assistant") == ""
    assert (
        prefix("<|start|>assistant<|channel|>analysis<|message|>The user") == "<|channel|>analysis<|message|>"
    )
    assert prefix("<|start|>assistant<|channel|>final<|message|>Sure") == "<|channel|>final<|message|>"
    assert prefix("<|start|>assistant<|channel|>analysis") == "<|channel|>analysis"
    assert prefix("<|start|>assistant<|channel|>analysis<|message|>x<|end|>") == ""
    assert prefix("<|start|>user<|message|>Hi") == ""
    assert prefix("no markup") == ""
    parser = HarmonyReasoningParser()
    events = parser.feed(
        prefix("<|start|>assistant<|channel|>analysis<|message|>The user") + " wants the time."
    )
    events += parser.feed("<|end|><|start|>assistant<|channel|>final<|message|>Noon.") + parser.finish()
    assert [(type(e).__name__, e.text) for e in events] == [
        ("Reasoning", " wants the time."),
        ("Text", "Noon."),
    ]
