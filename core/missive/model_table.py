"""The served models: configured entries, their driver instances, and id resolution."""

from __future__ import annotations

import logging

from .config import Config, ConfigError, ModelEntry
from .driver import Driver
from .errors import ModelNotFoundError
from .kernel import Kernel
from .specs import load_object

__all__ = ["ModelTable"]

log = logging.getLogger("missive.models")


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
        self.drivers: dict[str, Driver] = {}
        for model_id, entry in config.models.items():
            self.drivers[model_id] = self._build(model_id, entry)

    def _build(self, model_id: str, entry: ModelEntry) -> Driver:
        spec = self.kernel.drivers.get(entry.driver)
        if spec is None:
            known = ", ".join(sorted(self.kernel.drivers)) or "none installed"
            raise ConfigError(
                f"model '{model_id}' uses driver '{entry.driver}', which no loaded plugin provides "
                f"(available: {known}); install it, e.g. pip install 'missive[{entry.driver}]'"
            )
        try:
            cls = load_object(spec.factory)
        except ImportError as exc:
            extra = spec.extra or entry.driver
            raise ConfigError(
                f"driver '{spec.name}' for model '{model_id}' cannot be imported ({exc}); "
                f"install its dependencies: pip install 'missive[{extra}]'"
            ) from exc
        driver = cls(model_id, entry, spec.capabilities)
        driver.name = spec.name
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
        for model_id, driver in self.drivers.items():
            log.info("starting model %s (driver %s)", model_id, driver.name)
            await driver.start()

    async def aclose(self) -> None:
        for driver in self.drivers.values():
            try:
                await driver.aclose()
            except Exception:
                log.exception("closing driver %s failed", driver.name)
