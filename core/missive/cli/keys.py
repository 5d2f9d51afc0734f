"""``missive keys`` and ``missive usage``.

* ``missive keys new NAME [--scope admin]``: a new random key, shown once
  (on stderr), and its ``[keys.NAME]`` table (on stdout) to add to the
  configuration: ``missive keys new alice >> missive.toml`` keeps the hash
  and shows the key;
* ``missive keys list``: the configured keys by name, scope, models and
  limits (never a hash);
* ``missive usage``: a running server's usage per key and model
  (``GET /v1/usage``, an admin key), as a table or ``--json``.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

import click

from ..config import Config
from ..config.keys import LIMIT_FIELDS, check_key_name, derived_name, hash_key
from ..keys.usage import COUNTS
from .batches import _get

__all__ = ["keys_group", "register", "new_key", "key_table", "list_keys", "render_usage", "KEY_PREFIX"]

#: Prefix of the keys ``missive keys new`` makes (recognisable in a leak scan).
KEY_PREFIX = "sk-missive-"


def new_key() -> str:
    """A new key: :data:`KEY_PREFIX` and 256 random bits (URL-safe base64)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a TOML basic string is a JSON string for these characters


def key_table(name: str, key: str, scope: str = "user", models: tuple[str, ...] = ()) -> str:
    """The ``[keys.NAME]`` table of ``key`` (its hash only)."""
    lines = [
        f"[keys.{name}]",
        f"key_sha256 = {_toml_string(hash_key(key))}",
        f"scope = {_toml_string(scope)}",
    ]
    if models:
        lines.append(f"models = [{', '.join(_toml_string(m) for m in models)}]")
    return "\n".join(lines) + "\n"


def list_keys(config: Config) -> list[dict[str, Any]]:
    """The configured keys: ``name``, ``scope``, ``models``, ``limits``, ``enabled``,
    ``cache_scope`` (None: the key's own), ``source``."""
    found: list[dict[str, Any]] = [
        {
            "name": name,
            "scope": entry.scope,
            "models": entry.models,
            "limits": entry.limits(),
            "enabled": entry.enabled,
            "cache_scope": entry.cache_scope,
            "source": f"keys.{name}",
        }
        for name, entry in config.keys.items()
    ]
    found += [
        {
            "name": derived_name(key),
            "scope": "user",
            "models": None,
            "limits": {},
            "enabled": True,
            "cache_scope": None,
            "source": f"server.api_keys[{i}]",
        }
        for i, key in enumerate(config.server.api_keys)
    ]
    return found


def render_usage(report: dict[str, Any]) -> str:
    """``totals`` of a ``GET /v1/usage`` answer as a table (a SUBAGENT
    column when the answer is split by it, ``group_by=subagent``)."""
    split = any("subagent" in r for r in report["totals"])
    columns = ("KEY", "MODEL", *(("SUBAGENT",) if split else ()), *(c.upper() for c in COUNTS))
    rows = [
        (
            r["key_name"] or "-",
            r["model"],
            *((("yes" if r["subagent"] else "no"),) if split else ()),
            *(str(r[c]) for c in COUNTS),
        )
        for r in report["totals"]
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(columns, *rows, strict=True)]
    head = f"usage from {report['starting_at']} to {report['ending_at']}"
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    if not rows:
        lines.append("(no requests)")
    return "\n".join(lines)


@click.group("keys")
def keys_group() -> None:
    """API keys: make one, list the configured ones."""


