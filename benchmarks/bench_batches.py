"""Interactive latency while a Message Batch runs, vs on an idle model (issue 20).

One ``missive serve`` of the embedded SmolLM2-135M (CPU; ``parallel``
slots, ``--parallel``, default 4; ``batches.max_slots``, ``--max-slots``,
default the server's 0.5), its own state directory. For each interactive
concurrency in ``--concurrency`` (default ``1`` and the slot count: at the
slot count every interactive request needs a slot batches hold, so each
one preempts a batch request):

* **idle**: ``--iterations`` rounds of that many concurrent streaming
  requests (a short prompt, ``max_tokens`` ``--tokens``, default 32,
  greedy) on the idle model;
* **batch**: a batch of ``--batch-requests`` long requests (``max_tokens``
  ``--batch-tokens``, default 256) is created and, once batch requests
  run, the same rounds are measured again; the batch is then canceled.

Reported per phase: median and 90th percentile of the interactive requests'
time to first token (TTFT) and end-to-end time, their decode speed
(tokens/s after the first token), and during the batch the batch's output
tokens/s (from the results of the requests that finished) and preemptions
(from ``/metrics``). "prompt read" is the mean of the interactive requests'
``input_tokens``: the prompt tokens not served from the cache, which the
model had to read before the first token. Target: TTFT during the batch
<= 1.5 x idle at the slot count (an interactive request waits at most one
decode step for a batch's slot); the decode-speed ratio shows what batch
sequences decoded beside an interactive one cost it (``max_slots`` bounds
it).

    .venv/bin/python benchmarks/bench_batches.py [--parallel 4] [--max-slots 0.5] [--iterations 10]
        [--concurrency 1 4] [--tokens 32] [--batch-requests 64] [--batch-tokens 256]

A 1-iteration smoke: ``--iterations 1 --batch-requests 4 --batch-tokens 32``.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path

MODEL = "smollm2-135m"
PROMPTS = ["Hi!", "Name a colour.", "Say hello to Anna.", "Good morning.", "Name a fruit.", "Say yes."]
TOPICS = ["a lighthouse keeper", "a dragon who collects clocks", "a girl who sails alone", "the last library"]


def stream_once(client: httpx.Client, prompt: str, tokens: int) -> dict[str, float]:
    """One streaming request: TTFT, end-to-end seconds, output tokens."""
    body = {
        "model": MODEL,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "messages": [{"role": "user", "content": prompt}],
    }
    start = time.perf_counter()
    first = None
    output = 0
    read = 0
    with client.stream("POST", "/v1/messages", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            if '"message_start"' in line:
                read = json.loads(line[6:])["message"]["usage"]["input_tokens"]  # not from the cache
            if first is None and '"content_block_delta"' in line:
                first = time.perf_counter()
            if '"message_delta"' in line:
                output = json.loads(line[6:])["usage"]["output_tokens"]
    end = time.perf_counter()
    first = first or end
    return {
        "ttft": first - start,
        "e2e": end - start,
        "tokens": output,
        "read": read,
        "decode": (output - 1) / (end - first) if output > 1 and end > first else float("nan"),
    }


def rounds(url: str, concurrency: int, iterations: int, tokens: int) -> list[dict[str, float]]:
    out: list[dict[str, float]] = []
    with httpx.Client(base_url=url, timeout=600) as client, ThreadPoolExecutor(concurrency) as pool:
        for i in range(iterations):
            prompts = [PROMPTS[(i + k) % len(PROMPTS)] for k in range(concurrency)]
            out += list(pool.map(lambda p: stream_once(client, p, tokens), prompts))
    return out


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    total = 0.0
    for match in re.finditer(rf"^missive:{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE):
        total += float(match.group(1))
    return total


def summary(samples: list[dict[str, float]]) -> dict[str, float]:
    def q(key: str, p: float) -> float:
        values = sorted(s[key] for s in samples if s[key] == s[key])
        return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")

    return {
        "ttft_p50": q("ttft", 0.5),
        "ttft_p90": q("ttft", 0.9),
        "e2e_p50": q("e2e", 0.5),
        "e2e_p90": q("e2e", 0.9),
        "decode_p50": q("decode", 0.5),
        "read_mean": sum(s["read"] for s in samples) / len(samples) if samples else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--max-slots", type=float, default=0.5, help="a fraction (<= 1) of the slots")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--concurrency", type=int, nargs="+")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--batch-requests", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=256)
    args = parser.parse_args()
    levels = args.concurrency or sorted({1, args.parallel})
    with tempfile.TemporaryDirectory(prefix="bench-batches-") as state:
        config = {
            "batches": {"max_slots": args.max_slots},
            "models": {
                MODEL: {
                    "driver": "llamacpp",
                    "context_window": 2048,
                    "settings": {"model_path": str(default_model_path()), "parallel": args.parallel},
                }
            },
        }
        with live_server(config, env={"MISSIVE_STATE_DIR": state}, timeout=300) as url:
            rounds(url, 1, 1, 4)  # warm-up
            print(
                f"SmolLM2-135M, parallel={args.parallel}, batches.max_slots={args.max_slots}, "
                f"interactive max_tokens={args.tokens}, batch {args.batch_requests} x {args.batch_tokens} "
                "tokens"
            )
            for concurrency in levels:
                idle = summary(rounds(url, concurrency, args.iterations, args.tokens))
                requests = [
                    {
                        "custom_id": f"r{i}",
                        "params": {
                            "model": MODEL,
                            "max_tokens": args.batch_tokens,
                            "temperature": 0,
                            "messages": [
                                {"role": "user", "content": f"Write a very long story about {TOPICS[i % 4]}."}
                            ],
                        },
                    }
                    for i in range(args.batch_requests)
                ]
                batch = httpx.post(
                    f"{url}/v1/messages/batches", json={"requests": requests}, timeout=600
                ).json()
                deadline = time.monotonic() + 300
                while metric(url, "batch_requests_running") < 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                preempted, started = metric(url, "batch_preemptions_total"), time.monotonic()
                during = summary(rounds(url, concurrency, args.iterations, args.tokens))
                preemptions = metric(url, "batch_preemptions_total") - preempted
                httpx.post(f"{url}/v1/messages/batches/{batch['id']}/cancel", timeout=60)
                while (
                    httpx.get(f"{url}/v1/messages/batches/{batch['id']}", timeout=60).json()[
                        "processing_status"
                    ]
                    != "ended"
                ):
                    time.sleep(0.05)
                # The batch's useful output: tokens of the requests that ended
                # (a preempted request starts again, and a canceled one keeps
                # nothing), over the time from its first running request to
                # the end of the cancel. The metrics counter moves only when a
                # request ends, so it cannot give a rate over a short window.
                elapsed = time.monotonic() - started
                results = httpx.get(f"{url}/v1/messages/batches/{batch['id']}/results", timeout=60).text
                finished = [json.loads(line)["result"] for line in results.splitlines() if line.strip()]
                finished = [r for r in finished if r["type"] == "succeeded"]
                batch_rate = sum(r["message"]["usage"]["output_tokens"] for r in finished) / elapsed
                print(f"\ninteractive concurrency {concurrency} ({args.iterations} rounds)")
                print(
                    f"  {'':8} {'TTFT p50':>9} {'TTFT p90':>9} {'e2e p50':>9} {'e2e p90':>9} "
                    f"{'decode tok/s':>13} {'prompt read':>12}"
                )
                for name, s in (("idle", idle), ("batch", during)):
                    print(
                        f"  {name:8} {s['ttft_p50']:9.3f} {s['ttft_p90']:9.3f} {s['e2e_p50']:9.3f} "
                        f"{s['e2e_p90']:9.3f} {s['decode_p50']:13.1f} {s['read_mean']:12.1f}"
                    )
                ratio = during["ttft_p50"] / idle["ttft_p50"] if idle["ttft_p50"] else float("nan")
                print(
                    f"  TTFT p50 batch/idle {ratio:.2f} (target <= 1.5 at the slot count); decode speed "
                    f"batch/idle {during['decode_p50'] / idle['decode_p50']:.2f}; batch output "
                    f"{batch_rate:.1f} tokens/s ({len(finished)} requests finished); {preemptions:.0f} "
                    "preemptions"
                )


if __name__ == "__main__":
    main()
