"""What the ``missive`` commands share: the ``--config``/``--set`` options and
the loader behind them, the running server's URL and key, and the error for
a server that cannot be reached or refuses."""

from __future__ import annotations

from typing import Any

import click

from ..config import Config, ConfigError, config_search_path, load_config

__all__ = ["config_options", "load", "config_origin", "server_options", "server_and_key", "unavailable"]


def config_options(func: Any) -> Any:
    options = [
        click.option(
            "--config",
            "config_path",
            type=click.Path(dir_okay=False),
            help="TOML config file (default: $MISSIVE_CONFIG, else the first of "
            "$XDG_CONFIG_HOME/missive/missive.toml and /etc/missive/missive.toml that exists).",
        ),
        click.option(
            "--set",
            "overrides",
            multiple=True,
            metavar="KEY=VALUE",
            help="Override a config key, e.g. server.port=9000. Repeatable.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def load(config_path: str | None, overrides: tuple[str, ...]) -> Config:
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


def server_options(func: Any) -> Any:
    options = [
        click.option(
            "--url", help="Missive's base URL (default: from the config's server.host and server.port)."
        ),
        click.option(
            "--api-key",
            help="Key to send to the server (default: the first of the config's "
            "server.api_keys, which MISSIVE_API_KEY sets).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return config_options(func)


def server_and_key(
    config_path: str | None, overrides: tuple[str, ...], url: str | None, api_key: str | None
) -> tuple[str, str | None]:
    from .claude_env import server_url

    config = load(config_path, overrides)
    key = api_key or (config.server.api_keys[0] if config.server.api_keys else None)
    return (url or server_url(config)).rstrip("/"), key


def unavailable(exc: Exception) -> click.ClickException:
    message = str(exc)
    if getattr(exc, "status", None) == 401:
        message += "\npass the server's key with --api-key KEY, or MISSIVE_API_KEY=KEY, or --config FILE"
    elif getattr(exc, "status", None) == 403:
        message += (
            "\nthis needs an admin key: pass one with --api-key KEY (missive keys new NAME --scope admin "
            "makes one)"
        )
    return click.ClickException(message)
