"""``missive pull``, ``missive models`` and ``missive plugins``: what this
machine has (model files, plugins, each model's capabilities), without a
running server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from ..config import Config, ConfigError
from ..kernel.plugins import Kernel
from ..models.defaults import choose_default_model, ranked
from .options import config_options, config_origin, load

__all__ = ["pull", "models_command", "plugins", "echo_rules"]


@click.command()
@config_options
@click.argument("refs", nargs=-1, metavar="[REF]...")
def pull(config_path: str | None, overrides: tuple[str, ...], refs: tuple[str, ...]) -> None:
    """Fetch models ahead of time: hf://OWNER/REPO[:QUANT or FILE] into the
    Hugging Face cache (resumed if interrupted; HF_TOKEN, HF_ENDPOINT and
    HF_HUB_OFFLINE honoured), or check an Ollama name or a path. With no
    REF, every reference in the configured models' settings."""
    from ..models.commands import configured_references, progress_on_terminal
    from ..models.commands import pull as pull_refs
    from ..models.sources import ModelRefError
    from ..serving.logs import setup_logging

    setup_logging("info")
    if not refs:
        config = load(config_path, overrides)
        refs = tuple(configured_references(config, Kernel(block=config.plugins.block)))
        if not refs:
            raise click.ClickException(
                "nothing to pull: give a reference (missive pull hf://OWNER/REPO:Q4_K_M), "
                "or a config whose models name one"
            )
    progress_on_terminal()
    try:
        pull_refs(refs, click.echo)
    except ModelRefError as exc:
        raise click.ClickException(str(exc)) from None


@click.command("models")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def models_command(config_path: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
    """List the models on this machine: the configured ones (else the default
    model `missive serve` would serve), GGUF and MLX
    models in the Hugging Face cache, Ollama's models; with size,
    quantization, training context and chat template family from their
    files. Nothing is downloaded."""
    from ..models.commands import render_rows, rows_json
    from ..models.sources.catalogue import catalogue

    config = load(config_path, overrides)
    kernel = Kernel(block=config.plugins.block)
    served = dict(config.models)
    if not served:  # what `missive serve` would serve: the default model
        chosen = choose_default_model(kernel.default_models, config.server.default_model)
        if chosen is not None:
            served[chosen.id] = chosen.entry
    rows = catalogue(served, kernel.drivers)
    if as_json:
        click.echo(json.dumps(rows_json(rows), indent=2))
    else:
        click.echo(render_rows(rows), nl=False)
        echo_rules(config)


def echo_rules(config: Config) -> None:
    """The ``[[routing.rules]]``, in order, one line each (``missive models``, ``missive plugins``)."""
    if config.routing.rules:
        click.echo("\nrouting rules (first match sends the request to its model):")
        for rule in config.routing.rules:
            click.echo(f"  {rule.name}: {rule.describe()}")


@click.command()
@config_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--start",
    is_flag=True,
    help="Also start each configured model (load it, reach its backend) and show the capabilities "
    "start-up leaves it.",
)
def plugins(config_path: str | None, overrides: tuple[str, ...], as_json: bool, start: bool) -> None:
    """List plugins, what failed to load, each driver's capabilities, the
    image and document processors, and each configured model's effective
    capabilities (what requests are checked against)."""
    config = load(config_path, overrides)
    kernel = Kernel(block=config.plugins.block)
    try:
        chosen = choose_default_model(kernel.default_models, config.server.default_model)
        default_id, default_error = (chosen.id if chosen else None), None
    except ConfigError as exc:
        default_id, default_error = None, str(exc)
    data: dict[str, Any] = {
        "config": config.source,
        "plugins": [
            {
                "name": p.name,
                "source": p.source,
                "module": p.module,
                "version": p.version,
                "api": p.api,
                "hooks": p.hooks,
                "error": p.error,
            }
            for p in kernel.plugins
        ],
        "drivers": {
            name: {
                "description": spec.description,
                "extra": spec.extra,
                "capabilities": spec.capabilities.summary(),
            }
            for name, spec in kernel.drivers.items()
        },
        "default_models": [d.id for d in ranked(kernel.default_models)],
        "default_model": default_id,
        "tool_parsers": {name: spec.description for name, spec in kernel.tool_parsers.items()},
        "reasoning_parsers": {name: spec.description for name, spec in kernel.reasoning_parsers.items()},
        "image_processors": {
            name: {"media_types": list(spec.media_types), "description": spec.description}
            for name, spec in kernel.image_processors.items()
        },
        "document_processors": {
            name: {"media_types": list(spec.media_types), "description": spec.description}
            for name, spec in kernel.document_processors.items()
        },
        "models": _model_capabilities(config, kernel, start),
        "routing_rules": [
            {"name": rule.name, "to": rule.to, "when": rule.describe()} for rule in config.routing.rules
        ],
    }
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    click.echo(f"{config_origin(config)}\n")
    for p in data["plugins"]:
        status = f"FAILED: {p['error']}" if p["error"] else ", ".join(p["hooks"]) or "no hooks"
        version = f" {p['version']}" if p["version"] else ""
        click.echo(f"{p['name']}{version} ({p['source']}): {status}")
    for name, info in data["drivers"].items():
        click.echo(f"\ndriver {name}: {info['description']}")
        for key, value in info["capabilities"].items():
            if isinstance(value, list):
                value = ", ".join(value) or "(none)"
            click.echo(f"  {key}: {value}")
    for kind in ("image_processors", "document_processors"):
        for name, info in data[kind].items():
            label = kind.replace("_processors", " processor")
            click.echo(
                f"\n{label} {name}: {info['description']}\n  media types: {', '.join(info['media_types'])}"
            )
    if data["default_models"]:
        click.echo(
            f"\ndefault models (served when no model is configured): {', '.join(data['default_models'])}"
        )
        click.echo(f"  served: {data['default_model'] or 'FAILED: ' + str(default_error)}")
    for kind in ("tool_parsers", "reasoning_parsers"):
        if data[kind]:
            click.echo(f"\n{kind.replace('_', ' ')}:")
            for name, description in data[kind].items():
                click.echo(f"  {name}: {description}")
    for model_id, info in data["models"].items():
        driver = f" (driver {info['driver']})" if info["driver"] else ""
        if info["error"]:
            click.echo(f"\nmodel {model_id}{driver}: FAILED: {info['error']}")
            continue
        when = (
            "after start-up"
            if info["started"]
            else "before start-up; start-up settles them, e.g. max_concurrency from the slots a local "
            "model gets, thinking from its template (missive plugins --start)"
        )
        click.echo(f"\nmodel {model_id}{driver}, capabilities {when}:")
        for key, value in info["capabilities"].items():
            if isinstance(value, list):
                value = ", ".join(value) or "(none)"
            click.echo(f"  {key}: {value}")
    echo_rules(config)


