"""Fit an MLX model's KV cache to the machine: what a token costs, what is free, what fits.

* **What a token costs** (:func:`measure_costs`): mlx-lm builds a model's
  caches itself (``make_prompt_cache`` -> ``model.make_cache()``: a
  ``KVCache`` per attention layer, a ``RotatingKVCache`` of ``max_size``
  tokens per sliding-window layer, an ``ArraysCache`` holding the recurrent
  state of a Mamba/conv layer; ``mlx_lm/models/cache.py``). The runner runs
  one token through a fresh cache at load and this module reads the arrays
  it allocated: a cache with ``keys`` grows with the tokens (bytes per
  allocated row of its keys and values, whatever the layer count, head count,
  head dimension and dtype are: it is the product ``layers x kv heads x head
  dim x 2 x bytes`` measured rather than parsed from ``config.json``); a
  rotating one stops growing at its ``max_size``; anything else (a recurrent
  state) is a fixed size per conversation. With ``kv_bits`` the same cache is
  quantized by mlx-lm's own ``maybe_quantize_kv_cache`` and measured again
  (``QuantizedKVCache``: packed ``uint32`` values plus a scale and a bias per
  group).
* **What is free** (:func:`free_memory`): on Metal, ``mx.device_info()``'s
  ``max_recommended_working_set_size`` (what macOS lets the GPU wire) less
  ``mx.get_active_memory()`` (the weights, loaded by then); on a CPU,
  ``MemAvailable`` of ``/proc/meminfo`` (the weights already resident),
  bounded by a cgroup v2 limit, else ``os.sysconf`` available pages. A margin
  is left to everything else: a tenth of the memory, at least 512 MiB (the
  llamacpp driver's rule, ``missive_llamacpp.memory.margin_bytes``).
* **What fits** (:func:`fit`): the prompt cache keeps up to
  ``prompt_cache_entries`` caches besides the one in use (and as many
  checkpoints for a model that has them), each up to ``context_window``
  tokens, so all of them must fit. With
  ``context_window`` unset, the largest window up to the trained context
  (``max_position_embeddings``) that does; a set window whose one
  conversation does not fit is a :class:`~missive.api.ConfigError` naming the
  memory it needs. Every step goes into :attr:`Fit.arithmetic` for the log.
  Not counted: the activations of a prompt chunk (``prefill_step_size``
  tokens), which the margin covers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from missive.api import ConfigError

__all__ = ["Budget", "Fit", "KvCosts", "always_trimmable", "fit", "free_memory", "measure_costs", "probe"]

MIB = 2**20
#: The smallest window ``context_window`` auto may choose (below it: a start-up error).
MIN_AUTO_WINDOW = 2048


@dataclass(frozen=True)
class KvCosts:
    """Bytes a conversation's cache takes, as mlx-lm allocated them.

    Attributes:
        per_token: bytes a token adds in the layers that keep every token.
        windowed: (bytes a token, ``max_size``) of each rotating layer.
        fixed: bytes whatever the length (recurrent state).
        layout: the cache classes by count, e.g. ``"2 KVCache + 2 ArraysCache"``.
    """

    per_token: int
    windowed: tuple[tuple[int, int], ...] = ()
    fixed: int = 0
    layout: str = ""

    def nbytes(self, tokens: int) -> int:
        """Bytes of one conversation of ``tokens`` tokens."""
        return tokens * self.per_token + sum(b * min(tokens, w) for b, w in self.windowed) + self.fixed

    def describe(self) -> str:
        parts = [f"{self.per_token} B/token"]
        parts += [f"{b} B/token up to {w} tokens" for b, w in self.windowed]
        if self.fixed:
            parts.append(f"{self.fixed // 1024} KiB fixed")
        return " + ".join(parts) + (f" ({self.layout})" if self.layout else "")


def _arrays(value: Any) -> list[Any]:
    """The MLX arrays in a cache's keys/values (a tuple for a quantized cache)."""
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    return [value]


