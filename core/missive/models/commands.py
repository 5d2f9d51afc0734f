"""The work behind ``missive pull``, ``missive models`` and ``missive serve
--model`` (the click commands are in :mod:`missive.cli.local`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from ..config import Config, ConfigError
from ..kernel.plugins import Kernel
from .sources import LocalModel, ModelRefError, model_facts, parse_ref, resolve
from .sources.catalogue import CatalogueRow
from .sources.local import human_size

__all__ = [
    "progress_on_terminal",
    "pull",
    "configured_references",
    "add_served_models",
    "describe",
    "render_rows",
]


def progress_on_terminal() -> None:
    """Let huggingface_hub draw download progress bars only when stderr is
    a terminal (a log file or a pipe gets the one-line messages alone)."""
    if not sys.stderr.isatty():
        from huggingface_hub.utils.tqdm import disable_progress_bars

        disable_progress_bars()


def describe(local: LocalModel) -> str:
    """One line about resolved files: path, source, size, quantization,
    training context, chat template family."""
    facts = model_facts(local)
    bits = [
        local.source,
        human_size(facts.size),
        facts.quantization or "unquantized",
        f"trained context {facts.context_length}" if facts.context_length else "context unknown",
        f"chat template {facts.template_family}",
    ]
    if local.projector is not None:
        bits.append(f"projector {local.projector.name}")
    if facts.error:
        bits.append(f"unreadable: {facts.error}")
    return f"{local.path} ({', '.join(bits)})"


def configured_references(config: Config, kernel: Kernel) -> list[str]:
    """The references (not plain paths) in the configured models' model settings."""
    refs = []
    for entry in config.models.values():
        spec = kernel.drivers.get(entry.driver)
        if spec is None or spec.model_format is None:
            continue
        value = entry.settings.get(spec.model_setting)
        if isinstance(value, str) and value and parse_ref(value).kind != "path":
            refs.append(value)
    return refs


def pull(refs: Iterable[str], echo: Callable[[str], None]) -> list[LocalModel]:
    """Fetch each reference (downloading what is not cached) and echo where it is.

    Raises:
        ModelRefError: the first reference that cannot be fetched or whose
            file cannot be read (a missing path).
    """
    out = []
    for text in refs:
        local = resolve(text)
        error = model_facts(local).error
        if error:
            raise ModelRefError(f"{text}: cannot read {local.path}: {error}")
        echo(f"{text}: {describe(local)}")
        out.append(local)
    return out


def add_served_models(
    config: Config,
    kernel: Kernel,
    refs: Iterable[str],
    *,
    context_window: int | None,
    echo: Callable[[str], None],
) -> list[str]:
    """Add a model entry to ``config`` for each reference of ``missive
    serve --model`` (fetched now, defaults from its file:
    :func:`missive.models.sources.entries.entry_for`); echo what was chosen.
    Returns the model ids.

    Raises:
        ConfigError: a reference cannot be fetched, no driver loads its
            format, or two references get the same id.
    """
    from .sources.entries import entry_for

    ids = []
    for text in refs:
        try:
            local = resolve(text)
        except ModelRefError as exc:
            raise ConfigError(str(exc)) from None
        facts = model_facts(local)
        model_id, entry, chosen = entry_for(local, facts, kernel.drivers, context_window=context_window)
        if model_id in config.models:
            raise ConfigError(f"--model {text}: a model '{model_id}' is already configured")
        config.models[model_id] = entry
        ids.append(model_id)
        context = chosen["context_window"]
        trained = chosen["trained_context"]
        if context is None:
            context_note = "context: the driver's default (the file states none)"
        elif trained and context < trained:
            context_note = f"context {context} tokens (trained {trained}; --context-window to change)"
        else:
            context_note = f"context {context} tokens"
        echo(
            f"model {model_id}: {describe(local)}; driver {chosen['driver']}, {context_note}, "
            f"aliases {', '.join(entry.aliases)}"
        )
    return ids


def render_rows(rows: list[CatalogueRow]) -> str:
    """The ``missive models`` table."""
    if not rows:
        return (
            "no models found: none configured, none in the Hugging Face cache, none in Ollama's store\n"
            "fetch one with: missive pull hf://OWNER/REPO[:QUANT]\n"
        )
    header = ("NAME", "SIZE", "QUANT", "CONTEXT", "TEMPLATE", "SAMPLING", "SOURCE")
    table: list[tuple[str, ...]] = [header]
    notes: list[str] = []
    for row in rows:
        source = row.kind if row.kind != "configured" else f"configured ({row.driver})"
        table.append(
            (
                row.name,
                human_size(row.size) if row.size is not None else "-",
                row.quantization or "-",
                str(row.context_length) if row.context_length else "-",
                row.template_family or "-",
                row.sampling or "-",
                source,
            )
        )
        if row.error:
            notes.append(f"{row.name}: {row.error}")
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines + notes) + "\n"


def rows_json(rows: list[CatalogueRow]) -> list[dict[str, Any]]:
    """The rows as JSON objects (``missive models --json``)."""
    return [row.as_dict() for row in rows]
