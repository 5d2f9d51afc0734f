"""The ratios a benchmark measures against its targets, gathered by ``run_engine.py``.

A benchmark calls :func:`record` for each ratio it prints. When
``run_engine.py`` runs it, the environment variable :data:`RATIOS_ENV` names
a file and each ratio is appended there as one JSON line; run alone, a
benchmark records nothing and prints what it always printed.

A target is written as the benchmark prints it: ``">= 1.0"``, ``"<= 1.3"``,
or ``"-"`` for a figure reported without one.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["RATIOS_ENV", "Ratio", "met", "read", "record"]

#: The file :func:`record` appends to (set by ``run_engine.py``).
RATIOS_ENV = "MISSIVE_BENCH_RATIOS"

_COMPARE: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le}


@dataclass(frozen=True)
class Ratio:
    """One measured ratio: what it compares, its value, its target."""

    bench: str
    name: str
    value: float
    target: str


def met(value: float, target: str) -> bool | None:
    """Whether ``value`` meets ``target`` (None: no target)."""
    op, _, bound = target.partition(" ")
    compare = _COMPARE.get(op)
    return None if compare is None else compare(value, float(bound))


def record(bench: str, name: str, value: float, target: str = "-") -> None:
    """Append one ratio to the file named by :data:`RATIOS_ENV`, if set."""
    path = os.environ.get(RATIOS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(asdict(Ratio(bench, name, round(value, 4), target))) + "\n")


def read(path: Path) -> list[Ratio]:
    """The ratios recorded in ``path`` (none when it does not exist)."""
    if not path.is_file():
        return []
    return [
        Ratio(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
