"""A plugin offering two default models on the echo driver: one with a high
priority (what a hardware vendor's distribution would do) and one at the
generic priority 0 whose id sorts before the embedded ``smollm2-135m``."""

from missive.api import DefaultModel, ModelEntry, hookimpl


@hookimpl
def register_default_models() -> list[DefaultModel]:
    return [
        DefaultModel(id="a-generic", entry=ModelEntry(driver="echo", context_window=100)),
        DefaultModel(id="vendor-tuned", entry=ModelEntry(driver="echo", context_window=100), priority=10),
    ]
