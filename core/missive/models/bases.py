"""Models that share another model's load: a driver's ``settings.base``.

A model entry may run on the loaded weights and context of another entry of
its driver (the llamacpp driver's ``settings.base``: the same GGUF loaded
once, each entry with its own LoRA adapters). Its driver says so with
:attr:`~missive.driver.interface.Driver.base`; the model table
(:mod:`missive.models.table`) then:

* checks the pair when it is built (:func:`check_bases`): the base is a
  configured model, of the same driver, and does not itself share another's
  load (a start-up error naming ``settings.base``);
* loads the base first, hands its driver to the sharing one
  (:meth:`~missive.driver.interface.Driver.bind_base`), then starts it;
* holds the base while a request holds the sharing model (it is never
  unloaded under it), unloads the sharing models before their base, and
  closes them first.
"""

from __future__ import annotations

from ..config import ConfigError, ModelEntry
from ..driver.interface import Driver

__all__ = ["check_bases", "sharing"]


def check_bases(entries: dict[str, ModelEntry], drivers: dict[str, Driver]) -> dict[str, str]:
    """Each model sharing another's load -> that model.

    Raises:
        ConfigError: naming the model and ``settings.base``: the base is the
            model itself, not configured, of another driver, or itself shares
            another's load.
    """
    bases: dict[str, str] = {}
    for model_id, driver in drivers.items():
        base = driver.base
        if base is None:
            continue
        where = f"model '{model_id}': settings.base = {base!r}"
        if base == model_id:
            raise ConfigError(f"{where}: a model cannot share its own load")
        if base not in entries:
            known = ", ".join(m for m in drivers if m != model_id) or "none"
            raise ConfigError(f"{where}: no model of that id is configured (models: {known})")
        driver_name, base_driver = entries[model_id].driver, entries[base].driver
        if base_driver != driver_name:
            raise ConfigError(
                f"{where}: that model runs on driver '{base_driver}'; a model shares the load of a model "
                f"of its own driver ('{driver_name}')"
            )
        if drivers[base].base is not None:
            raise ConfigError(
                f"{where}: that model itself shares the load of '{drivers[base].base}' (its settings.base); "
                f"name '{drivers[base].base}' instead"
            )
        bases[model_id] = base
    return bases


def sharing(bases: dict[str, str], base: str) -> list[str]:
    """The models sharing ``base``'s load, in configuration order."""
    return [model_id for model_id, of in bases.items() if of == base]
