"""What a verifying step costs on this machine: ``speculative = "auto"``'s measure.

A step that verifies a draft decodes the sequence's last token and the
``k`` drafted ones in one ``llama_decode``, logits at each. At full
acceptance it emits ``k + 1`` tokens for ``cost(k + 1) / cost(1)`` plain
steps, so the best speed-up any draft can give is
``(k + 1) / (cost(k + 1) / cost(1))`` (:func:`missive_llamacpp.speculative.auto_decision`).
Where decode is memory-bound (a large model, a GPU) reading 9 tokens costs
little more than reading one and drafting pays; where it is compute-bound
(a small model on a few CPU cores: SmolLM2-135M on 2 cores reads 9 tokens
in ~7 times one token's time, ``benchmarks/bench_speculative.py``) no draft
can, and rejected drafts are a loss.

:func:`step_costs` measures both at load, in the model's own context
(after the warm-up, before any request), on sequence 0 from position 0,
then clears the memory: the median of a few runs each.
:func:`decode_costs` is the measure itself, for any sizes after any
context (``benchmarks/bench_speculative.py`` uses it after 1,024 tokens).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from typing import Any

import llama_cpp

__all__ = ["decode_costs", "step_costs"]

#: Runs of each size; their median is the cost.
RUNS = 3


def decode_costs(
    ctx: Any, batch: Any, tokens: list[int], sizes: Iterable[int], start: int = 0, runs: int = RUNS
) -> dict[int, float]:
    """Seconds of one ``llama_decode`` of ``n`` tokens (``tokens[:n]``, logits
    at each, sequence 0 from position ``start``) for each ``n`` in ``sizes``:
    the median of ``runs``. Each run's tokens leave the cache after it, so
    every run decodes after the same ``start`` tokens (those already in
    sequence 0). ``batch`` has room for the largest ``n``."""
    memory = llama_cpp.llama_get_memory(ctx)

    def once(n: int) -> float:
        for i in range(n):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tokens[i], start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = n
        started = time.perf_counter()
        rc = llama_cpp.llama_decode(ctx, batch)
        llama_cpp.llama_synchronize(ctx)
        took = time.perf_counter() - started
        llama_cpp.llama_memory_seq_rm(memory, 0, start, -1)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return took

    return {n: statistics.median(once(n) for _ in range(runs)) for n in sizes}


def step_costs(ctx: Any, batch: Any, vocab_size: int, step: int) -> tuple[float, float]:
    """Seconds of one ``llama_decode`` of 1 token and of ``step`` tokens
    (logits at each), in ``ctx`` with ``batch`` (room for ``step``), from
    position 0; the memory is cleared after."""
    tokens = [(i * 7919) % max(vocab_size, 1) for i in range(step)]
    try:
        costs = decode_costs(ctx, batch, tokens, (1, step))
    finally:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    return costs[1], costs[step]
