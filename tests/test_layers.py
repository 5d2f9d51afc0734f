"""The core's packages import downwards only, and no file imports itself back
(docs/architecture.md).

The import graph is :mod:`grimp`'s (the graph import-linter checks), built
from every ``import`` of ``core/missive``: at module level, inside functions
and under ``if TYPE_CHECKING:`` alike, since an annotation is a dependency of
the code that reads it too. Three rules hold it:

* each package has a floor (:data:`FLOORS`, lowest first; a package may
  import its own floor's packages and those below); an import of a higher
  floor ("an arrow back up") fails unless it is one of :data:`EXCEPTIONS`,
  each with its reason, and there are at most :data:`MAX_ARROWS_UP` of them;
* no circle between files: every file's imports can be ordered
  (:mod:`graphlib` names a circle when one exists);
* no package of the answer's features imports ``messages/`` (the answer is
  built from them, not the other way round).
"""

from __future__ import annotations

import graphlib
from collections import defaultdict
from functools import cache
from pathlib import Path

import grimp

import missive

ROOT = Path(missive.__file__).parent

#: Lowest first: (band, packages in their order). The order inside a band
#: counts as much as the order of bands. ``missive`` is the package's own
#: ``__init__`` (the version and ``hookimpl``).
FLOORS: list[tuple[str, list[str]]] = [
    ("wire", ["protocol"]),
    ("settings", ["config"]),
    ("driver contract", ["driver"]),
    ("plugin kernel", ["kernel", "missive"]),
    (
        "the answer's features",
        [
            "sampling",
            "media",
            "chat_template",
            "thinking",
            "tools",
            "reasoning",
            "default_plugins",
            "context_management",
        ],
    ),
    ("models and the answer", ["models", "routing", "messages"]),
    ("serving one request", ["serving"]),
    ("backends", ["engine", "remote"]),
    ("server features", ["threads", "keys", "batches", "console"]),
    ("HTTP shell", ["server"]),
    ("entry points", ["scaffold", "cli", "api", "asgi", "testing", "pytest_plugin", "__main__"]),
]

#: The packages ``messages/`` is built from (every band below its own):
#: none of them may import it.
FEATURES = {
    p
    for _, packages in FLOORS[
        : next(i for i, (band, _) in enumerate(FLOORS) if band == "models and the answer")
    ]
    for p in packages
}

#: Arrows back up that exist, each with why: (importing package, imported package).
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("protocol", "tools"): "a tool's input_schema is checked as the body is validated (a 400 with the field "
    "path), and which server-tool blocks are answered is not reported as ignored",
    ("config", "media"): "media.fetch_allow is parsed when the config loads (media.addresses)",
    ("kernel", "missive"): "the plugin compatibility check names the core's version",
    (
        "tools",
        "default_plugins",
    ): "the built-in tool parsers' specs, for a template's parser without a kernel",
    ("reasoning", "default_plugins"): "the built-in reasoning parsers' specs, likewise",
}

#: The most arrows back up there may be (issue 41).
MAX_ARROWS_UP = 15


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "missive"


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("missive", exclude_type_checking_imports=False, cache_dir=None)


def _file_imports() -> dict[str, set[str]]:
    graph = _graph()
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def floor_of(package: str) -> int | None:
    """The floor index of a top-level package (``config``), or None."""
    order = [p for _, packages in FLOORS for p in packages]
    return order.index(package) if package in order else None


def package_arrows() -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(importing package, imported package) -> the (file, file) imports behind it."""
    arrows: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for module, imported in _file_imports().items():
        for target in imported:
            if _package(module) != _package(target):
                arrows[(_package(module), _package(target))].add((module, target))
    return arrows


def arrows_up() -> dict[tuple[str, str], set[tuple[str, str]]]:
    return {
        pair: files
        for pair, files in package_arrows().items()
        if (a := floor_of(pair[0])) is not None and (b := floor_of(pair[1])) is not None and b > a
    }


def test_every_package_has_a_floor() -> None:
    packages = {_package(m) for m in _graph().modules}
    assert {p for p in packages if floor_of(p) is None} == set()


def test_no_arrow_back_up_but_the_listed_exceptions() -> None:
    unlisted = {pair: sorted(files)[:3] for pair, files in arrows_up().items() if pair not in EXCEPTIONS}
    assert unlisted == {}, "imports of a higher floor (move the code, or list the exception with its reason)"


def test_every_exception_still_exists() -> None:
    assert set(EXCEPTIONS) - set(arrows_up()) == set()


def test_at_most_fifteen_arrows_back_up() -> None:
    assert len(arrows_up()) <= MAX_ARROWS_UP


def test_no_circle_between_files() -> None:
    sorter = graphlib.TopologicalSorter(_file_imports())
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        raise AssertionError(f"import circle: {' -> '.join(exc.args[1])}") from None


def test_the_answers_features_do_not_import_messages() -> None:
    found = {
        pair: sorted(files)[:3]
        for pair, files in package_arrows().items()
        if pair[0] in FEATURES and pair[1] == "messages"
    }
    assert found == {}


def test_the_driver_contract_imports_only_settings_and_the_wire() -> None:
    allowed = {"driver", "config", "protocol"}
    found = {pair for pair in package_arrows() if pair[0] == "driver" and pair[1] not in allowed}
    assert found == set(), found


def test_config_imports_only_the_wire() -> None:
    found = {pair for pair in package_arrows() if pair[0] == "config" and pair[1] != "protocol"}
    assert found <= {("config", "media")}, found  # the listed exception


MAX_LINES = 450


def test_no_core_module_is_over_450_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, long
