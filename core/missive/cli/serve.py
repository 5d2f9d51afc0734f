"""``missive serve``: the configuration read, the models loaded, then
Hypercorn on the port (one process, or ``server.workers`` forked workers)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from typing import Any

import click

from ..config import Config, ConfigError
from ..kernel.plugins import Kernel
from .options import config_options, config_origin, load

__all__ = ["serve"]


@click.command()
@config_options
@click.option("--host", help="Listen address (default 127.0.0.1).")
@click.option("--port", type=int, help="Listen port (default 8642).")
@click.option(
    "--api-key", "api_keys", multiple=True, help="Accepted API key. Repeatable. Also MISSIVE_API_KEY."
)
@click.option(
    "--strict", is_flag=True, default=None, help="Reject unknown request fields instead of reporting them."
)
@click.option(
    "--allow-unauthenticated-remote",
    is_flag=True,
    default=None,
    help="Allow a non-loopback address without API keys.",
)
@click.option("--log-level", help="debug, info, warning, error.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    help="text (default) or json: one JSON object per line.",
)
@click.option(
    "--model",
    "model_refs",
    multiple=True,
    metavar="REF",
    help="Serve this model (hf://OWNER/REPO[:QUANT], an Ollama name, or a path), fetched now if needed, "
    "with defaults from its file. Repeatable; added to the config's models.",
)
@click.option(
    "--context-window",
    type=click.IntRange(min=1),
    help="Context window of the --model models (default: the file's training context, at most 32768).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Worker processes sharing the port (server.workers; "
    "above 1 only when every model runs on a remote backend).",
)
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
    config = load(config_path, tuple(extra))
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


def _serve(
    config: Config, model_refs: tuple[str, ...], context_window: int | None, metrics_dir: str | None
) -> int:
    """``missive serve`` once the configuration is read: one process, or the
    supervisor of ``server.workers`` (:mod:`missive.server.workers`). Returns the
    exit status."""
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config as HypercornConfig

    from ..server.app import create_app
    from ..server.connections import install as close_connections_promptly
    from ..server.http_errors import install as envelope_http_errors
    from ..server.services import services
    from ..server.shutdown import CLOSE_MARGIN, serve_until_stopped
    from ..server.workers import WorkerInfo, check, listening_sockets, settle_batches, supervise
    from ..serving.logs import setup_logging

    count = config.server.workers
    try:
        config.check_bind()
        setup_logging(config.server.log_level, config.server.log_format)
        logging.getLogger("missive.cli").info(config_origin(config))
        kernel = Kernel(block=config.plugins.block)
        if model_refs:
            from ..models.commands import add_served_models, progress_on_terminal

            progress_on_terminal()
            add_served_models(
                config, kernel, model_refs, context_window=context_window, echo=_say(config.server.log_format)
            )
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
    envelope_http_errors()
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
            _say(config.server.log_format)(
                f"Missive serving {', '.join(config.models)} on {address}{workers}"
            )
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
