"""Missive's state directory: small files kept across restarts.

Holds the generated thinking signing key (``thinking.key``), what drivers
record about the machine (the llamacpp driver's trial results) and the
message batches database (``batches.sqlite3``, :mod:`missive.batches.store`)
and the prompt cache's disk tier (``prompt-cache/``, :mod:`missive.engine.disk_cache`).
Deleting the first two costs a trial or a fresh key; deleting the database
loses the stored batches and their results; deleting the prompt cache, only
cached prompts. One server per state directory: :func:`lock_exclusive`.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["lock_exclusive", "read_json", "state_dir", "write_json"]

log = logging.getLogger("missive.state")


def state_dir() -> Path:
    """The state directory: ``$MISSIVE_STATE_DIR``, else
    ``$XDG_STATE_HOME/missive``, else ``~/.local/state/missive`` (the XDG Base
    Directory specification's default for ``XDG_STATE_HOME``). Not created
    here."""
    explicit = os.environ.get("MISSIVE_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "missive"


def lock_exclusive(fd: int) -> bool:
    """An exclusive, non-blocking lock on ``fd`` (POSIX ``flock``; on a
    platform without it, no lock is taken and True is returned); False when
    another process holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def read_json(name: str) -> dict[str, Any]:
    """The JSON object stored as ``name`` in the state directory; ``{}`` when
    the file is missing, unreadable or not a JSON object (state is a cache:
    a damaged file is the same as none)."""
    path = state_dir() / name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring the state file %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def write_json(name: str, data: dict[str, Any]) -> bool:
    """Store ``data`` as ``name`` in the state directory, atomically (a
    temporary file renamed over the old one, so a reader never sees half a
    file). Returns False, with a warning logged, when it cannot be written
    (read-only home, full disk): state is an optimisation, never a reason to
    fail."""
    folder = state_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1, sort_keys=True)
            os.replace(tmp, folder / name)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        log.warning("could not write the state file %s: %s", folder / name, exc)
        return False
    return True
