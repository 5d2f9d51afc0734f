"""Watching a server for async generators finalized by the garbage
collector instead of closed by the task that ran them."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ['watch_async_generators', 'finalized_generators', 'GENERATOR_ERRORS', 'FINALIZED_MARK']


_WATCH = """\
# Written by missive.testing.watch_async_generators: log every async generator
# that the garbage collector finalizes (instead of the task that ran it).
import asyncio.base_events as _base_events
import sys as _sys

_hook = _base_events.BaseEventLoop._asyncgen_finalizer_hook


def _finalizer(self, agen):
    frame = agen.ag_frame
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
    _sys.stderr.write(f"{FINALIZED_MARK}{agen.__qualname__} at {where}\\n")
    _sys.stderr.flush()
    return _hook(self, agen)


_base_events.BaseEventLoop._asyncgen_finalizer_hook = _finalizer
"""

#: Start of the line a watched server writes for each async generator the
#: garbage collector finalized (:func:`watch_async_generators`).
FINALIZED_MARK = "async generator finalized by the garbage collector: "

#: What the server log shows when an async generator was closed from another
#: task than the one running it, or not closed by its task at all.
GENERATOR_ERRORS = (
    "Task exception was never retrieved",
    "asynchronous generator is already running",
    "didn't stop after athrow",
    "async generator ignored GeneratorExit",
)


def watch_async_generators(directory: str | Path) -> dict[str, str]:
    """Environment variables that make a server started with them (``env=``
    of :func:`serve_process`) log a line for every async generator the
    garbage collector finalizes, as asyncio does then: in a new task, not in
    the task that ran it (the generator was left suspended, not closed).
    Read them back with :func:`finalized_generators`. A ``sitecustomize``
    module written to ``directory`` does it (asyncio's finalizer hook,
    wrapped); ``directory`` goes first on ``PYTHONPATH``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_WATCH.replace("FINALIZED_MARK", repr(FINALIZED_MARK)))
    path = [str(directory), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path)}


def finalized_generators(log: str, under: tuple[str | Path, ...] = ()) -> list[str]:
    """The async generators a :func:`watch_async_generators` server's log
    says the garbage collector finalized (``qualname at file:line``), only
    those whose code lies under one of the ``under`` directories if given
    (e.g. Missive's and the plugins', leaving out libraries' internal
    generators, which are theirs to close)."""
    roots = [str(Path(root).resolve()) + os.sep for root in under]
    found = []
    for line in log.splitlines():
        if FINALIZED_MARK not in line:
            continue
        entry = line.split(FINALIZED_MARK, 1)[1]
        where = entry.rsplit(" at ", 1)[-1]
        if not roots or any(where.startswith(root) for root in roots):
            found.append(entry)
    return found