@keys_group.command("new")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(["user", "admin"]),
    default="user",
    show_default=True,
    help="admin: every batch, /v1/status, /metrics and /v1/usage.",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    metavar="ID",
    help="A model id or glob the key may use. Repeatable (default: all).",
)
def keys_new(name: str, scope: str, models: tuple[str, ...]) -> None:
    """Make a key NAME: the key on stderr (shown once, kept nowhere), its
    [keys.NAME] table on stdout: missive keys new alice >> missive.toml"""
    try:
        check_key_name(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    key = new_key()
    click.echo(f"key for {name} (shown once; give it to its user): {key}", err=True)
    click.echo(key_table(name, key, scope, models), nl=False)


Command = Callable[..., None]


def register(
    cli: click.Group,
    config_options: Callable[[Command], Command],
    load: Callable[[str | None, tuple[str, ...]], Config],
    server: Callable[[str | None, tuple[str, ...], str | None, str | None], tuple[str, str | None]],
    unavailable: Callable[[Exception], click.ClickException],
) -> None:
    """Add ``keys`` and ``usage`` to the ``missive`` command line (the
    helpers are :mod:`missive.cli.options`'s: its config options and loader, the
    server's URL and key, the error for a refusal)."""

    @keys_group.command("list")
    @config_options
    @click.option("--json", "as_json", is_flag=True, help="Print the keys as JSON.")
    def keys_list(config_path: str | None, overrides: tuple[str, ...], as_json: bool) -> None:
        """The configured keys: name, scope, models, limits (never a key or a hash)."""
        found = list_keys(load(config_path, overrides))
        if as_json:
            click.echo(json.dumps(found, indent=2))
            return
        if not found:
            # Said on stderr, so scripts reading the list still get an empty one.
            click.echo(
                "no keys configured: the server takes requests without a key (on loopback only); "
                "add one with `missive keys new NAME`",
                err=True,
            )
        for key in found:
            limits = ", ".join(f"{n}={key['limits'][n]}" for n in LIMIT_FIELDS if n in key["limits"])
            models = ",".join(key["models"]) if key["models"] is not None else "*"
            state = "" if key["enabled"] else " (disabled)"
            models += f"  cache_scope={key['cache_scope']}" if key["cache_scope"] else ""
            line = f"{key['name']}  {key['scope']}{state}  models={models}  {limits}  [{key['source']}]"
            click.echo(line.rstrip())

    cli.add_command(keys_group)

    @cli.command("usage")
    @config_options
    @click.option(
        "--url", help="Missive's base URL (default: from the config's server.host and server.port)."
    )
    @click.option(
        "--api-key",
        help="An admin key (default: the first of the config's server.api_keys, which MISSIVE_API_KEY sets).",
    )
    @click.option(
        "--since",
        default=None,
        help="Start: RFC 3339, a date, or a duration before now (24h, 7d). Default 7d.",
    )
    @click.option("--until", "until_", default=None, help="End (same forms). Default: now.")
    @click.option("--bucket-width", type=click.Choice(["1h", "1d"]), default="1d", show_default=True)
    @click.option("--key", "key_name", help="Only this key (its name).")
    @click.option("--model", help="Only this configured model.")
    @click.option(
        "--by-subagent",
        is_flag=True,
        help="Split each key's and model's usage into Claude Code subagents' and the rest.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print GET /v1/usage as it is (with the buckets).")
    def usage_command(
        config_path: str | None,
        overrides: tuple[str, ...],
        url: str | None,
        api_key: str | None,
        since: str | None,
        until_: str | None,
        bucket_width: str,
        key_name: str | None,
        model: str | None,
        by_subagent: bool,
        as_json: bool,
    ) -> None:
        """A running server's usage per key and model: requests and tokens (GET /v1/usage)."""
        from .claude_env import ServerUnavailable

        base, key = server(config_path, overrides, url, api_key)
        params = {
            "starting_at": since,
            "ending_at": until_,
            "bucket_width": bucket_width,
            "key_name": key_name,
            "model": model,
            "group_by": "subagent" if by_subagent else None,
        }
        try:
            report = _get(base, "/v1/usage", key, {k: v for k, v in params.items() if v is not None})
        except ServerUnavailable as exc:
            raise unavailable(exc) from None
        click.echo(json.dumps(report, indent=2) if as_json else render_usage(report))
