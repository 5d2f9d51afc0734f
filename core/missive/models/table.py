"""The served models: configured entries, their driver instances, id
resolution, and which models are loaded (:mod:`missive.models.residency`: on
demand, unloaded when idle, within a memory budget)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter

import anyio.to_thread

from ..config import Config, ConfigError, ModelEntry
from ..driver.interface import Driver
from ..kernel.plugins import Kernel
from ..kernel.specs import load_object
from ..protocol.errors import ModelLoadError, ModelNotFoundError, OverloadedError
from .bases import check_bases, sharing
from .defaults import choose_default_model
from .residency import MiB, idle_expired, log_choices, plan_eviction
from .sources.local import LocalModel

__all__ = ["ModelTable", "ModelUse", "BUILTIN_DRIVERS"]

log = logging.getLogger("missive.models")

#: Drivers shipped as extras of the ``missive-server`` distribution (``missive-server[<name>]``).
BUILTIN_DRIVERS = frozenset({"llamacpp", "echo", "ollama", "mlx", "openai", "vllm", "llamaserver"})

#: Most seconds between two looks for models idle past their ``idle_unload``.
SWEEP_INTERVAL = 1.0


class ModelUse:
    """One request's hold on a model (:meth:`ModelTable.use`): the model
    is not unloaded until :meth:`release`."""

    def __init__(self, table: ModelTable, model_id: str) -> None:
        self._table: ModelTable | None = table
        self.model_id = model_id

    def release(self) -> None:
        """Give the model back (idempotent, no await; from any thread)."""
        table, self._table = self._table, None
        if table is not None:
            table._release(self.model_id)


class ModelTable:
    """Model id -> driver instance, built from the config (or the default
    model :func:`~missive.models.defaults.choose_default_model` picks among
    the plugins' when the config names none).

    Raises:
        ConfigError: a model names an unknown driver, or its driver's
            dependencies are not installed (the message names the pip extra).
    """

    def __init__(self, config: Config, kernel: Kernel) -> None:
        self.config = config
        self.kernel = kernel
        if not config.models:
            chosen = choose_default_model(kernel.default_models, config.server.default_model)
            if chosen is not None:
                config.models = {chosen.id: chosen.entry}
        if not config.models:
            if kernel.blocked:
                # The default model comes from a plugin: installing it again
                # would not help while it is blocked.
                raise ConfigError(
                    "no models to serve: configure [models.<id>] in a config file; the installed "
                    f"plugin(s) {', '.join(kernel.blocked)} are blocked (plugins.block or "
                    "MISSIVE_BLOCK_PLUGINS), and a default model comes only from a loaded plugin"
                )
            raise ConfigError(
                "no models to serve: configure [models.<id>] in a config file, or install the "
                "embedded default with pip install 'missive-server[default]'"
            )
        self.drivers: dict[str, Driver] = {}
        #: Model id -> its entry, model references resolved to local files (:meth:`fetch`).
        self.entries: dict[str, ModelEntry] = dict(config.models)
        #: Model id -> its files on this machine, once fetched (None: a driver loading none).
        self.local: dict[str, LocalModel | None] = {}
        #: Ids of the models loaded now: their ``start()`` has returned (``GET /readyz``).
        self.started: set[str] = set()
        #: Model id -> why its last load on demand failed (until one succeeds): /readyz 503.
        self.load_errors: dict[str, str] = {}
        #: Requests using each model now (:meth:`use`).
        self.uses: Counter[str] = Counter()
        #: ``time.monotonic()`` of each model's last use (or load).
        self.last_used: dict[str, float] = {}
        #: Loads per model, unloads per (model, reason: ``idle``, ``memory``).
        self.loads: Counter[str] = Counter()
        self.unloads: Counter[tuple[str, str]] = Counter()
        #: True once :meth:`aclose` has been called.
        self.closing = False
        self._started = False
        self._ready = False
        self._memory: dict[str, int] = {}
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._lock: asyncio.Lock | None = None
        self._released: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.Task[None] | None = None
        for model_id, entry in config.models.items():
            self.drivers[model_id] = self._build(model_id, entry)
        #: Model id -> the model whose load it shares (:mod:`missive.models.bases`).
        self.bases = check_bases(self.entries, self.drivers)

    def _build(self, model_id: str, entry: ModelEntry) -> Driver:
        spec = self.kernel.drivers.get(entry.driver)
        if spec is None:
            known = ", ".join(sorted(self.kernel.drivers)) or "none installed"
            builtin = entry.driver in BUILTIN_DRIVERS
            hint = f"pip install 'missive-server[{entry.driver}]'" if builtin else "install its plugin"
            raise ConfigError(
                f"model '{model_id}' uses driver '{entry.driver}', which no loaded plugin provides "
                f"(available: {known}); {hint} (see `missive plugins` for plugins that failed to load)"
            )
        try:
            cls = load_object(spec.factory)
        except ImportError as exc:
            hint = f"pip install 'missive-server[{spec.extra}]'" if spec.extra else "reinstall its plugin"
            raise ConfigError(
                f"driver '{spec.name}' for model '{model_id}' cannot be imported ({exc}); {hint}"
            ) from exc
        driver: Driver = cls(model_id, entry, spec.capabilities)
        driver.name = spec.name
        driver.tool_parser_specs = self.kernel.tool_parsers
        driver.reasoning_parser_specs = self.kernel.reasoning_parsers
        return driver

    def resolve(self, requested: str) -> tuple[str, Driver]:
        """Client model id -> (configured model id, driver). The driver of
        a model not loaded is not started; :meth:`ensure_loaded` loads it
        (and may give another instance: take the driver it returns).

        Raises:
            ModelNotFoundError: no model or alias matches (404 ``model: {id}``).
        """
        model_id = self.kernel.hook.resolve_model(requested=requested, config=self.config)
        if model_id is None or model_id not in self.drivers:
            raise ModelNotFoundError(requested)
        return model_id, self.drivers[model_id]

    # -- loading state -----------------------------------------------------

    def load_state(self, model_id: str) -> str:
        """Where ``model_id`` is in loading: ``loaded``; ``loading`` (on demand); ``unloaded`` (lazy, or
        unloaded since: loads on its next request); ``starting`` (start-up
        has not reached it yet)."""
        if model_id in self.started:
            return "loaded"
        if model_id in self._loading:
            return "loading"
        if self._ready or (self.entries[model_id].lazy and model_id in self.local):
            return "unloaded"
        return "starting"

    def loaded(self, model_id: str) -> bool:
        """Whether ``model_id`` is loaded now."""
        return model_id in self.started

    def memory(self, model_id: str) -> int:
        """Bytes ``model_id`` counts for in ``server.memory_budget_mib``: its
        entry's ``memory_mib``, else the size of its files (0 before they
        are fetched, and for a remote model)."""
        entry = self.entries[model_id]
        if entry.memory_mib is not None:
            return entry.memory_mib * MiB
        return self._memory.get(model_id, 0)

    # -- use ---------------------------------------------------------------

    def use(self, model_id: str) -> ModelUse:
        """Hold ``model_id`` for one request, from before it is loaded to
        the end of its answer: a model in use is never unloaded. The caller
        must :meth:`ModelUse.release` it (the routes do when the request's
        record finishes). A model sharing another's load holds that one too."""
        for held in (model_id, *([self.bases[model_id]] if model_id in self.bases else [])):
            self.uses[held] += 1
            self.last_used[held] = time.monotonic()
        return ModelUse(self, model_id)

    def _release(self, model_id: str) -> None:
        for held in (model_id, *([self.bases[model_id]] if model_id in self.bases else [])):
            self.uses[held] -= 1
            self.last_used[held] = time.monotonic()
        loop, event = self._loop, self._released
        if loop is not None and event is not None and not loop.is_closed():
            try:
                if asyncio.get_running_loop() is loop:
                    event.set()
                    return
            except RuntimeError:
                pass
            loop.call_soon_threadsafe(event.set)

    async def ensure_loaded(self, model_id: str) -> Driver:
        """The driver of ``model_id``, loaded now if it is not (the caller
        waits; loads of several models run one at a time, each after
        making room in the memory budget). Hold the model with :meth:`use`
        first, so it is not unloaded again before the request runs.

        Raises:
            ModelLoadError: the model could not be loaded (500, not to be retried; the log has why).
            OverloadedError: 529: the memory budget is held by busy models
                for longer than ``server.queue_timeout``.
        """
        if model_id in self.started:
            return self.drivers[model_id]
        task = self._loading.get(model_id)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(model_id, on_demand=True))
            self._loading[model_id] = task

            def done(t: asyncio.Task[None]) -> None:
                self._loading.pop(model_id, None)
                if not t.cancelled():
                    error = t.exception()  # retrieved: every waiter may have left
                    if error is None:
                        self.load_errors.pop(model_id, None)
                    elif not isinstance(error, OverloadedError):  # a busy budget is no failed load
                        self.load_errors[model_id] = str(error) or type(error).__name__

            task.add_done_callback(done)
        try:
            await asyncio.shield(task)
        except ConfigError as exc:
            raise ModelLoadError(f"model '{model_id}' could not be loaded: {exc}") from exc
        return self.drivers[model_id]

    # -- fetch, load, unload -----------------------------------------------

    async def fetch(self, model_id: str) -> None:
        """Resolve the model reference of ``model_id``'s entry, if any
        (``hf://``, an Ollama name: :mod:`missive.models.sources`), downloading it
        in a worker thread when it is not on this machine yet; the driver is
        then rebuilt with the local paths. A model that may be listed while
        not loaded (``lazy``, ``idle_unload``) without a ``context_window``
        gets its file's training context (what its driver would load it
        with), so ``GET /v1/models`` shows it. Once per model.

        Raises:
            ConfigError: the reference cannot be resolved (the message names
                the model, the reference and the files).
        """
        if model_id in self.local:
            return
        from .sources.entries import resolve_entry

        entry = self.entries[model_id]
        spec = self.kernel.drivers.get(entry.driver)
        resolved = await anyio.to_thread.run_sync(resolve_entry, model_id, entry, spec)
        local = resolved.local
        new = resolved.entry
        if local is not None and resolved.entry is not entry:
            log.info("model %s: %s is %s (%s)", model_id, local.ref, local.path, local.source)
        if local is not None and (entry.lazy or entry.idle_unload) and entry.context_window is None:
            from .sources.local import model_facts

            facts = await anyio.to_thread.run_sync(model_facts, local)
            if facts.context_length:
                new = new.model_copy(update={"context_window": facts.context_length})
        if new is not entry:
            self.entries[model_id] = new
            self.drivers[model_id] = self._build(model_id, new)
        if local is not None:
            self._memory[model_id] = await anyio.to_thread.run_sync(lambda: local.size)
        self.local[model_id] = local

    def _init_loop(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._released = asyncio.Event()
            self._loop = asyncio.get_running_loop()

    async def _load(self, model_id: str, *, on_demand: bool) -> None:
        """Fetch, make room for and start ``model_id`` (under the load lock).

        Raises:
            ConfigError: from fetching or the driver's start (the driver is
                replaced by a fresh, unstarted one).
        """
        self._init_loop()
        assert self._lock is not None
        async with self._lock:
            await self._load_locked(model_id, on_demand=on_demand)

    async def _load_locked(self, model_id: str, *, on_demand: bool) -> None:
        """:meth:`_load` under the lock; the model whose load it shares first."""
        if model_id in self.started:
            return
        base = self.bases.get(model_id)
        if base is not None:
            await self._load_locked(base, on_demand=on_demand)
        await self.fetch(model_id)
        await self._make_room(model_id)
        driver = self.drivers[model_id]
        log.info("%s model %s (driver %s)", "loading" if on_demand else "starting", model_id, driver.name)
        began = time.monotonic()
        try:
            if base is not None:
                driver.bind_base(self.drivers[base])
            await driver.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await driver.aclose()
            self.drivers[model_id] = self._build(model_id, self.entries[model_id])
            raise
        self.started.add(model_id)
        self.loads[model_id] += 1
        self.last_used[model_id] = time.monotonic()
        if on_demand:
            log.info("model %s loaded on demand in %.1f s", model_id, time.monotonic() - began)
        log_choices(model_id, driver)

    async def _make_room(self, model_id: str) -> None:
        """Unload idle models (least recently used first) until ``model_id``
        fits in ``server.memory_budget_mib``; wait while busy models are in
        the way (at most ``server.queue_timeout`` seconds)."""
        server = self.config.server
        if server.memory_budget_mib is None:
            return
        budget = server.memory_budget_mib * MiB
        need = self.memory(model_id)
        deadline = time.monotonic() + server.queue_timeout
        assert self._released is not None
        while True:
            loaded = {m: self.memory(m) for m in self.started}
            busy = {m for m in self.started if self.uses[m] > 0}
            victims, fits = plan_eviction(need, budget, loaded, self.last_used, busy)
            if fits or not busy:
                for victim in victims:
                    await self._unload(
                        victim, "memory", f"to make room for {model_id} in server.memory_budget_mib"
                    )
                if not fits:
                    log.warning(
                        "model %s needs %d MiB, more than server.memory_budget_mib (%d MiB): loaded alone",
                        model_id,
                        need // MiB,
                        server.memory_budget_mib,
                    )
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OverloadedError(
                    f"model '{model_id}' cannot be loaded now: server.memory_budget_mib "
                    f"({server.memory_budget_mib} MiB) is held by models in use ({', '.join(sorted(busy))}); "
                    "retry later",
                    retry_after=10,
                )
            log.info("model %s waits for memory: %s in use", model_id, ", ".join(sorted(busy)))
            self._released.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._released.wait(), remaining)

    async def _unload(self, model_id: str, reason: str, detail: str) -> None:
        """Close ``model_id``'s driver and put a fresh, unstarted one in its
        place (loaded again on its next request), after the models sharing
        its load. Under the load lock."""
        for other in sharing(self.bases, model_id):
            if other in self.started:
                await self._unload(other, reason, f"{model_id}, whose load it shares, is unloaded")
        driver = self.drivers[model_id]
        self.started.discard(model_id)
        try:
            await driver.aclose()
        except Exception:
            log.exception("closing driver %s of model %s failed", driver.name, model_id)
        self.drivers[model_id] = self._build(model_id, self.entries[model_id])
        self.unloads[(model_id, reason)] += 1
        log.info(
            "unloaded model %s (%s)",
            model_id,
            detail,
            extra={"fields": {"model": model_id, "reason": reason}},
        )

    async def _sweep(self, limits: dict[str, float]) -> None:
        """Unload loaded models idle past their ``idle_unload``, forever."""
        interval = min(SWEEP_INTERVAL, min(limits.values()) / 4)
        assert self._lock is not None
        while True:
            await asyncio.sleep(interval)
            busy = {m for m in self.started if self.uses[m] > 0}
            loaded = {m: limits.get(m) for m in self.started}
            if not idle_expired(time.monotonic(), loaded, self.last_used, busy):
                continue
            async with self._lock:
                busy = {m for m in self.started if self.uses[m] > 0}
                loaded = {m: limits.get(m) for m in self.started}
                for model_id in idle_expired(time.monotonic(), loaded, self.last_used, busy):
                    idle = time.monotonic() - self.last_used.get(model_id, 0.0)
                    await self._unload(
                        model_id, "idle", f"idle for {idle:.1f} s, idle_unload {limits[model_id]:g} s"
                    )

    async def start(self, *, load_lazy: bool = False) -> None:
        """Fetch every model and load those that are not ``lazy`` (all of
        them with ``load_lazy``), once (later calls do nothing); each loaded
        model's :meth:`Driver.choices` are logged. Models with
        ``idle_unload`` are unloaded when idle from then on.

        Raises:
            ConfigError: a reference could not be fetched, or a driver could
                not start (missing model file...).
        """
        if self._started:
            return
        self._started = True
        self._init_loop()
        for model_id in list(self.drivers):
            await self.fetch(model_id)
            if self.entries[model_id].lazy and not load_lazy:
                log.info("model %s: loads on its first request (lazy)", model_id)
                continue
            await self._load(model_id, on_demand=False)
        self._ready = True
        limits = {m: e.idle_unload for m, e in self.entries.items() if e.idle_unload is not None}
        if limits:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(limits))

    async def aclose(self) -> None:
        """Close every driver (``Driver.aclose``), once: later calls do nothing.
        A driver whose ``aclose`` fails is logged; the others are still closed."""
        if self.closing:
            return
        self.closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sweeper
        for task in list(self._loading.values()):
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), 60)
        # The models sharing another's load first: their base frees what they use.
        for driver in sorted(self.drivers.values(), key=lambda d: d.base is None):
            try:
                await driver.aclose()
            except Exception:
                log.exception("closing driver %s failed", driver.name)
