"""Model references in model entries, and the entry ``missive serve --model`` builds.

A driver that loads model files (a :class:`~missive.kernel.specs.DriverSpec` with
``model_format``) takes a reference in its ``model_setting``
(``model_path = "hf://..."``): :func:`resolve_entry` fetches it and gives
the entry with the local path (and the projector, when the reference has
one and the entry sets none) before the driver is built.

:func:`entry_for` is the whole configuration of ``missive serve --model
REF``: the driver from the files' format, the context window from the file
(the training context, at most :data:`DEFAULT_CONTEXT` tokens), the
display name, and the ``claude-*`` aliases Claude Code needs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...config import ConfigError, ModelEntry
from ...kernel.specs import DriverSpec
from . import resolve
from .local import LocalModel, ModelFacts
from .refs import ModelRef, ModelRefError, parse_ref

__all__ = ["ResolvedEntry", "resolve_entry", "entry_for", "model_id_for", "driver_for", "DEFAULT_CONTEXT"]

#: Most tokens of context ``missive serve --model`` gives a model by
#: default: enough for Claude Code (its first request is 12,000 to 20,000
#: tokens, and a session grows), while a model trained on 128k or 256k
#: tokens does not reserve a KV cache of that size per slot.
DEFAULT_CONTEXT = 32768


@dataclass(frozen=True)
class ResolvedEntry:
    """A model entry with its references resolved: ``entry`` (the same
    object when nothing changed) and the ``local`` files (None for a driver
    that loads no files)."""

    entry: ModelEntry
    local: LocalModel | None


def resolve_entry(model_id: str, entry: ModelEntry, spec: DriverSpec | None) -> ResolvedEntry:
    """Resolve the reference in ``entry``'s model setting (downloading it
    when needed; blocking: call it from a worker thread).

    Raises:
        ConfigError: the reference is bad, cannot be fetched, or names a
            model of another format than the driver loads (message names
            the model, the reference and the files).
    """
    if spec is None or spec.model_format is None:
        return ResolvedEntry(entry, None)
    value = entry.settings.get(spec.model_setting)
    if not isinstance(value, str) or not value:
        return ResolvedEntry(entry, None)
    try:
        ref = parse_ref(value)
        local = resolve(ref)
    except ModelRefError as exc:
        raise ConfigError(f"model '{model_id}': settings.{spec.model_setting}: {exc}") from None
    if ref.kind == "path":
        return ResolvedEntry(entry, local)
    if local.format != spec.model_format:
        raise ConfigError(
            f"model '{model_id}': {ref} is a{'n' if local.format == 'mlx' else ''} {local.format.upper()} "
            f"model, and driver '{spec.name}' loads {spec.model_format.upper()} models"
        )
    settings: dict[str, Any] = {**entry.settings, spec.model_setting: str(local.path)}
    if (
        local.projector is not None
        and spec.projector_setting
        and spec.projector_setting not in entry.settings
    ):
        settings[spec.projector_setting] = str(local.projector)
    return ResolvedEntry(entry.model_copy(update={"settings": settings}), local)


def driver_for(local: LocalModel, drivers: Mapping[str, DriverSpec]) -> str:
    """The registered driver that loads ``local``'s format (``llamacpp``
    for GGUF, ``mlx`` for MLX folders, or a plugin's).

    Raises:
        ConfigError: none is installed (the message names the pip extra).
    """
    for name, spec in drivers.items():
        if spec.model_format == local.format:
            return name
    extra = "llamacpp" if local.format == "gguf" else "mlx"
    raise ConfigError(
        f"{local.ref} is a{'n' if local.format == 'mlx' else ''} {local.format.upper()} model and no "
        f"installed driver loads those; pip install 'missive-server[{extra}]'"
    )


def model_id_for(ref: ModelRef, local: LocalModel) -> str:
    """The id ``missive serve --model`` serves ``ref`` as: the repository's
    name without a ``-GGUF``/``-MLX`` suffix (hf), the Ollama name with its
    tag (``qwen3:4b``), or the file's or folder's name without ``.gguf``;
    lower case."""
    if ref.kind == "hf":
        name = ref.repo.split("/", 1)[1]
    elif ref.kind == "ollama":
        name = f"{ref.repo.rsplit('/', 1)[-1]}:{ref.selector or 'latest'}"
    else:
        name = local.path.name
    name = re.sub(r"(?i)([-_.](gguf|mlx))+$", "", name.removesuffix(".gguf").removesuffix(".GGUF"))
    return name.lower() or "model"


def entry_for(
    local: LocalModel,
    facts: ModelFacts,
    drivers: Mapping[str, DriverSpec],
    *,
    context_window: int | None = None,
) -> tuple[str, ModelEntry, dict[str, Any]]:
    """The model id, entry and the choices made (for the start-up message)
    that serve ``local`` with no configuration file.

    ``context_window`` None: the file's training context, at most
    :data:`DEFAULT_CONTEXT` (unknown: the driver's own default).

    Raises:
        ConfigError: no installed driver loads the model's format.
    """
    driver = driver_for(local, drivers)
    spec = drivers[driver]
    model_id = model_id_for(local.ref, local)
    if context_window is None and facts.context_length:
        context_window = min(facts.context_length, DEFAULT_CONTEXT)
    settings: dict[str, Any] = {spec.model_setting: str(local.path)}
    if local.projector is not None and spec.projector_setting:
        settings[spec.projector_setting] = str(local.projector)
    entry = ModelEntry(
        driver=driver,
        display_name=facts.name or model_id,
        context_window=context_window,
        aliases=[f"claude-{model_id}" if not model_id.startswith("claude") else model_id, "claude-*"],
        settings=settings,
    )
    chosen = {
        "source": local.source,
        "file": str(local.path),
        "driver": driver,
        "quantization": facts.quantization or "none",
        "context_window": context_window,
        "trained_context": facts.context_length,
        "chat_template": facts.template_family,
        "projector": str(local.projector) if local.projector else None,
    }
    return model_id, entry, chosen
