"""The ``missive`` command line: ``serve``, ``pull``, ``models``, ``plugins``,
``ps``, ``batches``, ``claude``, ``keys``, ``usage``, ``new-driver``, and plugin commands."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from typing import Any

import click

from .. import __version__
from ..config import Config, ConfigError, config_search_path, load_config
from ..models.defaults import choose_default_model, ranked
from ..kernel.plugins import Kernel

__all__ = ["cli", "main"]


def _config_options(func: Any) -> Any:
    options = [
        click.option(
            "--config", "config_path", type=click.Path(dir_okay=False),
            help="TOML config file (default: $MISSIVE_CONFIG, else the first of "
            "$XDG_CONFIG_HOME/missive/missive.toml and /etc/missive/missive.toml that exists).",
        ),
        click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a config key, e.g. server.port=9000. Repeatable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _load(config_path: str | None, overrides: tuple[str, ...]) -> Config:
    try:
        return load_config(config_path, overrides=overrides, search=True)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def config_origin(config: Config) -> str:
    """One line saying which configuration file was read, or where none was
    found (for the start-up log and ``missive plugins``)."""
    if config.source:
        return f"configuration file {config.source}"
    looked = ", ".join(str(p) for p in config_search_path())
    return f"no configuration file (none given, $MISSIVE_CONFIG unset, none of {looked}): defaults"


@click.group()
@click.version_option(version=__version__, package_name="missive-server", prog_name="missive")
def cli() -> None:
    """Missive: an Anthropic Messages API server for local models."""


@cli.command()
@_config_options
@click.option("--host", help="Listen address (default 127.0.0.1).")
@click.option("--port", type=int, help="Listen port (default 8642).")
@click.option("--api-key", "api_keys", multiple=True, help="Accepted API key. Repeatable. Also MISSIVE_API_KEY.")
@click.option("--strict", is_flag=True, default=None, help="Reject unknown request fields instead of reporting them.")
@click.option("--allow-unauthenticated-remote", is_flag=True, default=None, help="Allow a non-loopback address without API keys.")
@click.option("--log-level", help="debug, info, warning, error.")
@click.option("--log-format", type=click.Choice(["text", "json"]), help="text (default) or json: one JSON object per line.")
@click.option(
    "--model", "model_refs", multiple=True, metavar="REF",
    help="Serve this model (hf://OWNER/REPO[:QUANT], an Ollama name, or a path), fetched now if needed, "
    "with defaults from its file. Repeatable; added to the config's models.",
)
@click.option("--context-window", type=click.IntRange(min=1), help="Context window of the --model models "
              "(default: the file's training context, at most 32768).")
@click.option("--workers", type=click.IntRange(min=1), help="Worker processes sharing the port (server.workers; "
              "above 1 only when every model runs on a remote backend).")
def serve(
    config_path: str | None,
    overrides: tuple[str, ...],
    host: str | None,
    port: int | None,
    api_keys: tuple[str, ...],
    strict: bool | None,
    allow_unauthenticated_remote: bool | None,
    log_level: str | None,
    log_format: str | None,
    model_refs: tuple[str, ...],
    context_window: int | None,
    workers: int | None,
) -> None:
    """Serve the configured models (with no config: the embedded SmolLM2
    default), and any --model REF (missive serve --model hf://OWNER/REPO:Q4_K_M).

    SIGTERM or SIGINT shuts it down gracefully: no new connections, running
    generations get server.shutdown_grace seconds to finish, then it exits 0.
    With --workers N, N processes serve the port (missive.server.workers).
    """
    _report_native_crashes()
    from ..server.workers import shared_metrics_dir

    extra = list(overrides)
    for key, value in (
        ("server.host", host),
        ("server.port", port),
        ("server.strict", strict),
        ("server.allow_unauthenticated_remote", allow_unauthenticated_remote),
        ("server.log_level", log_level),
        ("server.log_format", log_format),
        ("server.workers", workers),
    ):
        if value is not None:
            extra.append(f"{key}={json.dumps(value)}")
    if api_keys:
        extra.append(f"server.api_keys={json.dumps(list(api_keys))}")
    config = _load(config_path, tuple(extra))
    count = config.server.workers
    with contextlib.ExitStack() as stack:
        metrics_dir = stack.enter_context(shared_metrics_dir()) if count > 1 else None
        status = _serve(config, model_refs, context_window, metrics_dir)
    if status:
        sys.exit(status)


def _check_can_listen(host: str, port: int, address: str) -> None:
    """Fail at once, before the models load, when ``host:port`` cannot be
    bound (in use, not an address of this machine). Bound the way Hypercorn
    binds (``SO_REUSEADDR``), then released.

    Raises:
        click.ClickException: ``cannot listen on ADDRESS: REASON``.
    """
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, sockaddr = infos[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {address}: {exc.strerror or exc}") from None


def _serve(config: Config, model_refs: tuple[str, ...], context_window: int | None,
           metrics_dir: str | None) -> int:
    """``missive serve`` once the configuration is read: one process, or the
    supervisor of ``server.workers`` (:mod:`missive.server.workers`). Returns the
    exit status."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config as HypercornConfig

    from ..server.app import create_app
    from ..server.connections import install as close_connections_promptly
    from ..server.logs import setup_logging
    from ..server.services import services
    from ..server.shutdown import CLOSE_MARGIN, serve_until_stopped
    from ..server.workers import WorkerInfo, check, listening_sockets, settle_batches, supervise

    count = config.server.workers
    try:
        config.check_bind()
        setup_logging(config.server.log_level, config.server.log_format)
        logging.getLogger("missive.cli").info(config_origin(config))
        kernel = Kernel(block=config.plugins.block)
        if model_refs:
            from ..models.commands import add_served_models, progress_on_terminal

            progress_on_terminal()
            add_served_models(config, kernel, model_refs, context_window=context_window,
                              echo=_say(config.server.log_format))
        settle_batches(config)
        app = create_app(config, kernel=kernel, metrics_dir=metrics_dir)
        check(count, services(app).models)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    hc = HypercornConfig()
    host_part = f"[{config.server.host}]" if ":" in config.server.host else config.server.host
    hc.bind = [f"{host_part}:{config.server.port}"]
    # Hypercorn's lines go through Missive's handler (one format); its own
    # access log only at debug (Missive writes one line per request).
    hc.accesslog = logging.getLogger("hypercorn.access") if config.server.log_level == "debug" else None
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.keep_alive_timeout = 75
    # ... which Hypercorn also waited for on a connection its client had
    # closed, holding the socket in CLOSE-WAIT: closed at once (missive.server.connections).
    close_connections_promptly()
    # On SIGTERM/SIGINT, Hypercorn waits this long for the connections; Missive
    # ends what still runs after the grace (missive.server.shutdown).
    hc.graceful_timeout = config.server.shutdown_grace + CLOSE_MARGIN
    models, drain = services(app).models, services(app).drain
    address = f"http://{host_part}:{config.server.port}"

    async def run(control: int | None = None, index: int = 0) -> None:
        try:
            await models.start()  # load models before listening; errors end here, cleanly
        except ConfigError as exc:
            await models.aclose()
            raise click.ClickException(str(exc)) from None
        if index == 0:
            workers = f" with {count} workers" if count > 1 else ""
            _say(config.server.log_format)(f"Missive serving {', '.join(config.models)} on {address}{workers}")
        try:
            await serve_until_stopped(
                lambda trigger: hypercorn_serve(app, hc, shutdown_trigger=trigger),
                drain,
                models,
                control=control,
            )
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {address}: {exc.strerror or exc}") from None

    if count == 1:
        _check_can_listen(config.server.host, config.server.port, address)  # before minutes of model loading
        asyncio.run(run())
        return 0
    # Several workers: the sockets are bound here, once (missive.server.workers).
    try:
        sockets = listening_sockets(config.server.host, config.server.port, count)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {address}: {exc.strerror or exc}") from None

    def work(index: int, control: int) -> int:
        mine = sockets[index % len(sockets)]
        for sock in sockets:
            if sock is not mine:
                sock.close()  # another worker's: it must not outlive that worker
        hc.bind = [f"fd://{mine.detach()}"]  # Hypercorn owns the descriptor now
        services(app).worker = WorkerInfo(index, count)
        services(app).admission.worker = (index, count)
        try:
            asyncio.run(run(control, index))
        except click.ClickException as exc:
            exc.show()
            return exc.exit_code
        return 0

    def forked() -> None:
        for sock in sockets:
            sock.close()  # only the workers listen

    def ended(pid: int) -> None:
        from prometheus_client.multiprocess import mark_process_dead

        mark_process_dead(pid, metrics_dir)  # type: ignore[no-untyped-call]

    return supervise(count, work, forked=forked, on_exit=ended)


def _say(log_format: str) -> Any:
    """A function printing a line for people on stderr, or logging it when
    the log is JSON (every line of a JSON log is JSON)."""
    if log_format == "json":
        return logging.getLogger("missive.cli").info
    return lambda line: click.echo(line, err=True)


@cli.command()
@_config_options
@click.argument("refs", nargs=-1, metavar="[REF]...")
def pull(config_path: str | None, overrides: tuple[str, ...], refs: tuple[str, ...]) -> None:
    """Fetch models ahead of time: hf://OWNER/REPO[:QUANT or FILE] into the
    Hugging Face cache (resumed if interrupted; HF_TOKEN, HF_ENDPOINT and
    HF_HUB_OFFLINE honoured), or check an Ollama name or a path. With no
    REF, every reference in the configured models' settings."""
    from ..server.logs import setup_logging
    from ..models.commands import configured_references, progress_on_terminal, pull as pull_refs
    from ..models.sources import ModelRefError

    setup_logging("info")
    if not refs:
        config = _load(config_path, overrides)
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


@cli.command("models")
@_config_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def models_command(config_path: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
    """List the models on this machine: the configured ones (else the default
    model `missive serve` would serve), GGUF and MLX
    models in the Hugging Face cache, Ollama's models; with size,
    quantization, training context and chat template family from their
    files. Nothing is downloaded."""
    from ..models.commands import render_rows, rows_json
    from ..models.sources.catalogue import catalogue

    config = _load(config_path, overrides)
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
        _echo_rules(config)


def _echo_rules(config: Config) -> None:
    """The ``[[routing.rules]]``, in order, one line each (``missive models``, ``missive plugins``)."""
    if config.routing.rules:
        click.echo("\nrouting rules (first match sends the request to its model):")
        for rule in config.routing.rules:
            click.echo(f"  {rule.name}: {rule.describe()}")


def _report_native_crashes() -> None:
    """Have a fatal signal (a segfault or abort in llama.cpp, MLX...) print
    which thread crashed and its Python stack on stderr before the process
    dies (``faulthandler``: ``Fatal Python error: Segmentation fault`` and
    the stacks). The process still ends, killed by that signal, so its exit
    status is non-zero (``139`` in a shell for SIGSEGV) and a supervisor
    restarts it (docs/configuration.md, "Running under a supervisor")."""
    import faulthandler

    try:
        faulthandler.enable(all_threads=True)
    except (RuntimeError, ValueError, OSError, AttributeError):  # stderr is no file (embedded, tests)
        pass


@cli.command()
@_config_options
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
    config = _load(config_path, overrides)
    kernel = Kernel(block=config.plugins.block)
    try:
        chosen = choose_default_model(kernel.default_models, config.server.default_model)
        default_id, default_error = (chosen.id if chosen else None), None
    except ConfigError as exc:
        default_id, default_error = None, str(exc)
    data: dict[str, Any] = {
        "config": config.source,
        "plugins": [
            {"name": p.name, "source": p.source, "module": p.module, "version": p.version, "api": p.api,
             "hooks": p.hooks, "error": p.error}
            for p in kernel.plugins
        ],
        "drivers": {
            name: {"description": spec.description, "extra": spec.extra, "capabilities": spec.capabilities.summary()}
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
        "routing_rules": [{"name": rule.name, "to": rule.to, "when": rule.describe()} for rule in config.routing.rules],
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
            click.echo(f"\n{label} {name}: {info['description']}\n  media types: {', '.join(info['media_types'])}")
    if data["default_models"]:
        click.echo(f"\ndefault models (served when no model is configured): {', '.join(data['default_models'])}")
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
    _echo_rules(config)


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
        info: dict[str, object] = {"driver": entry.driver, "started": False, "capabilities": {}, "error": None}
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


@cli.command()
@_config_options
@click.option("--url", help="Missive's base URL (default: from the config's server.host and server.port).")
@click.option(
    "--api-key",
    help="Key to send to the server (default: the first of the config's server.api_keys, which "
    "MISSIVE_API_KEY sets).",
)
@click.option("--json", "as_json", is_flag=True, help="Print GET /v1/status as it is.")
def ps(config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None, as_json: bool) -> None:
    """Show the running server's models: driver, state, context window,
    generations running and requests waiting, cache use and replicas."""
    from .claude_env import ServerUnavailable, server_url
    from .ps import fetch_status, render_status

    config = _load(config_path, overrides)
    base = (url or server_url(config)).rstrip("/")
    key = api_key or (config.server.api_keys[0] if config.server.api_keys else None)
    try:
        status = fetch_status(base, key)
    except ServerUnavailable as exc:
        raise _unavailable(exc) from None
    click.echo(json.dumps(status, indent=2) if as_json else render_status(status))


def _server_options(func: Any) -> Any:
    options = [
        click.option("--url", help="Missive's base URL (default: from the config's server.host and server.port)."),
        click.option("--api-key", help="Key to send to the server (default: the first of the config's "
                     "server.api_keys, which MISSIVE_API_KEY sets)."),
    ]
    for option in reversed(options):
        func = option(func)
    return _config_options(func)


def _server(config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None) -> tuple[str, str | None]:
    from .claude_env import server_url

    config = _load(config_path, overrides)
    key = api_key or (config.server.api_keys[0] if config.server.api_keys else None)
    return (url or server_url(config)).rstrip("/"), key


def _unavailable(exc: Exception) -> click.ClickException:
    message = str(exc)
    if getattr(exc, "status", None) == 401:
        message += "\npass the server's key with --api-key KEY, or MISSIVE_API_KEY=KEY, or --config FILE"
    elif getattr(exc, "status", None) == 403:
        message += ("\nthis needs an admin key: pass one with --api-key KEY (missive keys new NAME --scope admin "
                    "makes one)")
    return click.ClickException(message)


@cli.group()
def batches() -> None:
    """The running server's message batches: list, show, results."""


@batches.command("list")
@_server_options
@click.option("--limit", type=click.IntRange(1, 100_000), default=20, show_default=True, help="Most batches to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the batch objects as JSON.")
def batches_list(
    config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None, limit: int, as_json: bool
) -> None:
    """List batches, newest first: status and request counts."""
    from ..batches.cli import list_batches, render_list
    from .claude_env import ServerUnavailable

    base, key = _server(config_path, overrides, url, api_key)
    try:
        found = list_batches(base, key, limit=limit)
    except ServerUnavailable as exc:
        raise _unavailable(exc) from None
    click.echo(json.dumps(found, indent=2) if as_json else render_list(found))


@batches.command("show")
@_server_options
@click.option("--json", "as_json", is_flag=True, help="Print the batch object as JSON.")
@click.argument("batch_id")
def batches_show(
    config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None, as_json: bool,
    batch_id: str,
) -> None:
    """Show one batch: status, counts, times, results URL."""
    from ..batches.cli import get_batch, render_batch
    from .claude_env import ServerUnavailable

    base, key = _server(config_path, overrides, url, api_key)
    try:
        batch = get_batch(base, key, batch_id)
    except ServerUnavailable as exc:
        raise _unavailable(exc) from None
    click.echo(json.dumps(batch, indent=2) if as_json else render_batch(batch))


@batches.command("results")
@_server_options
@click.argument("batch_id")
def batches_results(
    config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None, batch_id: str
) -> None:
    """Write an ended batch's results to stdout as JSON Lines."""
    from ..batches.cli import stream_results
    from .claude_env import ServerUnavailable

    base, key = _server(config_path, overrides, url, api_key)
    out = sys.stdout.buffer
    try:
        for chunk in stream_results(base, key, batch_id):
            out.write(chunk)
    except ServerUnavailable as exc:
        raise _unavailable(exc) from None
    out.flush()


@cli.command()
@_config_options
@click.option("--url", help="Missive's base URL (default: from the config's server.host and server.port).")
@click.option("--model", help="Model id for Claude Code (default: the first model the server lists).")
@click.option("--small-model", help="Model for Claude Code's side calls (ANTHROPIC_DEFAULT_HAIKU_MODEL; default: --model).")
@click.option(
    "--api-key",
    help="Key to send to the server and give Claude Code (default: the first of the config's "
    "server.api_keys, which MISSIVE_API_KEY sets).",
)
@click.option("--run", "run_", is_flag=True, help="Run `claude` with no arguments (an interactive session).")
@click.argument("claude_args", nargs=-1, type=click.UNPROCESSED)
def claude(
    config_path: str | None,
    overrides: tuple[str, ...],
    url: str | None,
    model: str | None,
    small_model: str | None,
    api_key: str | None,
    run_: bool,
    claude_args: tuple[str, ...],
) -> None:
    """Print the environment that points Claude Code at the running server,
    or run Claude Code with it: `missive claude -- -p "hello"`. Warns (on
    stderr) when the model's context is too small for Claude Code.

    Use the printed lines with: eval "$(missive claude)".
    """
    from .claude_env import (
        ServerUnavailable, claude_environment, context_warning, export_lines, fetch_model, server_url,
    )

    config = _load(config_path, overrides)
    base = (url or server_url(config)).rstrip("/")
    key = api_key or (config.server.api_keys[0] if config.server.api_keys else None)
    try:
        info = fetch_model(base, key, model)
    except ServerUnavailable as exc:
        message = str(exc)
        if exc.status == 401:
            sent = "a key that it does not accept" if key else "no key"
            message += (
                f"\nmissive claude sent {sent}: pass the server's key with --api-key KEY, "
                "or MISSIVE_API_KEY=KEY, or --config FILE (the file the server was started with)"
            )
        raise click.ClickException(message) from None
    env = claude_environment(base, key, info, small_model)
    warning = context_warning(info)
    if warning:
        click.echo(warning, err=True)  # stderr: eval "$(missive claude)" reads stdout
    if not claude_args and not run_:
        click.echo(export_lines(env), nl=False)
        return
    binary = shutil.which("claude")
    if binary is None:
        raise click.ClickException("claude is not on PATH; install it with: npm install -g @anthropic-ai/claude-code")
    sys.stdout.flush()
    os.execve(binary, [binary, *claude_args], {**os.environ, **env})


from ..keys.cli import register as _register_keys  # noqa: E402  (after the helpers it uses)

_register_keys(cli, _config_options, _load, _server, _unavailable)


@cli.command("new-driver")
@click.argument("name")
@click.option(
    "--output", type=click.Path(file_okay=False), default=".", show_default=True,
    help="Folder to write missive-NAME/ into.",
)
def new_driver(name: str, output: str) -> None:
    """Write missive-NAME/, a driver distribution that passes the driver contract as written.

    NAME is the driver's name (driver = "NAME" in a model entry). Then, in
    missive-NAME/: pip install -e '.[test]' && pytest
    """
    from pathlib import Path

    from ..scaffold import write_skeleton

    try:
        target = write_skeleton(name, Path(output))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    except FileExistsError:
        raise click.ClickException(f"{Path(output) / f'missive-{name}'} exists already; nothing written") from None
    click.echo(f"wrote {target}")
    click.echo(f"next: cd {target} && pip install -e '.[test]' && pytest")


def main() -> None:
    try:
        Kernel().hook.register_commands(cli=cli)
    except Exception as exc:  # a plugin's command must not break the CLI
        print(f"warning: a plugin failed to add commands: {exc}", file=sys.stderr)
    cli()
