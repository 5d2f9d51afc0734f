"""A hybrid model served for real: prompt reuse, checkpoints and the shared KV pool, through the SDK.

The model is a tiny random-weight LFM2 (short convolutions + attention,
``llama_model_is_hybrid``) written by :mod:`missive_llamacpp.testing_hybrid`:
its recurrent state cannot be cut, the case where the runner used to read
the whole prompt again on every turn. Two live ``missive serve``:

* ``auto``: ``parallel``, the pool and the cache types left to their
  defaults (the load line says what was chosen); a 4-turn conversation with
  Claude Code-like side requests between the turns (a title request with
  another system prompt, ``count_tokens``) reads at least 95 % of each later
  turn's prompt from cache, and an edited last turn restores the checkpoint
  taken ``n_ubatch + 4`` tokens before the end of the prompt it edits, with
  exact usage;
* ``pool``: 5 slots sharing a 32,768-token pool: four conversations of about
  6,000 tokens run together with a fifth of about 10,000 that cannot fit
  beside them all; every answer ends whole with exact usage, the pool
  made room (a wait, a pause, or an idle slot emptied into the host-memory
  cache: ``/v1/status`` counts them), and the first conversation's next
  turn is read from cache, from its slot or from host memory.

Usage is checked against ``count_tokens`` everywhere (``input_tokens +
cache_read_input_tokens``); no timing is asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import ServerProcess, ask_counted, serve_process

pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")

MODEL = "tiny-hybrid"
GREEDY = {"temperature": 0.0}
DEADLINE = 900.0


def words(n: int, tag: str) -> str:
    """About ``6 n`` tokens of text that no other call repeats (``tag``)."""
    return " ".join(f"{tag}{i % 97}x{i // 97}" for i in range(n))


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from missive_llamacpp.testing_hybrid import write_tiny

    return write_tiny(tmp_path_factory.mktemp("hybrid") / "lfm2.gguf", "lfm2")


def entry(path: Path, **settings: Any) -> dict[str, Any]:
    return {"driver": "llamacpp", "context_window": 16384, "settings": {"model_path": str(path), **settings}}


@pytest.fixture(scope="module")
def auto(gguf_path: Path) -> Iterator[ServerProcess]:
    with serve_process({"models": {MODEL: entry(gguf_path)}}, timeout=300) as server:
        yield server


@pytest.fixture(scope="module")
def pool(gguf_path: Path) -> Iterator[ServerProcess]:
    config = {
        "models": {MODEL: {**entry(gguf_path, parallel=5, kv_pool_tokens=32768), "context_window": 12288}}
    }
    with serve_process(config, timeout=300) as server:
        yield server


def sdk(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)


def ask(
    client: anthropic.Anthropic, messages: list[dict[str, Any]], system: str, max_tokens: int = 12
) -> tuple[Any, int]:
    """The answer and the prompt's ``count_tokens``; usage is checked exact."""
    return ask_counted(client, MODEL, messages, system, max_tokens, **GREEDY)


def status(server: ServerProcess) -> dict[str, Any]:
    info: dict[str, Any] = httpx.get(f"{server.url}/v1/status", timeout=30).json()["models"][MODEL][
        "driver_status"
    ]
    return info


def test_auto_settings_are_in_the_load_line(auto: ServerProcess) -> None:
    log = auto.log()
    line = next(x for x in log.splitlines() if f"model {MODEL} loaded from" in x)
    assert "shared by 4 slots (kv_unified)" in line and "flash_attn auto:" in line, line
    assert "prompt reuse: whole cached prefix or checkpoints" in line, line
    memory = next(x for x in log.splitlines() if f"model {MODEL} memory:" in x)
    assert "parallel auto = 4" in memory and "kv_pool_tokens auto" in memory and "B/token" in memory, memory


def test_four_turns_with_side_requests_read_from_cache(auto: ServerProcess) -> None:
    client = sdk(auto)
    system = "You are a helpful assistant. " + words(700, "sys")
    messages: list[dict[str, Any]] = []
    for turn in range(4):
        messages.append({"role": "user", "content": f"Question {turn}: " + words(10, f"q{turn}")})
        message, counted = ask(client, messages, system)
        read = message.usage.cache_read_input_tokens or 0
        if turn > 0:
            assert read >= 0.95 * counted, f"turn {turn}: {read} of {counted} prompt tokens read from cache"
        messages.append(
            {"role": "assistant", "content": message.content[0].text if message.content else "ok"}
        )
        # Claude Code's side requests between turns: a title with its own system prompt.
        ask(
            client,
            [{"role": "user", "content": "Title for: " + words(30, f"side{turn}")}],
            "Write a 5-word title for the conversation.",
            max_tokens=6,
        )


def test_an_edited_last_turn_restores_a_checkpoint(auto: ServerProcess) -> None:
    client = sdk(auto)
    system = "You answer briefly. " + words(500, "edit")
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "First: " + words(60, "one")},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Second: " + words(60, "two")},
    ]
    _, first = ask(client, history, system)
    # The last turn edited (Claude Code's microcompact, a replaced tool result).
    edited = [*history[:-1], {"role": "user", "content": "Second, edited: " + words(60, "other")}]
    message, counted = ask(client, edited, system)
    read = message.usage.cache_read_input_tokens or 0
    # The checkpoint taken n_ubatch + 4 tokens before the first prompt's end
    # (the edited turn is shorter than n_ubatch = 512 tokens).
    assert first - 4 - 512 <= read < counted - 200, (read, first, counted)


def test_four_long_conversations_share_the_pool_with_a_fifth(pool: ServerProcess) -> None:
    client = sdk(pool)
    line = next(x for x in pool.log().splitlines() if f"model {MODEL} loaded from" in x)
    assert "KV pool 32768 tokens shared by 5 slots" in line, line
    conversations = [[{"role": "user", "content": words(1040, f"conv{i}")}] for i in range(4)]
    fifth = [{"role": "user", "content": words(1900, "fifth")}]

    def run(messages: list[dict[str, Any]]) -> tuple[Any, int]:
        return ask(client, messages, "Answer.", max_tokens=8)

    with ThreadPoolExecutor(5) as pool_:
        futures = [pool_.submit(run, c) for c in conversations]
        later = pool_.submit(run, fifth)
        results = [f.result() for f in futures]
        last, counted = later.result()
    assert all(6000 <= counted for _, counted in results), [c for _, c in results]
    assert last.stop_reason in ("max_tokens", "end_turn") and sum(c for _, c in results) + counted > 32768
    state = status(pool)
    assert state["kv_pool_tokens"] == 32768
    # 4 x 6k + 10k > 32k: the fifth waited for cells, paused a running
    # conversation, or emptied an idle one into host memory (which, depends
    # on how far the others were: nothing here is timed).
    assert state["kv_pool_waits"] + state["kv_pool_pauses"] + state["kv_pool_evictions"] >= 1, state
    if state["kv_pool_evictions"]:
        assert state["host_cache_entries"] >= 1, state
    # The first conversation's next turn: from its slot or back from host memory.
    answer = results[0][0].content[0].text if results[0][0].content else "ok"
    follow = [
        *conversations[0],
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And then?"},
    ]
    message, counted = run(follow)
    assert (message.usage.cache_read_input_tokens or 0) >= 0.9 * counted
