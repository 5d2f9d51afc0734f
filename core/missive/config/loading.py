"""Where the configuration file is found (``--config``,
``$MISSIVE_CONFIG``, the user's, the system's) and how it is read: the
TOML file, then the environment, then ``--set`` overrides."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .overrides import env_overrides, parse_value, set_path, split_key
from .schema import Config, ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["SYSTEM_CONFIG", "config_search_path", "find_config", "load_config"]

#: The system-wide configuration a package or a container image can ship;
#: searched after the user's (:func:`config_search_path`).
SYSTEM_CONFIG = Path("/etc/missive/missive.toml")


def config_search_path(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The configuration files looked for, in order, when neither ``--config``
    nor ``$MISSIVE_CONFIG`` names one: the user's, then the system's.

    The user's is ``$XDG_CONFIG_HOME/missive/missive.toml``; with
    ``XDG_CONFIG_HOME`` unset, empty or relative it is
    ``$HOME/.config/missive/missive.toml`` (the XDG Base Directory
    specification's rule). The system's is :data:`SYSTEM_CONFIG`,
    ``/etc/missive/missive.toml``.

    Args:
        environ: environment mapping (``os.environ`` by default).
    """
    environ = os.environ if environ is None else environ
    xdg = environ.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        base = Path(xdg)
    else:
        base = Path(environ.get("HOME") or os.path.expanduser("~")) / ".config"
    return [base / "missive" / "missive.toml", SYSTEM_CONFIG]


def find_config(candidates: Iterable[Path]) -> Path | None:
    """The first of ``candidates`` that is a file (one that exists but cannot
    be read is still chosen: :func:`load_config` then reports why), or None."""
    return next((path for path in candidates if path.is_file()), None)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
    search: bool = False,
    search_path: Iterable[Path] | None = None,
) -> Config:
    """Read the TOML file, apply env and CLI overrides.

    The file is ``path``, else ``$MISSIVE_CONFIG``, else (with ``search``) the
    first existing file of ``search_path``, else none: the defaults.
    :attr:`Config.source` says which file was read.

    Args:
        path: TOML file, or None.
        overrides: ``key=value`` strings from ``--set``.
        environ: environment mapping (``os.environ`` by default).
        search: look for a file in ``search_path`` when neither ``path`` nor
            ``$MISSIVE_CONFIG`` names one (the command line and
            :mod:`missive.asgi` do; a library caller gets no file it did not ask for).
        search_path: files to look for, in order (default
            :func:`config_search_path` of ``environ``).

    Raises:
        ConfigError: unreadable file, bad TOML, unknown key or bad value.
    """
    environ = os.environ if environ is None else environ
    path = path or environ.get("MISSIVE_CONFIG") or None
    if path is None and search:
        path = find_config(config_search_path(environ) if search_path is None else search_path)
    data: dict[str, Any] = {}
    if path:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"config file {path} is not UTF-8 text (TOML files are UTF-8): byte {exc.start}: {exc.reason}"
            ) from exc
    for parts, value in env_overrides(environ):
        set_path(data, parts, value)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set needs key=value, got {item!r}")
        set_path(data, split_key(key.strip()), parse_value(raw.strip()))
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
        raise ConfigError(f"invalid configuration: {problems}") from exc
    config.source = str(path) if path else None
    return config
