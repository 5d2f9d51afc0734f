"""The served models: configured entries, their driver instances, and id resolution."""

from __future__ import annotations

import logging

from .config import Config, ConfigError, ModelEntry
from .default_model import choose_default_model
from .driver import Driver
from .errors import ModelNotFoundError
from .kernel import Kernel
from .specs import load_object

__all__ = ["ModelTable"]

log = logging.getLogger("missive.models")

#: Drivers shipped as extras of the ``missive-server`` distribution (``missive-server[<name>]``).
BUILTIN_DRIVERS = frozenset({"llamacpp", "echo", "ollama", "mlx", "openai", "vllm", "llamaserver"})


class ModelTable:
    """Model id -> driver instance, built from the config (or the default
    model :func:`~missive.default_model.choose_default_model` picks among
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
            raise ConfigError(
                "no models to serve: configure [models.<id>] in a config file, or install the "
                "embedded default with pip install 'missive-server[default]'"
            )
        self.drivers: dict[str, Driver] = {}
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
                f"pip install 'missive-server[{entry.driver}]'"
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
            hint = f"pip install 'missive-server[{spec.extra}]'" if spec.extra else "reinstall the plugin that provides it"
            raise ConfigError(
                f"driver '{spec.name}' for model '{model_id}' cannot be imported ({exc}); {hint}"
            ) from exc
        driver: Driver = cls(model_id, entry, spec.capabilities)
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

    async def start(self) -> None:
        """Start every driver once (later calls do nothing).

        Raises:
            ConfigError: a driver could not start (missing model file...).
        """
        if self._started:
            return
        self._started = True
        for model_id, driver in self.drivers.items():
            log.info("starting model %s (driver %s)", model_id, driver.name)
            await driver.start()
            self.started.add(model_id)

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
