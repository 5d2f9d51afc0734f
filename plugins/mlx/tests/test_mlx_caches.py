"""Prompt reuse on caches that cannot be trimmed, the KV cache settings and
the fit to memory, served for real through the SDK.

* ``hybrid`` / ``sliding``: tiny random-weight LFM2 (recurrent convolution
  state) and Gemma 3 (32-token sliding window, wrapped by every prompt
  here) folders (:mod:`tiny_models`): a 4-turn conversation with Claude
  Code-like side requests between the turns reads at least 95 % of each
  later turn from cache; an edited last turn starts from the previous
  turn's entry or its checkpoint; a repeated prompt reads all but its last
  token (the checkpoint at the end of the prompt);
* ``quantized``: SmolLM2 with ``kv_bits = 8`` from the first token: the
  second turn reads the first (prompt and answer) from the quantized cache,
  exactly; the load and memory log lines say what was chosen;
* start-up errors: ``kv_bits`` on a sliding-window model (mlx-lm does not
  quantize a ``RotatingKVCache``), a window that cannot fit in memory.

Usage is checked against ``count_tokens`` everywhere (``input_tokens +
cache_read_input_tokens``); no timing is asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.config import ConfigError, ModelEntry
from missive.testing import ServerProcess, ask_counted, serve_process

MODEL = "tiny"
GREEDY = {"temperature": 0.0}
DEADLINE = 600.0


def words(n: int, tag: str) -> str:
    """Text of about ``4 n`` tokens that no other call repeats (``tag``)."""
    return " ".join(f"{tag}{i % 97}x{i // 97}" for i in range(n))


def serve(path: Path, **settings: Any) -> Any:
    entry = {"driver": "mlx", "settings": {"model_path": str(path), **settings}}
    return serve_process({"models": {MODEL: entry}}, timeout=300)


@pytest.fixture(scope="module", params=["hybrid", "sliding"])
def untrimmable(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    path = request.getfixturevalue(f"{request.param}_model_dir")
    with serve(path) as server:
        yield server


@pytest.fixture(scope="module")
def quantized(mlx_model_dir: Path) -> Iterator[ServerProcess]:
    with serve(mlx_model_dir, kv_bits=8, quantized_kv_start=0) as server:
        yield server


def sdk(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)


def ask(
    client: anthropic.Anthropic, messages: list[dict[str, Any]], system: str, max_tokens: int = 8
) -> tuple[Any, int]:
    """The answer and the prompt's ``count_tokens``; usage is checked exact."""
    return ask_counted(client, MODEL, messages, system, max_tokens, **GREEDY)


def answer_text(message: Any) -> str:
    return message.content[0].text if message.content and message.content[0].text else "ok"


def test_load_line_says_checkpoints_are_on(untrimmable: ServerProcess) -> None:
    client = sdk(untrimmable)
    ask(client, [{"role": "user", "content": "hi"}], "s", max_tokens=1)  # the model is loaded by now
    lines = untrimmable.log().splitlines()
    line = next(x for x in lines if f"model {MODEL} loaded from" in x)
    assert "checkpoints on" in line and "KV cache model dtype" in line, line
    memory = next(x for x in lines if f"model {MODEL} memory:" in x)
    assert "context_window auto = min(trained 4096, fits 4096)" in memory, memory
    assert ("ArraysCache" in memory) or ("RotatingKVCache" in memory and "up to 32 tokens" in memory), memory


