"""Where a model's disk tier lives, and what goes into it when the model closes.

The glue between :class:`~missive.engine.local.LocalDriver` and
:mod:`missive.engine.disk_cache`: the tier's folder is
``$MISSIVE_PROMPT_CACHE_DIR/<key>``, by default
``<state directory>/prompt-cache/<key>`` (:func:`missive.config.state_dir.state_dir`),
the key the runner's :meth:`~missive.engine.runner.PortableStates.state_key`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..config.state_dir import state_dir
from ..protocol.errors import ApiError
from .disk_cache import DiskPromptCache, default_disk_bytes
from .host_cache import MIN_SAVED_TOKENS, HostPromptCache
from .runner import ContextStates, ModelInfo, PortableStates, Runner, SharedPool

__all__ = [
    "ENV",
    "close_tier",
    "describe_tier",
    "open_disk_tier",
    "prompt_cache_root",
    "restore_slots",
    "spill_slots",
    "tier_report",
]

log = logging.getLogger("missive.engine")

#: The variable naming the disk tier's root folder (default: the state directory's ``prompt-cache``).
ENV = "MISSIVE_PROMPT_CACHE_DIR"


def prompt_cache_root() -> Path:
    """``$MISSIVE_PROMPT_CACHE_DIR``, else ``<state directory>/prompt-cache``."""
    explicit = os.environ.get(ENV)
    return Path(explicit).expanduser() if explicit else state_dir() / "prompt-cache"


def open_disk_tier(
    runner: Runner, cache: HostPromptCache, max_bytes: int | None, model_id: str
) -> DiskPromptCache | None:
    """The model's disk tier, attached to ``cache`` (its second tier), or
    None: a runner whose states cannot be written, ``max_bytes`` 0, or a
    folder another server holds or that cannot be made (a warning: the
    server runs on without the tier). Both tiers are logged."""
    disk = _open(runner, cache, max_bytes, model_id)
    log.info(
        "model %s: host-memory prompt cache of up to %d MiB%s",
        model_id,
        cache.max_bytes // 2**20,
        describe_tier(disk),
    )
    return disk


def _open(
    runner: Runner, cache: HostPromptCache, max_bytes: int | None, model_id: str
) -> DiskPromptCache | None:
    if not isinstance(runner, PortableStates) or max_bytes == 0:
        return None
    root = prompt_cache_root()
    size = default_disk_bytes(root) if max_bytes is None else max_bytes
    if size <= 0:
        return None
    try:
        disk = DiskPromptCache(root / runner.state_key(), runner.state_key(), runner, size)
    except OSError as exc:
        log.warning("model %s: no disk tier for the prompt cache: %s", model_id, exc)
        return None
    cache.disk = disk
    return disk


def spill_slots(runner: Runner, disk: DiskPromptCache, slots: int) -> int:
    """Queue each slot's state (of at least :data:`~missive.engine.host_cache.MIN_SAVED_TOKENS`
    tokens) for the disk tier, before the model closes (model thread); how many."""
    if not isinstance(runner, ContextStates):
        return 0
    n = 0
    for slot in range(slots):
        if len(runner.context_tokens(slot)) < MIN_SAVED_TOKENS:
            continue
        saved = runner.save_context(slot)
        if saved is not None:
            disk.put(saved)
            disk.flush()  # one state in RAM at a time, none dropped from a full queue
            n += 1
    return n


def restore_slots(runner: Runner, disk: DiskPromptCache, info: ModelInfo, model_id: str) -> tuple[int, int]:
    """After the model loads (model thread): put the most recently used
    states on disk back into the slots, the latest into slot 0, so a
    restart or an idle unload gives back what the slots held when the model
    closed (:func:`spill_slots` wrote them last) and the next request on
    that conversation is an in-memory hit (logged). States longer than the
    context window are left on disk; with a shared KV pool the states restored hold at most
    half its cells (the batcher clears an idle slot when a request needs
    its cells). A state that fails its check or that llama.cpp refuses is
    skipped (and a bad file deleted). ``(states, tokens)`` restored.
    """
    if not isinstance(runner, ContextStates):
        return 0, 0
    started = time.perf_counter()
    room = runner.pool_free() // 2 if isinstance(runner, SharedPool) else None
    restored = tokens = 0
    for entry in disk.recent(info.slots):
        if len(entry.tokens) > info.context_window or (
            room is not None and tokens + len(entry.tokens) > room
        ):
            continue
        saved = disk.load(entry, count=False)
        if saved is None:
            continue
        try:
            runner.restore_context(saved, restored)
        except ApiError as exc:
            disk.drop(entry, str(exc))
            continue
        restored += 1
        tokens += len(saved.tokens)
    if restored:
        log.info(
            "model %s: %d slot(s) given back their states from the disk tier (%d tokens) in %.2f s",
            model_id,
            restored,
            tokens,
            time.perf_counter() - started,
        )
    return restored, tokens


def close_tier(
    runner: Runner, cache: HostPromptCache | None, disk: DiskPromptCache | None, slots: int
) -> None:
    """Before the model closes (model thread): detach ``disk`` from ``cache``,
    spill the slots' states to it and write everything queued."""
    if cache is not None:
        cache.disk = None
    if disk is not None:
        spill_slots(runner, disk, slots)
        disk.close()


def describe_tier(disk: DiskPromptCache | None) -> str:
    """The disk tier for the model's load line ("" without one)."""
    if disk is None:
        return ""
    return f", disk tier of up to {disk.max_bytes // 2**20} MiB in {disk.folder} ({len(disk)} states found)"


def tier_report(disk: DiskPromptCache | None) -> dict[str, int]:
    """The disk tier's counters, bytes and files, for ``/metrics`` (``{}`` without one)."""
    if disk is None:
        return {}
    return {**disk.counters, "bytes": disk.nbytes, "entries": len(disk)}
