"""The fit arithmetic, the cost measurement and the prompt cache store on
mlx-lm's real cache classes, without a model."""

from __future__ import annotations

import re
from typing import Any

import pytest

from missive.config import ConfigError
from missive_mlx.memory import MIB, Budget, KvCosts, always_trimmable, fit, measure_costs
from missive_mlx.prompt_cache import PromptCacheStore


def filled(cache: Any, tokens: int, heads: int = 2, dim: int = 32) -> Any:
    """Feed ``tokens`` random keys/values to an mlx-lm attention cache."""
    import mlx.core as mx

    k = mx.random.normal((1, heads, tokens, dim))
    cache.update_and_fetch(k, k)
    mx.eval(cache.state)
    return cache


# -- measure_costs ------------------------------------------------------------


def test_costs_of_a_full_attention_cache_are_layers_heads_dim_two_bytes() -> None:
    from mlx_lm.models.cache import KVCache

    costs = measure_costs([filled(KVCache(), 1) for _ in range(3)])
    assert costs.per_token == 3 * 2 * 32 * 2 * 4  # layers x kv heads x head dim x (k, v) x float32
    assert costs.windowed == () and costs.fixed == 0 and costs.layout == "3 KVCache"
    assert costs.nbytes(1000) == 1000 * costs.per_token


def test_costs_of_quantized_sliding_and_recurrent_layers() -> None:
    import mlx.core as mx
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    full = filled(KVCache(), 1)
    q8 = full.to_quantized(group_size=32, bits=8)
    # 8-bit: one byte a value, plus a float32 scale and bias per 32 values
    assert measure_costs([q8]).per_token == 2 * 2 * (32 + 2 * 4)
    state = ArraysCache(size=1)
    state[0] = mx.zeros((1, 3, 64))
    costs = measure_costs([filled(RotatingKVCache(max_size=16), 1), state, full])
    assert costs.windowed == ((2 * 2 * 32 * 4, 16),) and costs.fixed == 3 * 64 * 4
    assert costs.per_token == 2 * 2 * 32 * 4
    assert costs.nbytes(10) == 10 * 512 + 10 * 512 + 768
    assert costs.nbytes(1000) == 1000 * 512 + 16 * 512 + 768  # the window stops growing
    assert costs.layout == "1 RotatingKVCache + 1 ArraysCache + 1 KVCache"


def test_always_trimmable() -> None:
    from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

    assert always_trimmable([KVCache(), KVCache()])
    assert not always_trimmable([KVCache(), RotatingKVCache(max_size=8)])  # trimmable until it wraps
    assert not always_trimmable([ArraysCache(size=1), KVCache()])


# -- fit ----------------------------------------------------------------------

COSTS = KvCosts(per_token=1024)  # 1 KiB a token: 1024 tokens = 1 MiB


def test_auto_window_is_the_trained_context_when_it_fits() -> None:
    f = fit("m", COSTS, Budget(100 * MIB, "RAM: test"), trained=8192, window=None, entries=4)
    assert f.window == 8192 and f.kv_bytes == 5 * 8 * MIB
    assert "context_window auto = min(trained 8192, fits 8192)" in f.arithmetic
    assert "RAM: test = 100 MiB for 5 caches (1 + 4 kept)" in f.arithmetic
    assert f.arithmetic.startswith("KV 1024 B/token")


def test_auto_window_shrinks_to_what_fits_for_the_kept_caches() -> None:
    f = fit("m", COSTS, Budget(20 * MIB, "RAM: test"), trained=32768, window=None, entries=4)
    assert f.window == 4096  # 5 caches x 4096 tokens x 1 KiB = 20 MiB
    f0 = fit("m", COSTS, Budget(20 * MIB, "RAM: test"), trained=32768, window=None, entries=0)
    assert f0.window == 20480


def test_quantized_cache_fits_a_longer_window() -> None:
    q8 = KvCosts(per_token=544)  # about half, as mx.quantize's 8 bits with group 64
    plain = fit("m", COSTS, Budget(10 * MIB, "x"), trained=65536, window=None, entries=0)
    quant = fit(
        "m",
        COSTS,
        Budget(10 * MIB, "x"),
        trained=65536,
        window=None,
        entries=0,
        quantized=q8,
        quantized_start=0,
    )
    assert plain.window == 10240 and quant.window == 10 * MIB // 544
    assert "quantized from 0 tokens: 544 B/token" in quant.arithmetic
    # before quantized_start the cache keeps its dtype; at it both copies exist for a moment
    late = fit(
        "m",
        COSTS,
        Budget(10 * MIB, "x"),
        trained=65536,
        window=None,
        entries=0,
        quantized=q8,
        quantized_start=5000,
    )
    assert late.window == 10 * MIB // 544 and late.kv_bytes >= 5000 * (1024 + 544)


