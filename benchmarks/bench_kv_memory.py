"""KV cache memory of 4 slots at the default model's window: per-slot f16 (before issue 28) vs one
unified pool.

Loads the embedded SmolLM2-135M (8,192-token window) in-process three ways
and prints the KV cache llama.cpp itself reports while making the context
(``llama_kv_cache: size = ...``, read by :mod:`missive_llamacpp.memory`):

* ``kv_unified = false``, ``f16``: a KV stream of a whole window per slot,
  what the driver made before (``4 x 8192`` cells);
* ``kv_unified = true``, ``f16``: one pool the slots share, sized on auto
  (here also ``4 x 8192``: the machine has room; on a smaller one the pool
  shrinks and the slots still run);
* ``kv_unified = true``, ``q8_0`` keys and values (flash attention on).

    .venv/bin/python benchmarks/bench_kv_memory.py
"""

from __future__ import annotations

from typing import Any

from missive_llamacpp.memory import MIB
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.runner import LlamaCppRunner
from missive_llamacpp.settings import parse_settings

CASES: list[tuple[str, dict[str, Any]]] = [
    ("per slot, f16 (before)", {"kv_unified": False}),
    ("unified pool, f16", {}),
    ("unified pool, q8_0", {"cache_type_k": "q8_0", "cache_type_v": "q8_0"}),
]


def main() -> None:
    sizes = {}
    for label, settings in CASES:
        runner = LlamaCppRunner(
            "smol",
            parse_settings("smol", {"model_path": str(default_model_path()), "parallel": 4, **settings}),
            8192,
        )
        info = runner.load()
        layout = runner._layout
        assert layout is not None
        sizes[label] = layout.report.kv_bytes
        print(
            f"{label:26} {info.slots} slots, {layout.n_ctx} cells: KV {layout.report.kv_bytes / MIB:7.1f} "
            f"MiB (llama.cpp's report), compute buffers {layout.report.compute_bytes / MIB:.1f} MiB"
        )
        runner.close()
    before = sizes[CASES[0][0]]
    for label, _ in CASES[1:]:
        print(f"{label} / per slot f16: {sizes[label] / before:.3f}")


if __name__ == "__main__":
    main()
