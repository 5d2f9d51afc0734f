"""Interleaved conversations on one local model: the host-memory prompt cache.

A main conversation with a long system prompt (``--system-tokens``, default
~2,400 tokens, as Claude Code's is several thousand) runs ``--turns`` turns.
Measured three ways, each on its own ``missive serve`` of the embedded
SmolLM2-135M, in one run:

* **alone**: the turns back to back (the KV cache always holds the prompt);
* **interleaved**: after each turn a short side request with another system
  prompt (Claude Code's title and topic requests, a subagent, a second user),
  with the host-memory prompt cache on (the default);
* **interleaved, no cache**: the same with ``cache_ram_mib = 0`` (what the
  driver did before the cache: every side request evicts the main prompt).

Reported: the median time to first token of the later turns (2..N) of each,
and the ratios interleaved/alone. Target (issue 14): interleaved with the
cache <= 1.3 x alone.

``--model hybrid`` runs a tiny random-weight LFM2 (short convolutions and
attention: a recurrent state that cannot be cut, written by
:mod:`missive_llamacpp.testing_hybrid`) instead: before issue 28 such a
model read its whole prompt again on every turn; the first turn's TTFT (the
whole prompt read) is printed as that reference. Target (issue 28): later
turns interleaved <= 1.3 x alone.

    .venv/bin/python benchmarks/bench_prompt_cache.py [--turns 4] [--system-tokens 2400] [--model hybrid]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path

MODEL = "smollm2-135m"
QUESTIONS = [
    "How often should I water a cactus?",
    "And a fern?",
    "What about orchids?",
    "And basil on a windowsill?",
    "What soil does a tomato like?",
    "How much light does mint need?",
]


def system_prompt(tokens: int) -> str:
    # ~20 tokens per rule with SmolLM2's tokenizer.
    rules = [
        f"Rule {i}: answer about plants, soil, water and light, in plain words, never about anything else."
        for i in range(max(1, tokens // 20))
    ]
    return "You are a careful assistant for a team of gardeners. " + " ".join(rules)


def ttft(
    client: httpx.Client, system: str, messages: list[dict[str, Any]], max_tokens: int
) -> tuple[float, str, dict]:
    """Seconds to the first text delta, the answer's text, and its usage."""
    body = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "system": system,
        "messages": messages,
    }
    start = time.perf_counter()
    first: float | None = None
    text, usage = "", {}
    with client.stream("POST", "/v1/messages", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_delta" and event["delta"].get("type") == "text_delta":
                first = first or time.perf_counter()
                text += event["delta"]["text"]
            elif event["type"] == "message_start":
                usage = dict(event["message"]["usage"])
    assert first is not None, "no text"
    return first - start, text, usage


def conversation(url: str, system: str, turns: int, interleave: bool) -> list[tuple[float, int, int]]:
    """(ttft, cache_read, prompt) of each main turn."""
    side_system = "Write a five-word title for the conversation. " + "Be short. " * 30
    results = []
    messages: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=900) as client:
        for i in range(turns):
            messages.append({"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]})
            seconds, text, usage = ttft(client, system, messages, 24)
            results.append(
                (
                    seconds,
                    usage["cache_read_input_tokens"],
                    usage["input_tokens"] + usage["cache_read_input_tokens"],
                )
            )
            messages.append({"role": "assistant", "content": text or "..."})
            if interleave:
                ttft(client, side_system, [{"role": "user", "content": f"Summarise: {QUESTIONS[i]}"}], 6)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--system-tokens", type=int, default=2400)
    parser.add_argument("--model", choices=("smollm2", "hybrid"), default="smollm2")
    args = parser.parse_args()
    system = system_prompt(args.system_tokens)
    model_path = str(default_model_path())
    if args.model == "hybrid":
        from missive_llamacpp.testing_hybrid import write_tiny

        model_path = str(write_tiny(Path(tempfile.mkdtemp()) / "lfm2.gguf", "lfm2"))

    def config(cache: int | None) -> dict[str, Any]:
        settings: dict[str, Any] = {"model_path": model_path}
        if cache is not None:
            settings["cache_ram_mib"] = cache
        return {"models": {MODEL: {"driver": "llamacpp", "context_window": 8192, "settings": settings}}}

    runs = {}
    for name, cache, interleave in (
        ("alone", None, False),
        ("interleaved", None, True),
        ("interleaved, no cache", 0, True),
    ):
        with live_server(config(cache), timeout=300) as url:
            runs[name] = conversation(url, system, args.turns, interleave)
    print(
        f"{args.model}: main prompt {runs['alone'][0][2]} tokens on turn 1 (read whole: "
        f"{runs['alone'][0][0]:.2f} s);"
        f" {args.turns} turns\n"
    )
    print(f"{'':24}{'later-turn TTFT (median)':>26}{'cache reads per turn':>34}")
    medians = {}
    for name, results in runs.items():
        later = [r[0] for r in results[1:]]
        medians[name] = statistics.median(later)
        reads = ", ".join(f"{r[1]}/{r[2]}" for r in results[1:])
        print(f"{name:24}{medians[name]:24.2f} s  {reads:>32}")
    print(
        f"\nratio interleaved / alone:           {medians['interleaved'] / medians['alone']:.2f} (target <= "
        "1.3)"
    )
    print(f"ratio interleaved, no cache / alone: {medians['interleaved, no cache'] / medians['alone']:.2f}")
    record(
        "bench_prompt_cache",
        f"{args.model}: later-turn TTFT interleaved / alone",
        medians["interleaved"] / medians["alone"],
        "<= 1.3",
    )


if __name__ == "__main__":
    main()
