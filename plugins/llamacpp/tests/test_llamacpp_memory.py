"""Fitting the KV cache to the machine (missive_llamacpp.memory, .context, .settings).

The arithmetic is checked on stated costs and budgets (no model), the parse
on llama.cpp's own log lines, and a real load of the embedded SmolLM2 with
every size on auto: the load line and the ``memory:`` line say what was
chosen and why, the unified pool is the default, flash attention ``auto``
is resolved, and a ``q8_0`` cache takes about half the KV memory of f16
(from llama.cpp's report). A window that cannot fit is a start-up error
naming the memory it needs.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from missive.api import ConfigError
from missive_llamacpp.memory import MIB, Budget, Costs, fit, parse_report, per_token_costs
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import parse_settings

#: llama.cpp's lines for a Gemma 3-like model: a full-attention cache of the
#: probe's 1280 cells and a window cache of 512 x 1 + 512 (+ padding) cells.
GEMMA_LINES = [
    "llama_kv_cache:        CPU KV buffer size =     3.75 MiB\n",
    "llama_kv_cache: size =    3.75 MiB (  1280 cells,   3 layers,  1/1 seqs), K (f16):    1.88 MiB, V "
    "(f16):    1.88 MiB\n",
    "llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs), K (f16):    7.50 MiB, V "
    "(f16):    7.50 MiB\n",
    "llama_memory_recurrent: size =    2.00 MiB (     1 cells,   4 layers,  1 seqs), R (f32): 1.00 MiB, S "
    "(f32): 1.00 MiB\n",
    "sched_reserve:        CPU compute buffer size =   98.25 MiB\n",
    "resolve_fused_ops: Flash Attention enabled\n",
]


def test_llama_cpp_report_is_read() -> None:
    report = parse_report(GEMMA_LINES)
    assert [(c.recurrent, c.cells, c.layers) for c in report.caches] == [
        (False, 1280, 3),
        (False, 1024, 15),
        (True, 1, 4),
    ]
    assert report.kv_bytes == round(20.75 * MIB) and report.compute_bytes == round(98.25 * MIB)
    assert report.flash_attn is True
    costs = per_token_costs(report, 1280, n_swa=512)
    assert costs.per_token == 3072  # 3 layers x 1 head x 256 x (K + V) x 2 bytes
    assert costs.per_seq == 512 * 15360 + 2 * MIB  # the window, and the recurrent state
    assert costs.fixed == 512 * 15360  # the window cache's n_ubatch cells


COSTS = Costs(per_token=23040, per_seq=0, fixed=0, compute=0, flash_attn=True)


def test_fit_chooses_window_slots_and_pool() -> None:
    plenty = Budget(4096 * MIB, "test")
    got = fit("m", COSTS, plenty, trained=8192, window=None, parallel="auto", pool="auto", unified=True)
    assert (got.window, got.slots, got.pool) == (8192, 4, 32768)
    assert got.kv_bytes == 32768 * 23040 and "kv_pool_tokens auto" in got.arithmetic
    # Less memory: the pool shrinks first, never below one window.
    tight = Budget(300 * MIB, "test")
    got = fit("m", COSTS, tight, trained=8192, window=8192, parallel="auto", pool="auto", unified=True)
    assert got.window == 8192 and got.slots == 4 and 8192 <= got.pool == 300 * MIB // 23040
    # A slot each (kv_unified = false): fewer slots instead.
    got = fit("m", COSTS, tight, trained=8192, window=8192, parallel="auto", pool="auto", unified=False)
    assert got.slots == 1 and got.pool == 8192
    # context_window on auto: what fits, up to the trained context.
    got = fit(
        "m",
        COSTS,
        Budget(100 * MIB, "test"),
        trained=131072,
        window=None,
        parallel=1,
        pool="auto",
        unified=True,
    )
    assert got.window == 100 * MIB // 23040


def test_a_window_that_cannot_fit_is_a_start_up_error() -> None:
    with pytest.raises(ConfigError) as caught:
        fit(
            "big",
            COSTS,
            Budget(100 * MIB, "RAM: test"),
            trained=131072,
            window=65536,
            parallel="auto",
            pool="auto",
            unified=True,
        )
    message = str(caught.value)
    assert "model 'big': one conversation of 65536 tokens needs 1440 MiB of KV cache" in message
    assert "only 100 MiB" in message and "cache_type_k" in message
    with pytest.raises(ConfigError, match="kv_pool_tokens = 4096 is smaller than context_window = 8192"):
        fit(
            "m",
            COSTS,
            Budget(4096 * MIB, "test"),
            trained=8192,
            window=8192,
            parallel=2,
            pool=4096,
            unified=True,
        )


def test_settings_are_validated() -> None:
    s = parse_settings(
        "m", {"model_path": "x", "cache_type_k": "Q8_0", "cache_type_v": "q8_0", "n_ubatch": 256}
    )
    assert (s.cache_type_k, s.flash_attn, s.kv_unified, s.kv_pool_tokens) == ("q8_0", "auto", True, "auto")
    with pytest.raises(ConfigError, match="needs flash attention"):
        parse_settings("m", {"model_path": "x", "cache_type_v": "q4_0", "flash_attn": "off"})
    with pytest.raises(ConfigError, match="cache_type_k"):
        parse_settings("m", {"model_path": "x", "cache_type_k": "q3_k"})
    with pytest.raises(ConfigError, match="n_ubatch"):
        parse_settings("m", {"model_path": "x", "n_batch": 128, "n_ubatch": 512})
    with pytest.raises(ConfigError, match="kv_pool_tokens"):
        parse_settings("m", {"model_path": "x", "kv_pool_tokens": 10})


def load(caplog: pytest.LogCaptureFixture, context: int | None, **settings: Any) -> tuple[Any, str]:
    from missive_llamacpp.runner import LlamaCppRunner

    runner = LlamaCppRunner(
        "smol", parse_settings("smol", {"model_path": str(default_model_path()), **settings}), context
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="missive.llamacpp"):
        info = runner.load()
    runner.close()
    return info, caplog.text


def test_the_default_model_loads_with_auto_sizes(caplog: pytest.LogCaptureFixture) -> None:
    info, text = load(caplog, 8192)
    assert info.context_window == 8192 and info.slots == 4
    assert "KV pool 32768 tokens shared by 4 slots (kv_unified), 720 MiB (K f16, V f16)" in text, text
    assert re.search(r"flash_attn auto: (on|off)", text) and "prompt reuse: any prefix" in text, text
    assert "model smol memory: KV 23040 B/token" in text and "parallel auto = 4" in text, text
    # q8_0 keys and values: about half of the f16 cache, by llama.cpp's own count.
    _, q8 = load(caplog, 8192, cache_type_k="q8_0", cache_type_v="q8_0")
    mib = int(re.search(r"shared by 4 slots \(kv_unified\), (\d+) MiB \(K q8_0, V q8_0\)", q8).group(1))  # type: ignore[union-attr]
    assert 340 <= mib <= 400, q8  # 382.5 MiB: 34 bytes for 32 values
    # A slot each, as before: 4 x 8192 tokens too, in four streams.
    _, split = load(caplog, 8192, kv_unified=False)
    assert "KV 4 slots x 8192 tokens (kv_unified = false), 720 MiB" in split, split


def test_a_window_beyond_memory_stops_the_load(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import missive_llamacpp.context as context

    monkeypatch.setattr(context, "free_memory", lambda **_: Budget(64 * MIB, "RAM: pretend"))
    with pytest.raises(
        ConfigError, match=r"one conversation of 8192 tokens needs 180 MiB of KV cache .* only 64 MiB"
    ):
        load(caplog, 8192)


def test_experts_kept_in_host_memory_are_checked_against_the_ram(caplog: pytest.LogCaptureFixture) -> None:
    """Weights a tensor override keeps in host memory (``n_cpu_moe``) take
    RAM, not VRAM: named in the VRAM budget, and a warning when they do not
    fit what the RAM has left."""
    from missive_llamacpp.memory import budget

    gib = 1024 * MIB
    fits = budget(
        on_gpu=True,
        vram=(16 * gib, 15 * gib),
        ram=(32 * gib, 28 * gib),
        model_bytes=9 * gib,
        host_cache_bytes=2 * gib,
        host_weight_bytes=9 * gib,
    )
    assert "weights in host memory 9216 MiB (RAM)" in fits.where and "paged from disk" not in fits.where
    with caplog.at_level("WARNING", logger="missive.llamacpp"):
        tight = budget(
            on_gpu=True,
            vram=(16 * gib, 15 * gib),
            ram=(16 * gib, 12 * gib),
            model_bytes=9 * gib,
            host_cache_bytes=2 * gib,
            host_weight_bytes=9 * gib,
        )
    assert tight.nbytes == fits.nbytes  # the KV cache is on the GPU either way
    assert "paged from disk" in tight.where and "do not fit the RAM" in caplog.text