def test_a_set_window_that_cannot_fit_one_conversation_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        fit("big", COSTS, Budget(10 * MIB, "RAM: 12 MiB available"), trained=8192, window=16384, entries=4)
    message = str(caught.value)
    assert re.search(r"model 'big': a KV cache of 16384 tokens needs 16 MiB, but only 10 MiB", message)
    assert "RAM: 12 MiB available" in message and "kv_bits" in message


def test_a_set_window_whose_kept_caches_may_not_fit_is_logged() -> None:
    f = fit("m", COSTS, Budget(10 * MIB, "x"), trained=8192, window=8192, entries=4)
    assert f.window == 8192 and "5 full caches of 8192 tokens would exceed it" in f.arithmetic


def test_auto_window_below_the_minimum_is_a_config_error_naming_the_memory() -> None:
    with pytest.raises(
        ConfigError, match=r"a KV cache of 2048 tokens \(5 caches: .*\) needs 10 MiB, but only 1 MiB"
    ):
        fit("m", COSTS, Budget(1 * MIB, "x"), trained=8192, window=None, entries=4)
    with pytest.raises(ConfigError, match="gives no max_position_embeddings"):
        fit("m", COSTS, Budget(1 * MIB, "x"), trained=None, window=None, entries=4)


# -- the store on mlx-lm's caches that cannot be trimmed ----------------------


def store() -> PromptCacheStore:
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    return PromptCacheStore(4, can_trim=can_trim_prompt_cache, trim=trim_prompt_cache)


def wrapped_window(tokens: int) -> list[Any]:
    """A sliding-window layer that has wrapped (no longer trimmable) and a full one."""
    from mlx_lm.models.cache import KVCache, RotatingKVCache

    return [filled(RotatingKVCache(max_size=8, keep=0), tokens), filled(KVCache(), tokens)]


def recurrent(tokens: int) -> list[Any]:
    import mlx.core as mx
    from mlx_lm.models.cache import ArraysCache, KVCache

    state = ArraysCache(size=1)
    state[0] = mx.full((1, 4), float(tokens))
    return [state, filled(KVCache(), tokens)]


@pytest.mark.parametrize("make", [wrapped_window, recurrent], ids=["sliding-window", "recurrent"])
def test_untrimmable_prefix_is_reused_as_a_copy_and_kept(make: Any) -> None:
    from mlx_lm.models.cache import can_trim_prompt_cache

    s = store()
    tokens = list(range(20))
    cache = make(20)
    assert not can_trim_prompt_cache(cache)
    s.put(tokens, cache)
    prompt = tokens + [99, 98]
    assert s.reusable(prompt) == 20
    taken, n = s.take(prompt, lambda: [])
    assert n == 20 and taken is not cache and taken[1].offset == 20
    assert len(s) == 1 and s.reusable(tokens + [7, 7]) == 20  # the entry still serves a diverging prompt
    # a prompt that diverges inside the entry cannot cut it back: nothing reused
    assert s.reusable(tokens[:10] + [5, 5, 5]) == 0
    # the extended copy, stored, does not replace the entry it extends
    s.put(prompt, taken)
    assert len(s) == 2 and s.reusable(tokens + [7, 7]) == 20 and s.reusable(prompt + [1]) == 22


def test_trimmable_prefix_is_still_taken_in_place() -> None:
    from mlx_lm.models.cache import KVCache

    s = store()
    cache = [filled(KVCache(), 5)]
    s.put([1, 2, 3, 4, 5], cache)
    taken, n = s.take([1, 2, 3, 4, 5, 6], lambda: [])
    assert taken is cache and n == 5 and len(s) == 0


def test_checkpoints_are_evicted_only_by_checkpoints() -> None:
    s = PromptCacheStore(2, can_trim=lambda c: False, trim=lambda c, n: 0)
    s.put([1, 2, 3], ["conversation checkpoint"], checkpoint=True)
    for side in range(5):  # side requests' entries come and go
        s.put([50 + side, 1], [f"side {side}"])
    assert len(s) == 3 and s.reusable([1, 2, 3, 4]) == 3
    s.put([7, 7], ["c2"], checkpoint=True)
    s.put([8, 8], ["c3"], checkpoint=True)  # a third checkpoint: the least recent one goes
    assert s.reusable([1, 2, 3, 4]) == 0 and s.reusable([8, 8, 1]) == 2 and len(s) == 4


def test_host_memory_is_read() -> None:
    from missive_mlx.memory import _host_memory, free_memory

    total, available = _host_memory()
    assert 0 < available <= total
    budget = free_memory()
    assert budget.nbytes <= available and "margin" in budget.where
