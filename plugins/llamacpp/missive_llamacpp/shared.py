"""Model entries that share another entry's load: ``settings.base``.

``[models.qwen-style]`` with ``driver = "llamacpp"`` and ``settings = {base
= "qwen", lora = [{path = "style.gguf", scale = 1.0}]}`` serves the weights
and context already loaded for ``[models.qwen]`` through its own LoRA
adapters: one load, one context, one set of slots and prompt caches for
both. llama.cpp sets adapters on a context, not on a model, and switches
them without a reload (``llama_set_adapters_lora``, :mod:`missive_llamacpp.lora`),
as llama-server's per-request ``lora`` list does.

* **settings**: ``base`` and ``lora`` only (:func:`parse_shared`); anything
  that needs a load of its own (a model file, the context, placement,
  slots, caches, sampling and parser settings the loaded model holds) and
  the entry's ``context_window`` are a start-up error naming them;
* **checks** of the pair (the base configured, of this driver, not itself
  sharing): :func:`missive.models.bases.check_bases`, at start-up;
* **load**: the core loads the base first; this entry's adapters are then
  loaded against the base's model (each file once: an adapter of both is
  loaded once), a file llama.cpp refuses stops start-up with its reason;
* **requests**: tokenized by the base's model, tagged with this entry's
  adapter set (``Prompt.variant``: the files' resolved paths, sizes,
  modification times and scales), admitted by the base's slots
  (``parallel``), decoded in steps of their own set
  (:mod:`missive_llamacpp.variants`); cached prefixes are reused only by
  prompts of the same set (:mod:`missive_llamacpp.slots`,
  :mod:`missive_llamacpp.portable`). The base's own requests run through
  the base's own ``settings.lora`` (none: no adapter), never this entry's.
"""

from __future__ import annotations

from typing import Any

from missive.api import ConfigError, ModelEntry

from .settings import LlamaCppSettings, LoraAdapter, parse_settings

__all__ = ["SharedEntry", "parse_shared", "variant_key"]

#: The settings of an entry that shares another's load.
SHARED_SETTINGS = ("base", "lora")


class SharedEntry:
    """What an entry with ``settings.base`` sets: its base and its adapters.

    Attributes:
        base: the id of the model whose load it shares.
        lora: its adapters (validated as ``settings.lora``).
        settings: placeholder settings until the base is bound (none of it is loaded).
    """

    def __init__(self, base: str, lora: list[LoraAdapter], settings: LlamaCppSettings) -> None:
        self.base = base
        self.lora = lora
        self.settings = settings


def parse_shared(model_id: str, entry: ModelEntry) -> SharedEntry | None:
    """The entry's ``settings.base`` and ``lora``, None without ``base``.

    Raises:
        ConfigError: ``base`` is not a model id, a ``lora`` item is invalid,
            or the entry sets what needs a load of its own (naming each).
    """
    settings = entry.settings
    if "base" not in settings:
        return None
    base = settings["base"]
    if not isinstance(base, str) or not base:
        raise ConfigError(f"model '{model_id}': invalid llamacpp setting settings.base: must be a model id")
    own = [f"settings.{key}" for key in settings if key not in SHARED_SETTINGS]
    if entry.context_window is not None:
        own.append("context_window")
    if own:
        raise ConfigError(
            f"model '{model_id}': {', '.join(own)} need a load of their own; a model with settings.base "
            f"shares the loaded model of '{base}' (its weights, context, slots, caches, template and "
            f"parsers) and sets only its own settings.lora: set them on '{base}', or give '{model_id}' "
            "its own settings.model_path instead of settings.base"
        )
    # The lora list is validated as a model's own (messages name settings.lora.N).
    placeholder = parse_settings(
        model_id, {"model_path": f"(the load of {base})", "lora": settings.get("lora", [])}
    )
    return SharedEntry(base, list(placeholder.lora), placeholder)


def variant_key(lora: list[LoraAdapter], model_id: str) -> tuple[tuple[Any, ...], ...]:
    """The adapter set's key (``Prompt.variant``): each file's resolved
    path, size and modification time (a file replaced in place is another
    adapter) and its scale.

    Raises:
        ConfigError: a file is missing (naming ``settings.lora.N``).
    """
    key = []
    for i, adapter in enumerate(lora):
        path = adapter.file
        try:
            st = path.stat()
        except OSError:
            raise ConfigError(
                f"model '{model_id}': settings.lora.{i}: adapter file not found: {path}"
            ) from None
        key.append((str(path.resolve()), st.st_size, st.st_mtime_ns, adapter.scale))
    return tuple(key)
