"""Models sharing another model's load (:mod:`missive.models.bases`): the
checks of a driver's ``settings.base`` at start-up, and the model table's
order (the base loaded first and bound, held while the sharing model is,
unloaded and closed after it), with a driver made for the test."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from missive.config import Config, ConfigError, ModelEntry
from missive.driver.capabilities import Capabilities
from missive.driver.interface import Driver
from missive.kernel.plugins import Kernel
from missive.kernel.specs import DriverSpec
from missive.models.bases import check_bases, sharing
from missive.models.table import ModelTable

#: What the drivers of one table did, in order.
EVENTS: list[str] = []


class Sharing(Driver):
    """A driver whose ``settings.base`` names the model whose load it shares."""

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities) -> None:
        super().__init__(model_id, entry, capabilities)
        self.base = entry.settings.get("base")
        self.bound: Driver | None = None

    def bind_base(self, base: Driver) -> None:
        EVENTS.append(f"bind {self.model_id} to {base.model_id}")
        self.bound = base

    async def start(self) -> None:
        EVENTS.append(f"start {self.model_id}")

    async def aclose(self) -> None:
        EVENTS.append(f"close {self.model_id}")

    async def generate(self, request: Any) -> Any:  # pragma: no cover - not served here
        raise NotImplementedError

    async def count_tokens(self, request: Any) -> int:  # pragma: no cover
        raise NotImplementedError


def kernel() -> Kernel:
    k = Kernel(load_entry_points=False)
    for name in ("fake", "other"):
        k.drivers[name] = DriverSpec(name=name, factory=f"{__name__}:Sharing", capabilities=Capabilities())
    return k


def table(models: dict[str, dict[str, Any]]) -> ModelTable:
    config = Config.model_validate({"models": models})
    return ModelTable(config, kernel())


def entry(base: str | None = None, driver: str = "fake") -> dict[str, Any]:
    return {"driver": driver, "settings": {"base": base} if base else {}}


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ({"b": entry("b")}, r"model 'b': settings.base = 'b': a model cannot share its own load"),
        ({"b": entry("a")}, r"model 'b': settings.base = 'a': no model of that id is configured"),
        (
            {"a": entry(driver="other"), "b": entry("a")},
            r"model 'b': settings.base = 'a': that model runs on driver 'other'; a model shares the load of "
            r"a model of its own driver \('fake'\)",
        ),
        (
            {"a": entry(), "b": entry("a"), "c": entry("b")},
            r"model 'c': settings.base = 'b': that model itself shares the load of 'a' .*name 'a' instead",
        ),
    ],
)
def test_a_base_that_cannot_be_shared_stops_start_up(models: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        table(models)


def test_the_base_loads_first_is_held_by_its_sharers_and_goes_last() -> None:
    EVENTS.clear()
    models = table({"style": entry("plain"), "plain": entry(), "tone": entry("plain"), "alone": entry()})
    assert models.bases == {"style": "plain", "tone": "plain"}
    assert sharing(models.bases, "plain") == ["style", "tone"]
    assert check_bases(models.entries, models.drivers) == models.bases

    async def scenario() -> None:
        await models.start()
        # Listed first, "style" waits for its base: loaded, then bound to it.
        assert EVENTS[:4] == ["start plain", "bind style to plain", "start style", "bind tone to plain"]
        assert models.drivers["style"].bound is models.drivers["plain"]  # type: ignore[attr-defined]
        use = models.use("style")
        assert models.uses["plain"] == 1 and models.uses["style"] == 1
        use.release()
        assert models.uses["plain"] == 0 and models.uses["style"] == 0
        EVENTS.clear()
        assert models._lock is not None
        async with models._lock:
            await models._unload("plain", "memory", "a test")
        assert EVENTS == ["close style", "close tone", "close plain"]
        assert models.started == {"alone"}
        EVENTS.clear()
        await models.ensure_loaded("tone")  # loads its base again first
        assert EVENTS == ["start plain", "bind tone to plain", "start tone"]
        EVENTS.clear()
        await models.aclose()
        assert EVENTS.index("close tone") < EVENTS.index("close plain")
        assert EVENTS.index("close style") < EVENTS.index("close plain")

    asyncio.run(scenario())