def _model_capabilities(config: Config, kernel: Kernel, start: bool) -> dict[str, dict[str, object]]:
    """Each configured model's effective capabilities: its driver built from
    its entry (the spec's capabilities refined by typed settings and
    ``settings.capabilities``), without starting it; with ``start``, after
    :meth:`Driver.start` (which may narrow them from the model file or the
    backend: a GGUF without a reasoning template, Ollama's ``/api/show``, a
    vLLM refusing ``auto`` tool choice). A model whose driver cannot be built
    or started gets its error instead."""
    from ..models.table import ModelTable

    out: dict[str, dict[str, object]] = {}
    models = dict(config.models)
    if not models:
        try:
            chosen = choose_default_model(kernel.default_models, config.server.default_model)
        except ConfigError as exc:
            return {"(default)": {"driver": None, "started": False, "capabilities": {}, "error": str(exc)}}
        models = {chosen.id: chosen.entry} if chosen else {}
    for model_id, entry in models.items():
        info: dict[str, object] = {
            "driver": entry.driver,
            "started": False,
            "capabilities": {},
            "error": None,
        }
        out[model_id] = info
        try:
            single = config.model_copy(update={"models": {model_id: entry}})
            table = ModelTable(single, kernel)
        except Exception as exc:
            info["error"] = str(exc)
            continue
        driver = table.drivers[model_id]
        try:
            if start:
                asyncio.run(_start_and_close(table))
                info["started"] = True
            info["capabilities"] = driver.capabilities.summary()
        except Exception as exc:
            info["error"] = f"start-up failed: {exc}"
        finally:
            if not start:
                asyncio.run(table.aclose())
    return out


async def _start_and_close(table: Any) -> None:
    try:
        await table.start(load_lazy=True)
    finally:
        await table.aclose()
