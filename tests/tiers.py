"""Test tiers (docs/contributing.md), applied by the root conftest.py: every collected test gets exactly one
of the markers ``unit``, ``api``, ``live``, ``model``, ``packaging``, so
``pytest -m "unit or api"`` (``./scripts/test --fast``) runs what needs no
server process, no model and no install.

A test's tier is the most expensive thing it reaches, read from the source
of the test, its class, its fixtures, and the repository's own functions
and classes those name (transitively), and the module constants they name
(``CONFIG``); Missive's core and installed packages are not read, so a
call to ``live_server`` counts, its body does not:

* ``packaging``: builds or installs distributions (a virtual environment
  made by ``venv(``-named helpers, ``python -m build``, docker);
* ``model``: runs a real model engine (``live_server(None)`` or
  ``in_process_app(None)``: the default model; the
  ``llamacpp`` or ``mlx`` driver, llama.cpp, ``llama_server``, the default
  model's fixtures);
* ``live``: starts a Missive process (``live_server``, ``serve_process``,
  the ``echo_url`` and ``contract_url`` fixtures, ``python -m missive``,
  ``pytest`` or ``hypercorn`` in a subprocess, a benchmark's server through
  ``load_bench``);
* ``api``: the app in process (``in_process_app``, Quart's test client);
* ``unit``: none of these.

A test may name its tier itself (``@pytest.mark.live``); two tier markers
on one test stop the run.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The repository's code a test's tier is read from; the core (and what is
#: installed in a virtual environment) is not.
_NOT_READ = (ROOT / "core", ROOT / ".venv")

#: The markers, registered in pyproject.toml's [tool.pytest.ini_options].
TIERS = ("unit", "api", "live", "model", "packaging")

#: Most expensive first: the first tier whose pattern the sources match.
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("packaging", re.compile(r"\b(layered_venv|fresh_venv|venv)\(|\"-m\", \"(build|venv)\"|\bdocker\b")),
    (
        "model",
        re.compile(
            r"\b(live_server|serve_process|in_process_app)\(\s*None\b|[\"'](llamacpp|mlx)[\"']|\bllama_cpp\b|\bmissive_llamacpp\b"
            r"|\bmlx_lm\b|\bllama_server\(|\bsmollm2_gguf\(|\bdefault_url\b|\bsmol\b"
        ),
    ),
    (
        "live",
        re.compile(
            r"\b(live_server|serve_process)\(|\becho_url\b|\bcontract_url\b|\bmissive_server\b"
            r"|\"-m\", \"(missive|pytest|hypercorn)\"|\bload_bench\("
        ),
    ),
    ("api", re.compile(r"\bin_process_app\(|\.test_client\(|\.test_app\(")),
]

_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_TIERS_OF: dict[int, str] = {}


def _tier_of_object(obj: Any) -> str:
    """The tier of ``obj``'s source and of the repository's functions and
    classes it names, from its module's globals, transitively: the most
    expensive of its own source's tier and theirs (cached per object, so each
    source is read and searched once; an object met again inside its own
    reading counts as ``unit`` there)."""
    key = id(obj)
    if key in _TIERS_OF:
        return _TIERS_OF[key]
    _TIERS_OF[key] = "unit"  # a cycle reads each object once
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError):
        return "unit"
    parts = [tier_of_source(source)]
    names = getattr(inspect.unwrap(obj), "__globals__", None)
    if names is None:  # a class: its module's globals
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        names = vars(module) if module is not None else {}
    for name in set(_NAME.findall(source)):
        other = names.get(name)
        if inspect.isfunction(other):
            other = inspect.unwrap(other)  # a @contextmanager's own function
        if (inspect.isfunction(other) or inspect.isclass(other)) and other is not obj and _in_repo(other):
            parts.append(_tier_of_object(other))
        elif isinstance(other, (dict, list, tuple, str)) and name.isupper():
            parts.append(tier_of_source(repr(other)))  # a module constant it names (a server's CONFIG)
    _TIERS_OF[key] = max(parts, key=TIERS.index)
    return _TIERS_OF[key]


def _in_repo(obj: Any) -> bool:
    try:
        path = Path(inspect.getsourcefile(obj) or "").resolve()
    except TypeError:
        return False
    return path.is_relative_to(ROOT) and not any(path.is_relative_to(p) for p in _NOT_READ)


@functools.cache  # the cases of one parametrized test read the same sources
def tier_of_source(source: str) -> str:
    """The tier of a test whose reachable source is ``source``."""
    for tier, pattern in PATTERNS:
        if pattern.search(source):
            return tier
    return "unit"


def tier_of(item: pytest.Item) -> str:
    """``item``'s tier: its own marker, else read from its sources."""
    named = [m.name for m in item.iter_markers() if m.name in TIERS]
    if len(set(named)) > 1:
        raise pytest.UsageError(f"{item.nodeid} has several tier markers: {sorted(set(named))}")
    if named:
        return named[0]
    function = getattr(item, "function", None)
    tiers = [_tier_of_object(function)] if function is not None else []
    cls = getattr(item, "cls", None)
    if cls is not None:
        tiers.append(_tier_of_object(cls))
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs:
            tiers.append(_tier_of_object(defs[-1].func))  # the definition in effect
            tiers.append(tier_of_source(name))  # a fixture's name counts too (default_url, echo_url)
    # The most expensive tier of the parts, each object's read once (cached).
    return max(tiers, key=TIERS.index, default="unit")