def measure_costs(cache: list[Any]) -> KvCosts:
    """:class:`KvCosts` of a cache that holds at least one token (module documentation)."""
    per_token = fixed = 0
    windowed: list[tuple[int, int]] = []
    counts: dict[str, int] = {}
    for layer in cache:
        counts[type(layer).__name__] = counts.get(type(layer).__name__, 0) + 1
        keys = _arrays(getattr(layer, "keys", None))
        if keys:
            rows = keys[0].shape[-2]  # allocated token rows (mlx-lm grows caches in steps of 256)
            nbytes = sum(a.nbytes for a in keys + _arrays(getattr(layer, "values", None)))
            each = -(-nbytes // max(1, rows))
            if isinstance(getattr(layer, "max_size", None), int):
                windowed.append((each, layer.max_size))
            else:
                per_token += each
        else:
            fixed += int(getattr(layer, "nbytes", 0) or 0)
    layout = " + ".join(f"{n} {name}" for name, n in counts.items())
    return KvCosts(per_token, tuple(windowed), fixed, layout)


@dataclass(frozen=True)
class Budget:
    """Bytes the caches may take, and how that was found (for the log)."""

    nbytes: int
    where: str


def margin_bytes(total: int) -> int:
    """Memory left to everything else: a tenth of it, at least 512 MiB."""
    return max(512 * MIB, total // 10)


def _host_memory() -> tuple[int, int]:
    """(total, available) bytes of RAM (module documentation)."""
    fields: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            number = value.split()[:1]
            if number and number[0].isdigit():
                fields[key] = int(number[0]) * 1024
    except OSError:
        pass
    total, available = fields.get("MemTotal", 0), fields.get("MemAvailable", 0)
    if (
        not total or not available
    ):  # no /proc: the page counts (SC_AVPHYS_PAGES is Linux's; else half the RAM)
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = 8 * 1024**3
        try:
            available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            available = total // 2
    try:  # a container's cgroup v2 limit bounds what this process may still take
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            available = min(available, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return total, available


def free_memory() -> Budget:
    """What the caches may take once the model is loaded (module documentation)."""
    import mlx.core as mx

    info = mx.device_info() if mx.metal.is_available() else {}
    working_set = info.get("max_recommended_working_set_size")
    if isinstance(working_set, int) and working_set > 0:
        active = mx.get_active_memory()
        margin = margin_bytes(working_set)
        return Budget(
            max(0, working_set - active - margin),
            f"Metal: working set {working_set // MIB} MiB - in use {active // MIB} MiB - margin "
            f"{margin // MIB} MiB",
        )
    total, available = _host_memory()
    margin = margin_bytes(total)
    return Budget(
        max(0, available - margin),
        f"RAM: {available // MIB} MiB available of {total // MIB} MiB (weights loaded) - margin "
        f"{margin // MIB} MiB",
    )


@dataclass(frozen=True)
class Fit:
    """The chosen window, the bytes it may take and the arithmetic (for the log)."""

    window: int
    kv_bytes: int
    arithmetic: str


def fit(
    model_id: str,
    costs: KvCosts,
    budget: Budget,
    *,
    trained: int | None,
    window: int | None,
    entries: int,
    quantized: KvCosts | None = None,
    quantized_start: int = 0,
) -> Fit:
    """Choose ``context_window`` (module documentation).

    Args:
        costs: of the model's cache as made (``kv_bits`` unset: the only one).
        trained: ``max_position_embeddings`` (None: not in ``config.json``).
        window: the entry's ``context_window`` (None: auto).
        entries: caches the prompt cache keeps besides the one in use
            (``prompt_cache_entries``, twice that with checkpoints).
        quantized: of the cache once quantized (``kv_bits``), from
            ``quantized_start`` tokens on.

    Raises:
        ConfigError: one conversation of the window does not fit, or the
            window is auto and ``config.json`` gives no trained context.
    """
    conversations = 1 + entries

    def one(tokens: int) -> int:
        # Once a cache reaches quantized_start tokens mlx-lm quantizes it: for
        # a moment the full cache of that length and its quantized copy both exist.
        if quantized is not None and tokens >= quantized_start:
            return max(
                costs.nbytes(quantized_start) + quantized.nbytes(quantized_start), quantized.nbytes(tokens)
            )
        return costs.nbytes(tokens)

    steps = [f"KV {costs.describe()}"]
    if quantized is not None:
        steps.append(f"quantized from {quantized_start} tokens: {quantized.describe()}")
    steps.append(
        f"{budget.where} = {budget.nbytes // MIB} MiB for {conversations} caches (1 + {entries} kept)"
    )
    if window is None:
        if not trained:
            raise ConfigError(
                f"model '{model_id}': config.json gives no max_position_embeddings; set context_window"
            )
        w = _largest(lambda t: conversations * one(t) <= budget.nbytes, trained)
        steps.append(f"context_window auto = min(trained {trained}, fits {w})")
        if w < min(trained, MIN_AUTO_WINDOW):
            raise ConfigError(_no_room(model_id, min(trained, MIN_AUTO_WINDOW), conversations, one, budget))
    else:
        w = window
        if one(w) > budget.nbytes:
            raise ConfigError(_no_room(model_id, w, 1, one, budget))
        if conversations * one(w) > budget.nbytes:
            steps.append(
                f"{conversations} full caches of {w} tokens would exceed it: lower prompt_cache_entries if "
                "they do"
            )
    kv = conversations * one(w)
    steps.append(f"context_window {w}: {one(w) // MIB} MiB a cache, {kv // MIB} MiB for {conversations}")
    return Fit(w, kv, "; ".join(steps))


def _largest(ok: Any, upper: int) -> int:
    """The largest ``t`` in ``[0, upper]`` with ``ok(t)`` (``ok`` is monotone: more tokens, more bytes)."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _no_room(model_id: str, window: int, conversations: int, one: Any, budget: Budget) -> str:
    need = conversations * one(window)
    kept = f" ({conversations} caches: the one in use and the prompt cache's)" if conversations > 1 else ""
    return (
        f"model '{model_id}': a KV cache of {window} tokens{kept} needs {need // MIB} MiB, but only "
        f"{budget.nbytes // MIB} MiB can be given to it ({budget.where}); lower context_window or "
        "prompt_cache_entries, set kv_bits (8 about halves it), or free memory"
    )


def probe(
    model_id: str, model: Any, kv_bits: int | None, kv_group_size: int
) -> tuple[KvCosts, KvCosts | None]:
    """Run one token through a fresh cache of ``model`` and measure it; with
    ``kv_bits``, quantize it as ``generate_step`` would
    (``mlx_lm.generate.maybe_quantize_kv_cache``), run a second token through
    the quantized cache (mlx-lm's quantized attention) and measure again.

    Raises:
        ConfigError: mlx-lm cannot quantize this model's cache so (a
            ``RotatingKVCache`` of a sliding-window layer: "Quantization NYI"
            in mlx-lm 0.32; a group size that does not divide the head
            dimension).
    """
    import mlx.core as mx
    from mlx_lm.generate import maybe_quantize_kv_cache
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(model)
    token = mx.array([[0]])
    mx.eval(model(token, cache=cache))
    costs = measure_costs(cache)
    if kv_bits is None:
        return costs, None
    try:
        maybe_quantize_kv_cache(cache, quantized_kv_start=0, kv_group_size=kv_group_size, kv_bits=kv_bits)  # type: ignore[no-untyped-call]
        mx.eval(model(token, cache=cache))
    except (NotImplementedError, ValueError) as exc:
        raise ConfigError(
            f"model '{model_id}': mlx-lm cannot quantize this model's KV cache with kv_bits = {kv_bits}, "
            f"kv_group_size = {kv_group_size} ({type(exc).__name__}: {exc}); "
            + (
                "its sliding-window layers use a RotatingKVCache, which mlx-lm does not quantize: unset "
                "kv_bits"
                if isinstance(exc, NotImplementedError)
                else "choose a kv_group_size that divides the model's head dimension, or unset kv_bits"
            )
        ) from exc
    return costs, measure_costs(cache)


def always_trimmable(cache: list[Any]) -> bool:
    """Whether every layer of a fresh cache can always be cut back to a
    shorter prefix: ``KVCache`` and ``QuantizedKVCache`` can
    (``is_trimmable`` is constant True in ``mlx_lm/models/cache.py``); a
    ``RotatingKVCache`` only until it first wraps (``offset < max_size``), an
    ``ArraysCache`` (recurrent state) never."""
    return bool(cache) and all(c.is_trimmable() and not hasattr(c, "max_size") for c in cache)
