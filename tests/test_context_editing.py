"""Context editing (``context_management``) through the official SDK
(core/missive/context_management/editing.py): each edit's effect on the rendered prompt
(the echo driver's ``settings.report`` shows what the driver received), on
the token counts (the default model's real tokenizer: ``count_tokens``,
``usage`` and ``applied_edits`` agree), defaults, and the response shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from missive.context_management.editing import PLACEHOLDER
from missive.testing import in_process_app
from missive.thinking.signing import Signer

KEY = "context-editing-test-key-0123"
TOOLS4 = ["auto", "any", "tool", "none"]
CONFIG: dict[str, Any] = {
    "thinking": {"signing_key": KEY},
    "models": {
        "report": {
            "driver": "echo",
            "context_window": 100_000,
            "settings": {"report": True, "capabilities": {"tool_choice": TOOLS4, "thinking": True}},
        },
    },
}
READ = {
    "name": "read",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
NOTE = {
    "name": "note",
    "description": "Keep a note",
    "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
}
BETA = ["context-management-2025-06-27"]


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    with in_process_app(CONFIG) as app:
        yield app.sdk(timeout=120)


def tool_history(rounds: int, *, names: tuple[str, ...] = ("read",), words: int = 40) -> list[dict[str, Any]]:
    """A user request, then ``rounds`` tool uses and their results (each
    result ``words`` distinct words), ending with the last result."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files one by one."}]
    for i in range(rounds):
        name = names[i % len(names)]
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": {"path": f"file{i}.txt"}},
                ],
            }
        )
        body = " ".join(f"line{i}word{j}" for j in range(words))
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": body}],
            }
        )
    return messages


def edits(*items: dict[str, Any]) -> dict[str, Any]:
    return {"edits": list(items)}


def reported(msg: Any) -> dict[str, Any]:
    """The conversation the echo driver received (``settings.report``)."""
    return json.loads(msg.content[0].text)


def results_and_inputs(report: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    blocks = [b for t in report["turns"] for b in t["blocks"]]
    return (
        [b["content"] for b in blocks if b["type"] == "tool_result"],
        [b["input"] for b in blocks if b["type"] == "tool_use"],
    )


def test_clear_tool_uses_keeps_latest_and_reports_the_edit(client: anthropic.Anthropic) -> None:
    management = edits(
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "tool_uses", "value": 3},
            "keep": {"type": "tool_uses", "value": 2},
        }
    )
    msg = client.beta.messages.create(
        model="report",
        max_tokens=50,
        tools=[READ],
        messages=tool_history(5),
        context_management=management,
        betas=BETA,
    )
    results, inputs = results_and_inputs(reported(msg))
    assert results[:3] == [PLACEHOLDER] * 3
    assert results[3].startswith("line3word0") and results[4].startswith("line4word0")
    assert inputs == [{"path": f"file{i}.txt"} for i in range(5)]  # inputs kept by default
    assert msg.context_management is not None
    [applied] = msg.context_management.applied_edits
    assert applied.type == "clear_tool_uses_20250919" and applied.cleared_tool_uses == 3
    # The echo model counts words of text turns only: clearing results frees none of its tokens.
    assert applied.cleared_input_tokens == 0


def test_trigger_not_reached_leaves_prompt_and_reports_no_edit(client: anthropic.Anthropic) -> None:
    for trigger in ({"type": "tool_uses", "value": 5}, None):  # 5 uses, not more; default 100k tokens
        edit: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
        if trigger:
            edit["trigger"] = trigger
        msg = client.beta.messages.create(
            model="report",
            max_tokens=50,
            tools=[READ],
            messages=tool_history(5),
            context_management=edits(edit),
            betas=BETA,
        )
        results, _ = results_and_inputs(reported(msg))
        assert PLACEHOLDER not in results
        assert msg.context_management is not None and msg.context_management.applied_edits == []


def test_exclude_tools_and_clear_tool_inputs(client: anthropic.Anthropic) -> None:
    history = tool_history(6, names=("read", "note"))  # read, note, read, note, read, note
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 1},
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": ["note"],
        "clear_tool_inputs": True,
    }
    msg = client.beta.messages.create(
        model="report",
        max_tokens=50,
        tools=[READ, NOTE],
        messages=history,
        context_management=edits(edit),
        betas=BETA,
    )
    results, inputs = results_and_inputs(reported(msg))
    cleared = [i for i, r in enumerate(results) if r == PLACEHOLDER]
    assert cleared == [0, 2]  # the reads but the latest; notes never
    assert [inputs[i] for i in cleared] == [{}, {}]
    assert all(inputs[i] == {"path": f"file{i}.txt"} for i in range(6) if i not in cleared)
    # clear_tool_inputs as a list: only the named tools' inputs.
    edit["clear_tool_inputs"] = ["note"]
    edit["exclude_tools"] = []
    msg = client.beta.messages.create(
        model="report",
        max_tokens=50,
        tools=[READ, NOTE],
        messages=history,
        context_management=edits(edit),
        betas=BETA,
    )
    results, inputs = results_and_inputs(reported(msg))
    assert [i for i, r in enumerate(results) if r == PLACEHOLDER] == [0, 1, 2, 3, 4]
    assert inputs[0] == {"path": "file0.txt"} and inputs[1] == {} and inputs[3] == {}


