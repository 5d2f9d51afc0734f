"""The state of each served model: for ``GET /readyz``, ``GET /v1/status``
and ``missive ps``.

A model is

* ``starting`` until its driver's ``start()`` has returned at start-up;
* ``ready`` with ``"loaded": false`` while it is not loaded but loads on its
  next request (``lazy``, or unloaded when idle or for memory:
  :mod:`missive.models.residency`): a request to it waits for the load, so a
  replica holding it is still ready to take traffic;
* ``unavailable`` while it has a replica pool (a remote backend) and none of
  its replicas is healthy;
* ``failed`` (``"reason": "load_failed"``) while not loaded after its last
  load on demand failed (a ``lazy`` model, or one unloaded since): requests
  to it get a 500 that says not to retry, so a replica holding it is not
  ready, as Kubernetes reads readiness ("ready to serve requests"). The
  error itself is in ``GET /v1/status`` (``load_error``, behind the keys)
  and the log, never in ``/readyz``; the next request to the model tries
  the load again, and a load that succeeds clears it;
* ``ready`` otherwise.

Replica health is what :mod:`missive.remote.replicas` knows: failures seen by
requests, recovery probes, and the check each call here starts
(:meth:`~missive.remote.replicas.ReplicaPool.check`, at most once a
``probe_interval``), waited for at most :data:`CHECK_WAIT` seconds so a
Kubernetes probe (1 s timeout by default) gets its answer in time.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import anyio

from ..remote.replicas import redact_url

if TYPE_CHECKING:
    from ..driver.interface import Driver
    from ..models.table import ModelTable
    from ..serving.admission import Admission

__all__ = ["readiness", "model_status", "CHECK_WAIT", "DRIVER_STATUS_TIMEOUT"]

#: Seconds a readiness answer waits for the replica checks it starts.
CHECK_WAIT = 0.8
#: Seconds :meth:`~missive.driver.interface.Driver.status` may take.
DRIVER_STATUS_TIMEOUT = 2.0


async def _check_replicas(models: ModelTable) -> None:
    pools = [p for d in models.drivers.values() if (p := d.replica_pool()) is not None]
    if pools:
        await asyncio.gather(*(pool.check(wait=CHECK_WAIT) for pool in pools))


def _state(model_id: str, driver: Driver, models: ModelTable) -> dict[str, Any]:
    state = models.load_state(model_id)
    if state == "starting":
        return {"status": "starting"}
    if state != "loaded":
        if model_id in models.load_errors:
            return {"status": "failed", "loaded": False, "reason": "load_failed"}
        return {"status": "ready", "loaded": False}
    pool = driver.replica_pool()
    if pool is None:
        return {"status": "ready"}
    healthy = len(pool.healthy())
    return {
        "status": "ready" if healthy else "unavailable",
        "replicas_healthy": healthy,
        "replicas_total": len(pool.replicas),
    }


async def readiness(models: ModelTable) -> dict[str, dict[str, Any]]:
    """Model id -> ``{"status": "ready" | "starting" | "unavailable" | "failed"}``, with
    ``replicas_healthy`` and ``replicas_total`` (counts) for remote models. No
    URLs or errors: ``/readyz`` needs no key."""
    await _check_replicas(models)
    return {model_id: _state(model_id, driver, models) for model_id, driver in models.drivers.items()}


async def _driver_status(driver: Driver) -> dict[str, Any]:
    try:
        with anyio.fail_after(DRIVER_STATUS_TIMEOUT):
            return dict(await driver.status())
    except TimeoutError:
        return {"error": f"no answer within {DRIVER_STATUS_TIMEOUT:g} s"}
    except Exception as exc:  # noqa: BLE001 - a driver's status must not break the page
        return {"error": f"{type(exc).__name__}: {exc}"}


async def model_status(models: ModelTable, admission: Admission) -> dict[str, dict[str, Any]]:
    """Model id -> its full status (``GET /v1/status``, behind the API keys):
    state, driver, context window, ``max_concurrency``, requests running and
    waiting, queue limits, each replica (URL without credentials, health,
    requests outstanding, last error) and the driver's own :meth:`~missive.driver.interface.Driver.status`;
    for a model loaded on demand, unloaded when idle or under a memory
    budget also ``loaded``, ``lazy``, ``idle_unload`` (seconds),
    ``memory_bytes`` (what it counts for in the budget) and ``idle_s``
    (seconds since its last request ended; 0 while in use)."""
    await _check_replicas(models)
    out: dict[str, dict[str, Any]] = {}
    server = models.config.server
    for model_id, driver in models.drivers.items():
        entry = driver.entry
        gate = admission.gates.get(model_id)
        info: dict[str, Any] = {
            **_state(model_id, driver, models),
            "driver": driver.name,
            "context_window": driver.context_window,
            "max_concurrency": driver.capabilities.max_concurrency,
            "running": gate.running if gate else 0,
            "waiting": gate.waiting if gate else 0,
            "queue_depth": server.queue_depth if entry.queue_depth is None else entry.queue_depth,
            "queue_timeout": server.queue_timeout if entry.queue_timeout is None else entry.queue_timeout,
        }
        if entry.lazy or entry.idle_unload is not None or server.memory_budget_mib is not None:
            last = models.last_used.get(model_id)
            info.update(
                loaded=models.loaded(model_id),
                lazy=entry.lazy,
                idle_unload=entry.idle_unload,
                memory_bytes=models.memory(model_id),
                idle_s=round(time.monotonic() - last, 1)
                if last is not None and not models.uses[model_id]
                else 0.0,
            )
        if info["status"] == "failed":
            info["load_error"] = models.load_errors.get(model_id, "")
        pool = driver.replica_pool()
        if pool is not None:
            info["replicas"] = [
                {
                    "url": redact_url(r.url),
                    "healthy": r.healthy,
                    "outstanding": r.outstanding,
                    "last_error": r.last_error,
                }
                for r in pool.replicas
            ]
        info["driver_status"] = await _driver_status(driver) if model_id in models.started else {}
        out[model_id] = info
    return out