def test_four_turns_with_side_requests_read_from_cache(untrimmable: ServerProcess) -> None:
    client = sdk(untrimmable)
    system = "You are a helpful assistant. " + words(600, "sys")
    messages: list[dict[str, Any]] = []
    counts = []
    for turn in range(4):
        messages.append({"role": "user", "content": f"Question {turn}: " + words(10, f"q{turn}")})
        message, counted = ask(client, messages, system)
        counts.append(counted)
        read = message.usage.cache_read_input_tokens or 0
        if turn > 0:
            assert read >= 0.95 * counted, f"turn {turn}: {read} of {counted} prompt tokens read from cache"
        messages.append({"role": "assistant", "content": answer_text(message)})
        if turn < 3:  # Claude Code's side requests between turns: a title with its own system prompt
            ask(
                client,
                [{"role": "user", "content": "Title for: " + words(30, f"side{turn}")}],
                "Write a 5-word title for the conversation.",
                max_tokens=4,
            )
    # The last turn edited: nothing of the last prompt past the edit can be cut
    # back, so it starts from the turn before (its entry, or its checkpoint at
    # the end of its prompt); before checkpoints, this read nothing.
    edited = [*messages[:-2], {"role": "user", "content": "Question 3, edited: " + words(10, "edit")}]
    message, counted = ask(client, edited, system)
    assert (message.usage.cache_read_input_tokens or 0) >= counts[2] - 1
    # The same prompt again (a retry): all but its last token, from the checkpoint.
    again, counted_again = ask(client, edited, system)
    assert again.usage.cache_read_input_tokens == counted_again - 1 and again.usage.input_tokens == 1


def test_kv_bits_second_turn_reads_the_first_exactly(quantized: ServerProcess) -> None:
    client = sdk(quantized)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    first, counted = ask(client, question, "You are terse.", max_tokens=12)
    assert not first.usage.cache_read_input_tokens
    follow_up = [
        *question,
        {"role": "assistant", "content": answer_text(first)},
        {"role": "user", "content": "And Italy?"},
    ]
    second, _ = ask(client, follow_up, "You are terse.", max_tokens=4)
    # the whole first prompt and its answer (re-rendered by the template) from the quantized cache
    assert (second.usage.cache_read_input_tokens or 0) >= counted + first.usage.output_tokens
    lines = quantized.log().splitlines()
    line = next(x for x in lines if f"model {MODEL} loaded from" in x)
    assert "KV cache 8-bit (group 64) from 0 tokens" in line and "checkpoints off" in line, line
    assert "prefill_step_size 2048" in line, line
    memory = next(x for x in lines if f"model {MODEL} memory:" in x)
    assert (
        "(30 KVCache)" in memory
        and "quantized from 0 tokens:" in memory
        and "(30 QuantizedKVCache)" in memory
    ), memory


# -- start-up errors (the driver alone) ----------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def start(path: Path, context_window: int | None = None, **settings: Any) -> None:
    from missive_mlx.driver import MlxDriver

    entry = ModelEntry(
        driver="mlx", context_window=context_window, settings={"model_path": str(path), **settings}
    )
    driver = MlxDriver("m", entry)
    try:
        await driver.start()
    finally:
        await driver.aclose()


@pytest.mark.anyio
async def test_kv_bits_on_a_sliding_window_model_is_a_start_up_error(sliding_model_dir: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"model 'm': mlx-lm cannot quantize this model's KV cache with kv_bits = 8.*"
        r"RotatingKVCache.*unset kv_bits",
    ):
        await start(sliding_model_dir, kv_bits=8)


@pytest.mark.anyio
async def test_a_group_size_that_does_not_divide_the_head_is_a_start_up_error(hybrid_model_dir: Path) -> None:
    # head dimension 32 (the LFM2 here: 64 hidden / 2 heads); mx.quantize needs the group to divide it
    with pytest.raises(
        ConfigError, match=r"kv_group_size = 64 .*ValueError.*divides the model's head dimension"
    ):
        await start(hybrid_model_dir, kv_bits=4, kv_group_size=64)


@pytest.mark.anyio
async def test_a_window_that_cannot_fit_is_a_start_up_error_naming_the_memory(mlx_model_dir: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"model 'm': a KV cache of 1000000000 tokens needs \d+ MiB, but only \d+ MiB"
    ):
        await start(mlx_model_dir, context_window=10**9)
