"""The commands that talk to a running server: ``missive ps``, ``missive
batches``, ``missive claude``."""

from __future__ import annotations

import json
import os
import shutil
import sys

import click

from .options import config_options, load, server_and_key, server_options, unavailable

__all__ = ["ps", "batches", "claude"]


@click.command()
@config_options
@click.option("--url", help="Missive's base URL (default: from the config's server.host and server.port).")
@click.option(
    "--api-key",
    help="Key to send to the server (default: the first of the config's server.api_keys, which "
    "MISSIVE_API_KEY sets).",
)
@click.option("--json", "as_json", is_flag=True, help="Print GET /v1/status as it is.")
def ps(
    config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None, as_json: bool
) -> None:
    """Show the running server's models: driver, state, context window,
    generations running and requests waiting, cache use and replicas."""
    from .claude_env import ServerUnavailable, server_url
    from .ps import fetch_status, render_status

    config = load(config_path, overrides)
    base = (url or server_url(config)).rstrip("/")
    key = api_key or (config.server.api_keys[0] if config.server.api_keys else None)
    try:
        status = fetch_status(base, key)
    except ServerUnavailable as exc:
        raise unavailable(exc) from None
    click.echo(json.dumps(status, indent=2) if as_json else render_status(status))


@click.group()
def batches() -> None:
    """The running server's message batches: list, show, results."""


@batches.command("list")
@server_options
@click.option(
    "--limit", type=click.IntRange(1, 100_000), default=20, show_default=True, help="Most batches to list."
)
@click.option("--json", "as_json", is_flag=True, help="Print the batch objects as JSON.")
def batches_list(
    config_path: str | None,
    overrides: tuple[str, ...],
    url: str | None,
    api_key: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List batches, newest first: status and request counts."""
    from .batches import list_batches, render_list
    from .claude_env import ServerUnavailable

    base, key = server_and_key(config_path, overrides, url, api_key)
    try:
        found = list_batches(base, key, limit=limit)
    except ServerUnavailable as exc:
        raise unavailable(exc) from None
    click.echo(json.dumps(found, indent=2) if as_json else render_list(found))


@batches.command("show")
@server_options
@click.option("--json", "as_json", is_flag=True, help="Print the batch object as JSON.")
@click.argument("batch_id")
def batches_show(
    config_path: str | None,
    overrides: tuple[str, ...],
    url: str | None,
    api_key: str | None,
    as_json: bool,
    batch_id: str,
) -> None:
    """Show one batch: status, counts, times, results URL."""
    from .batches import get_batch, render_batch
    from .claude_env import ServerUnavailable

    base, key = server_and_key(config_path, overrides, url, api_key)
    try:
        batch = get_batch(base, key, batch_id)
    except ServerUnavailable as exc:
        raise unavailable(exc) from None
    click.echo(json.dumps(batch, indent=2) if as_json else render_batch(batch))


@batches.command("results")
@server_options
@click.argument("batch_id")
def batches_results(
    config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None, batch_id: str
) -> None:
    """Write an ended batch's results to stdout as JSON Lines."""
    from .batches import stream_results
    from .claude_env import ServerUnavailable

    base, key = server_and_key(config_path, overrides, url, api_key)
    out = sys.stdout.buffer
    try:
        for chunk in stream_results(base, key, batch_id):
            out.write(chunk)
    except ServerUnavailable as exc:
        raise unavailable(exc) from None
    out.flush()


@click.command()
@config_options
@click.option("--url", help="Missive's base URL (default: from the config's server.host and server.port).")
@click.option("--model", help="Model id for Claude Code (default: the first model the server lists).")
@click.option(
    "--small-model",
    help="Model for Claude Code's side calls (ANTHROPIC_DEFAULT_HAIKU_MODEL; default: --model).",
)
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
        ServerUnavailable,
        claude_environment,
        context_warning,
        export_lines,
        fetch_model,
        server_url,
    )

    config = load(config_path, overrides)
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
        raise click.ClickException(
            "claude is not on PATH; install it with: npm install -g @anthropic-ai/claude-code"
        )
    sys.stdout.flush()
    os.execve(binary, [binary, *claude_args], {**os.environ, **env})
