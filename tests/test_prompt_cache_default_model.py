"""The host-memory prompt cache on the embedded default model, through the SDK.

A main conversation with a long system prompt, and between its turns a side
request with another system prompt (what Claude Code does: title and topic
requests, subagents). Without the cache the side request evicts the main
prompt from the KV cache and its next turn decodes everything again; with it
the main prompt is restored from host memory and read from the cache.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path

sys.path.insert(0, str(Path(__file__).parents[1] / "plugins" / "llamacpp" / "tests"))
from greedy_reference import assert_same_greedy_answer  # noqa: E402  (the llamacpp tests' near-tie rule)

MODEL = "smollm2-135m"
GREEDY = {"temperature": 0.0}

SYSTEM_MAIN = "You are a careful assistant for a team of gardeners. " + " ".join(
    f"Rule {i}: answer about plants, soil, water and light, in plain words, and never about anything else."
    for i in range(20)
)
SYSTEM_SIDE = "Write a five-word title for the conversation. " + "Be short. " * 30


def turn(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def side(client: anthropic.Anthropic) -> anthropic.types.Message:
    return client.messages.create(
        model=MODEL,
        max_tokens=4,
        system=SYSTEM_SIDE,
        extra_body=GREEDY,
        messages=[turn("Summarise: how often should I water a cactus?")],
    )


def test_interleaved_conversation_is_read_back_from_host_memory(smol: anthropic.Anthropic) -> None:
    first = [turn("How often should I water a cactus?")]
    one = smol.messages.create(
        model=MODEL, max_tokens=12, system=SYSTEM_MAIN, messages=first, extra_body=GREEDY
    )
    prompt_one = one.usage.input_tokens + one.usage.cache_read_input_tokens
    assert prompt_one > 400
    other = side(smol)
    # The side request shares only the template's opening with the main prompt.
    assert other.usage.cache_read_input_tokens < 10
    second = [*first, {"role": "assistant", "content": one.content[0].text}, turn("And a fern?")]
    counted = smol.messages.count_tokens(model=MODEL, system=SYSTEM_MAIN, messages=second).input_tokens
    two = smol.messages.create(
        model=MODEL, max_tokens=12, system=SYSTEM_MAIN, messages=second, extra_body=GREEDY
    )
    # Exact usage after a restore, and the whole first prompt read from memory.
    assert two.usage.input_tokens + two.usage.cache_read_input_tokens == counted
    assert two.usage.cache_read_input_tokens >= prompt_one - 1, two.usage
    # Back and forth once more: the side request's own prompt was kept too.
    again = side(smol)
    assert (
        again.usage.cache_read_input_tokens
        >= other.usage.input_tokens + other.usage.cache_read_input_tokens - 1
    )
    assert again.content[0].text == other.content[0].text  # greedy, same prompt, restored state


@pytest.fixture(scope="module")
def uncached() -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            MODEL: {
                "driver": "llamacpp",
                "context_window": 8192,
                "settings": {"model_path": str(default_model_path()), "cache_ram_mib": 0},
            }
        }
    }
    with live_server(config) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=600)


def test_restored_state_answers_as_a_fresh_decode(
    smol: anthropic.Anthropic, uncached: anthropic.Anthropic
) -> None:
    """A conversation restored from host memory gives the greedy answer a
    server without the cache gives after decoding the prompt from scratch
    (up to a near tie, greedy_reference.py); with the cache off, the side
    request costs the main prompt its reuse."""
    # A system prompt no earlier test used: both servers decode it from the
    # first position in the same batches, so their KV caches hold the same
    # values (a prefix restored from another entry would be decoded in other
    # batches, and floating-point sums in another order can change a greedy
    # choice a few tokens later, with or without a cache).
    system = "Answer in one sentence. " + SYSTEM_MAIN
    conversation = [turn("What soil does a tomato like?")]
    answers = []
    for client in (smol, uncached):
        client.messages.create(
            model=MODEL, max_tokens=4, system=system, messages=conversation, extra_body=GREEDY
        )
        side(client)
        reply = client.messages.create(
            model=MODEL, max_tokens=8, system=system, messages=conversation, extra_body=GREEDY
        )
        answers.append(reply)
    cached, fresh = answers
    assert cached.usage.cache_read_input_tokens > 400
    assert fresh.usage.cache_read_input_tokens < 10
    # Equal, or parting only at a near tie: a prompt's last token decoded
    # alone after a restore sums in another order than inside its prompt
    # chunk on CPUs whose kernels depend on the batch size (repacked
    # AVX-512/AMX kernels: seen on CI, "has a mix" vs "includes a mix").
    counted = uncached.messages.count_tokens(model=MODEL, system=system, messages=conversation).input_tokens
    assert_same_greedy_answer(
        cached.content[0].text,
        fresh.content[0].text,
        conversation,
        system,
        counted,
        "restored vs fresh decode",
    )


def test_cache_never_serves_another_conversation(smol: anthropic.Anthropic) -> None:
    """Two conversations that differ from their first user word share only
    what their prompts share: the restore takes no more than the common
    prefix (exact usage; count_tokens agrees)."""
    base = {"model": MODEL, "max_tokens": 4, "system": SYSTEM_MAIN, "extra_body": GREEDY}
    smol.messages.create(**base, messages=[turn("Roses need what kind of light?")])
    side(smol)
    other = [turn("Tulips need what kind of light?")]
    reply = smol.messages.create(**base, messages=other)
    counted = smol.messages.count_tokens(model=MODEL, system=SYSTEM_MAIN, messages=other).input_tokens
    assert reply.usage.input_tokens + reply.usage.cache_read_input_tokens == counted
    # The system prompt is shared and may be restored; the user turn is not.
    assert reply.usage.input_tokens >= 5
