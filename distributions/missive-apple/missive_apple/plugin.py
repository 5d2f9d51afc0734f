"""The defaults of Missive for Apple Silicon, through the ``register_default_models`` hook.

The default model is an MLX model folder that pip cannot ship (gigabytes):
the distribution never downloads it, it looks for it where the Hugging Face
tools put it (``hf download mlx-community/Qwen3-4B-Instruct-2507-4bit``):
the Hugging Face cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or
``~/.cache/huggingface/hub``, found by ``huggingface_hub``), or the folder
named by ``$MISSIVE_APPLE_MODEL``, which wins. Without either, it registers
nothing and ``missive serve`` says that no model is configured.

Settings chosen for unified memory: ``prompt_cache_entries = 8`` (the KV
caches of eight conversations stay in memory the GPU shares: a Mac has it),
``prefill_step_size = 1024`` (a lower memory peak on long prompts than
mlx-lm's 2048), a 32768-token context.
"""

from __future__ import annotations

import os
from pathlib import Path

from missive.api import DefaultModel, ModelEntry, hookimpl

#: Above the drivers' own defaults (0): this distribution's default model is
#: the one served, and replaces a driver's default of the same id
#: (docs/configuration.md, "Default models").
PRIORITY = 10

#: The plugin API this plugin is built for (docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = [
    "PRIORITY",
    "MISSIVE_API",
    "MODEL_ID",
    "MODEL_REPO",
    "SETTINGS",
    "model_folder",
    "register_default_models",
]

#: The id the default model is served under.
MODEL_ID = "qwen3-4b"
#: The Hugging Face repository of the default model (MLX, 4-bit).
MODEL_REPO = "mlx-community/Qwen3-4B-Instruct-2507-4bit"
#: The MLX driver's settings of the default model, beyond its path.
SETTINGS = {"prompt_cache_entries": 8, "prefill_step_size": 1024}


def model_folder() -> Path | None:
    """The default model's folder: ``$MISSIVE_APPLE_MODEL`` if set, else the
    snapshot of :data:`MODEL_REPO` in the Hugging Face cache, else None."""
    explicit = os.environ.get("MISSIVE_APPLE_MODEL")
    if explicit:
        return Path(explicit).expanduser()
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(MODEL_REPO, "config.json")
    return Path(config).parent if isinstance(config, str) else None


@hookimpl
def register_default_models() -> list[DefaultModel]:
    """The default MLX model with the Apple Silicon settings, when its folder is there."""
    folder = model_folder()
    if folder is None:
        return []
    entry = ModelEntry(
        driver="mlx",
        display_name="Qwen3 4B Instruct 2507, 4-bit MLX (Missive for Apple Silicon)",
        context_window=32768,
        aliases=["claude-qwen3-4b", "claude-*"],
        settings={"model_path": str(folder), **SETTINGS},
    )
    return [DefaultModel(id=MODEL_ID, entry=entry, priority=PRIORITY)]