def signed_thinking_history(signer: Signer, turns: int) -> list[dict[str, Any]]:
    """``turns`` rounds of a question and an answer whose thinking block
    (five words) carries this server's signature."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        thought = f"thinking about question {turn} now"
        messages.append({"role": "user", "content": f"question {turn}"})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": thought,
                        "signature": signer.sign(thought, turn=turn, block=0),
                    },
                    {"type": "text", "text": f"answer {turn}"},
                ],
            }
        )
    messages.append({"role": "user", "content": "last question"})
    return messages


def test_clear_thinking_keeps_the_latest_turns_and_counts_what_it_cleared(
    client: anthropic.Anthropic,
) -> None:
    signer = Signer(KEY.encode())
    history = signed_thinking_history(signer, 4)
    thinking = {"type": "adaptive"}
    full = client.beta.messages.count_tokens(model="report", messages=history, thinking=thinking, betas=BETA)
    for keep, cleared_turns in (
        ({"type": "thinking_turns", "value": 1}, 3),
        (None, 3),
        ({"type": "thinking_turns", "value": 3}, 1),
        ("all", 0),
        ({"type": "all"}, 0),
    ):
        edit: dict[str, Any] = {"type": "clear_thinking_20251015"}
        if keep is not None:
            edit["keep"] = keep
        kwargs: dict[str, Any] = dict(
            model="report", messages=history, thinking=thinking, context_management=edits(edit), betas=BETA
        )
        msg = client.beta.messages.create(max_tokens=50, **kwargs)
        counted = client.beta.messages.count_tokens(**kwargs)
        # The echo model counts each kept thinking block's five words.
        assert msg.usage.input_tokens == counted.input_tokens == full.input_tokens - 5 * cleared_turns
        assert counted.context_management is not None
        assert counted.context_management.original_input_tokens == full.input_tokens
        assert msg.context_management is not None
        if cleared_turns:
            [applied] = msg.context_management.applied_edits
            assert applied.type == "clear_thinking_20251015"
            assert applied.cleared_thinking_turns == cleared_turns
            assert applied.cleared_input_tokens == 5 * cleared_turns
        else:
            assert msg.context_management.applied_edits == []


def test_streamed_answer_carries_applied_edits(client: anthropic.Anthropic) -> None:
    management = edits(
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "tool_uses", "value": 0},
            "keep": {"type": "tool_uses", "value": 0},
        }
    )
    kwargs: dict[str, Any] = dict(
        model="report",
        max_tokens=50,
        tools=[READ],
        messages=tool_history(2),
        context_management=management,
        betas=BETA,
    )
    with client.beta.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    plain = client.beta.messages.create(**kwargs)
    assert streamed.context_management == plain.context_management
    assert [e.cleared_tool_uses for e in plain.context_management.applied_edits] == [2]  # type: ignore[union-attr]
    assert streamed.content[0].text == plain.content[0].text  # type: ignore[union-attr]


def test_invalid_edits_are_the_apis_400s(client: anthropic.Anthropic) -> None:
    both = edits({"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"})
    with pytest.raises(anthropic.BadRequestError, match="clear_thinking_20251015 must be the first edit"):
        client.beta.messages.create(
            model="report",
            max_tokens=5,
            messages=tool_history(1),
            tools=[READ],
            context_management=both,
            betas=BETA,
        )
    with pytest.raises(anthropic.BadRequestError, match="compaction: cannot be combined"):
        client.beta.messages.create(
            model="report",
            max_tokens=5,
            messages=tool_history(1),
            tools=[READ],
            context_management=edits({"type": "clear_tool_uses_20250919"}),
            compaction={"type": "summarize"},
            betas=BETA,
        )


def test_compact_edit_is_reported_as_ignored(client: anthropic.Anthropic) -> None:
    raw = client.beta.messages.with_raw_response.create(
        model="report",
        max_tokens=5,
        messages=[{"role": "user", "content": "hi"}],
        context_management={"edits": [{"type": "compact_20260112"}]},
        betas=BETA,
    )
    assert 'context_management.edits.0 (edit type "compact_20260112")' in raw.headers["missive-ignored"]


# -- token counts on the real default model ---------------------------------


def test_clearing_frees_real_tokens_and_count_tokens_agrees(smol: anthropic.Anthropic) -> None:
    """With SmolLM2's tokenizer, cleared results free tokens: ``usage``,
    ``count_tokens`` and ``cleared_input_tokens`` all agree."""
    history = tool_history(4, words=30)
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 50},
        "keep": {"type": "tool_uses", "value": 1},
    }
    base: dict[str, Any] = dict(model="smollm2-135m", messages=history, tools=[READ], betas=BETA)
    full = smol.beta.messages.count_tokens(**base)
    counted = smol.beta.messages.count_tokens(**base, context_management=edits(edit))
    msg = smol.beta.messages.create(max_tokens=0, **base, context_management=edits(edit))
    usage = msg.usage
    total = (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    assert total == counted.input_tokens < full.input_tokens
    assert counted.context_management is not None
    assert counted.context_management.original_input_tokens == full.input_tokens
    [applied] = msg.context_management.applied_edits  # type: ignore[union-attr]
    assert applied.cleared_tool_uses == 3
    assert applied.cleared_input_tokens == full.input_tokens - counted.input_tokens
    # clear_at_least above what clearing frees: nothing is cleared.
    at_least = {**edit, "clear_at_least": {"type": "input_tokens", "value": full.input_tokens}}
    untouched = smol.beta.messages.count_tokens(**base, context_management=edits(at_least))
    assert untouched.input_tokens == full.input_tokens
    # A trigger above the prompt's size: nothing is cleared.
    high = {**edit, "trigger": {"type": "input_tokens", "value": full.input_tokens}}
    assert (
        smol.beta.messages.count_tokens(**base, context_management=edits(high)).input_tokens
        == full.input_tokens
    )
