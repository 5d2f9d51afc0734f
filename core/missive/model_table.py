"""The served models: configured entries, their driver instances, and id resolution."""

from __future__ import annotations

import logging

from typing import Any

import anyio.to_thread

from .config import Config, ConfigError, ModelEntry
from .driver import Driver
from .errors import ModelNotFoundError
from .kernel import Kernel
from .sources.local import LocalModel
from .specs import load_object

__all__ = ["ModelTable"]

log = logging.getLogger("missive.models")

#: Drivers shipped as extras of the ``missive`` distribution (``missive[<name>]``).
BUILTIN_DRIVERS = frozenset({"llamacpp", "echo", "ollama", "mlx", "openai", "vllm", "llamaserver"})


class ModelTable:
    """Model id -> driver instance, built from the config (or the plugins'
    default models when the config names none).

    Raises:
        ConfigError: a model names an unknown driver, or its driver's
            dependencies are not installed (the message names the pip extra).
    """

    def __init__(self, config: Config, kernel: Kernel) -> None:
        self.config = config
        self.kernel = kernel
        if not config.models:
            config.models = {d.id: d.entry for d in kernel.default_models.values()}
        if not config.models:
            raise ConfigError(
                "no models to serve: configure [models.<id>] in a config file, or install the "
                "embedded default with pip install 'missive[default]'"
            )
        self.drivers: dict[str, Driver] = {}
        #: Model id -> its entry with model references resolved to local
        #: files (:meth:`fetch`; until then, as configured).
        self.entries: dict[str, ModelEntry] = dict(config.models)
        #: Model id -> its files on this machine, once fetched (None: a
        #: driver that loads no files).
        self.local: dict[str, LocalModel | None] = {}
        #: Ids of the models whose ``start()`` has returned (``GET /readyz``).
        self.started: set[str] = set()
        #: True once :meth:`aclose` has been called.
        self.closing = False
        self._started = False
        for model_id, entry in config.models.items():
            self.drivers[model_id] = self._build(model_id, entry)

    def _build(self, model_id: str, entry: ModelEntry) -> Driver:
        spec = self.kernel.drivers.get(entry.driver)
        if spec is None:
            known = ", ".join(sorted(self.kernel.drivers)) or "none installed"
            hint = (
                f"pip install 'missive[{entry.driver}]'"
                if entry.driver in BUILTIN_DRIVERS
                else "install the plugin distribution that provides it"
            )
            raise ConfigError(
                f"model '{model_id}' uses driver '{entry.driver}', which no loaded plugin provides "
                f"(available: {known}); {hint} (see `missive plugins` for plugins that failed to load)"
            )
        try:
            cls = load_object(spec.factory)
        except ImportError as exc:
            hint = f"pip install 'missive[{spec.extra}]'" if spec.extra else "reinstall the plugin that provides it"
            raise ConfigError(
                f"driver '{spec.name}' for model '{model_id}' cannot be imported ({exc}); {hint}"
            ) from exc
        driver = cls(model_id, entry, spec.capabilities)
        driver.name = spec.name
        driver.tool_parser_specs = self.kernel.tool_parsers
        driver.reasoning_parser_specs = self.kernel.reasoning_parsers
        return driver

    def resolve(self, requested: str) -> tuple[str, Driver]:
        """Client model id -> (configured model id, driver).

        Raises:
            ModelNotFoundError: no model or alias matches (404 ``model: {id}``).
        """
        model_id = self.kernel.hook.resolve_model(requested=requested, config=self.config)
        if model_id is None or model_id not in self.drivers:
            raise ModelNotFoundError(requested)
        return model_id, self.drivers[model_id]

    async def fetch(self, model_id: str) -> None:
        """Resolve the model reference of ``model_id``'s entry, if any
        (``hf://``, an Ollama name: :mod:`missive.sources`), downloading it
        in a worker thread when it is not on this machine yet; the driver is
        then rebuilt with the local paths. Once per model.

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
        if resolved.entry is not entry:
            local = resolved.local
            assert local is not None
            log.info("model %s: %s is %s (%s)", model_id, local.ref, local.path, local.source)
            self.entries[model_id] = resolved.entry
            self.drivers[model_id] = self._build(model_id, resolved.entry)
        self.local[model_id] = resolved.local

    async def start(self) -> None:
        """Fetch and start every model once (later calls do nothing); each
        model's :meth:`Driver.choices` are logged.

        Raises:
            ConfigError: a reference could not be fetched, or a driver could
                not start (missing model file...).
        """
        if self._started:
            return
        self._started = True
        for model_id in list(self.drivers):
            await self.fetch(model_id)
            driver = self.drivers[model_id]
            log.info("starting model %s (driver %s)", model_id, driver.name)
            await driver.start()
            self.started.add(model_id)
            _log_choices(model_id, driver)

    async def aclose(self) -> None:
        """Close every driver (``Driver.aclose``), once: later calls do nothing.
        A driver whose ``aclose`` fails is logged; the others are still closed."""
        if self.closing:
            return
        self.closing = True
        for driver in self.drivers.values():
            try:
                await driver.aclose()
            except Exception:
                log.exception("closing driver %s failed", driver.name)


def _log_choices(model_id: str, driver: Driver) -> None:
    try:
        choices: dict[str, Any] = driver.choices()
    except Exception:  # noqa: BLE001 - a log line must not stop the server
        log.exception("model %s: choices() failed", model_id)
        return
    if choices:
        log.info(
            "model %s ready: %s", model_id, " ".join(f"{k}={v}" for k, v in choices.items()),
            extra={"fields": {"model": model_id, **choices}},
        )
