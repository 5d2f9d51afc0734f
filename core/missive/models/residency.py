"""Which models stay loaded: load on demand, unload when idle, a memory budget.

The rules :class:`~missive.models.table.ModelTable` applies (docs/models.md,
"Loading on demand"), as Ollama's ``keep_alive`` and llama-swap's ``ttl``
do:

* a model entry with ``lazy = true`` is not loaded at start-up but by its
  first request; that request waits (a stream gets ``ping`` events);
* a model with ``idle_unload = N`` is unloaded once no request has used it
  for ``N`` seconds, and loaded again by the next one;
* with ``server.memory_budget_mib``, loading a model that would not fit next
  to those loaded first unloads the least recently used idle ones (no
  request using them) until it fits; when the models in the way are all
  busy, the load waits for one to become idle; a model larger than the
  whole budget is loaded alone, with a warning.

A request *uses* its model from before it is loaded until its record
finishes (:meth:`~missive.serving.record.RequestRecord.at_finish`): a model in use
is never unloaded.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..driver.interface import Driver

__all__ = ["MiB", "plan_eviction", "idle_expired", "log_choices"]

log = logging.getLogger("missive.models")

MiB = 1024 * 1024


def plan_eviction(
    need: int,
    budget: int,
    loaded: Mapping[str, int],
    last_used: Mapping[str, float],
    busy: set[str],
) -> tuple[list[str], bool]:
    """The models to unload so that a model of ``need`` bytes fits in
    ``budget`` bytes next to the ``loaded`` ones (id -> bytes): idle ones
    (not in ``busy``), least recently used first (``last_used``: monotonic
    seconds), no more than needed.

    Returns:
        ``(victims, fits)``: ``fits`` False when unloading every idle model
        is still not enough (busy models are in the way, or ``need`` alone
        exceeds the budget); ``victims`` are then every idle model.
    """
    used = sum(loaded.values())
    victims: list[str] = []
    for model_id in sorted((m for m in loaded if m not in busy), key=lambda m: last_used.get(m, 0.0)):
        if used + need <= budget:
            break
        victims.append(model_id)
        used -= loaded[model_id]
    return victims, used + need <= budget


def idle_expired(
    now: float,
    idle_unload: Mapping[str, float | None],
    last_used: Mapping[str, float],
    busy: set[str],
) -> list[str]:
    """The models (ids of ``idle_unload``, the loaded ones) unused for at
    least their ``idle_unload`` seconds and not in ``busy``."""
    return [
        model_id
        for model_id, limit in idle_unload.items()
        if limit is not None and model_id not in busy and now - last_used.get(model_id, now) >= limit
    ]


def log_choices(model_id: str, driver: Driver) -> None:
    """Log ``driver.choices()`` once ``model_id`` is loaded (a failure is logged, never raised)."""
    try:
        choices: dict[str, Any] = driver.choices()
    except Exception:  # noqa: BLE001 - a log line must not stop the server
        log.exception("model %s: choices() failed", model_id)
        return
    if choices:
        log.info(
            "model %s ready: %s",
            model_id,
            " ".join(f"{k}={v}" for k, v in choices.items()),
            extra={"fields": {"model": model_id, **choices}},
        )
