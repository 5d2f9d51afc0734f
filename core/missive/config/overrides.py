"""Overrides of the file's values: ``MISSIVE__SECTION__KEY`` variables,
``MISSIVE_API_KEY`` and ``--set key=value``, parsed as TOML values."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from .schema import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["ENV_PREFIX", "parse_value", "split_key", "set_path", "env_overrides"]

ENV_PREFIX = "MISSIVE__"


def parse_value(text: str) -> Any:
    """A CLI/env value as TOML (``9000``, ``true``, ``["a"]``) or else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


_KEY_PART = re.compile(r'"([^"]*)"|([^.]+)')


def split_key(key: str) -> list[str]:
    """``models."qwen2.5".context_window`` -> ``["models", "qwen2.5", "context_window"]``."""
    parts = [quoted or bare for quoted, bare in _KEY_PART.findall(key)]
    rebuilt = ".".join(f'"{p}"' if "." in p or '"' + p + '"' in key else p for p in parts)
    if not parts or any(p == "" for p in parts) or rebuilt != key:
        raise ConfigError(
            f"bad configuration key {key!r} (names joined by single dots; quote a name "
            'that holds a dot: models."qwen2.5".context_window)'
        )
    return parts


def set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {'.'.join(parts)}: {part} is not a table")
        node = child
    node[parts[-1]] = value


def env_overrides(environ: Mapping[str, str]) -> list[tuple[list[str], Any]]:
    """``MISSIVE__A__B=v`` variables as (path, value) pairs, plus ``MISSIVE_API_KEY``."""
    found: list[tuple[list[str], Any]] = []
    for name, value in sorted(environ.items()):
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
            found.append((path, parse_value(value)))
    keys = environ.get("MISSIVE_API_KEY")
    if keys:
        found.append((["server", "api_keys"], [k.strip() for k in keys.split(",") if k.strip()]))
    return found
