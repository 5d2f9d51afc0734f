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
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import llama_cpp

__all__ = ["step_costs"]

#: Runs of each size; their median is the cost.
RUNS = 3


def step_costs(ctx: Any, batch: Any, vocab_size: int, step: int) -> tuple[float, float]:
    """Seconds of one ``llama_decode`` of 1 token and of ``step`` tokens
    (logits at each), in ``ctx`` with ``batch`` (room for ``step``)."""
    memory = llama_cpp.llama_get_memory(ctx)
    tokens = [(i * 7919) % max(vocab_size, 1) for i in range(step)]

    def once(n: int) -> float:
        for i in range(n):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tokens[i], i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = n
        started = time.perf_counter()
        rc = llama_cpp.llama_decode(ctx, batch)
        llama_cpp.llama_synchronize(ctx)
        took = time.perf_counter() - started
        llama_cpp.llama_memory_seq_rm(memory, 0, -1, -1)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        return took

    try:
        one = statistics.median(once(1) for _ in range(RUNS))
        many = statistics.median(once(step) for _ in range(RUNS))
    finally:
        llama_cpp.llama_memory_clear(memory, True)
    return one, many
