"""The core's layer packages import downwards only (docs/architecture.md).

Walks every module of ``core/missive`` with :mod:`ast` and fails on an
import of a higher layer that is not one of the known exceptions below, so
the diagram in docs/architecture.md stays true. Imports under
``if TYPE_CHECKING:`` are annotations, not dependencies at run time, and
are not counted; imports inside functions are.
"""

from __future__ import annotations

import ast
from pathlib import Path

import missive

ROOT = Path(missive.__file__).parent

#: Lowest first. A package may import its own layer and those below it.
#: Modules named ``cli.py`` belong to the CLI layer wherever they live (the
#: ``missive keys`` and ``missive batches`` commands).
LAYERS: list[tuple[str, set[str]]] = [
    ("wire", {"protocol"}),
    ("settings and kernel", {"config", "kernel"}),
    (
        "one answer",
        {
            "driver",
            "messages",
            "tools",
            "thinking",
            "reasoning",
            "media",
            "sampling",
            "context",
            "default_plugins",
        },
    ),
    ("backends and models", {"engine", "remote", "routing", "models"}),
    ("server", {"server", "keys", "threads", "batches", "console"}),
    ("entry points", {"cli", "api", "asgi", "testing", "pytest_plugin", "scaffold", "__main__"}),
]

#: Upward imports that exist, each with why: (importing module, imported
#: module). A new one fails the test until it is removed or listed here.
EXCEPTIONS: dict[tuple[str, str], str] = {
    (
        "protocol.schema.request",
        "tools.validate",
    ): "a tool's input_schema is checked as the body is validated (a 400 with the field path)",
    (
        "protocol.schema.ignored",
        "tools.server",
    ): "which server-tool blocks are answered, hence not reported as ignored",
    ("config.schema", "keys.entry"): "the [keys.NAME] and [usage] sections are part of the config model",
    ("config.schema", "routing.rules"): "the [[routing.rules]] section is part of the config model",
    (
        "config.schema",
        "context.capabilities",
    ): "a model's capability overrides are checked against the known keys",
    ("config.schema", "media.addresses"): "media.fetch_allow is parsed when the config loads",
    ("kernel.specs", "driver.capabilities"): "a DriverSpec carries the driver's Capabilities",
}


def layer_of(module: str) -> int | None:
    """The layer index of ``module`` (dotted, without ``missive.``)."""
    parts = module.split(".")
    name = "cli" if parts[-1] == "cli" and len(parts) > 1 else parts[0]
    for n, (_, packages) in enumerate(LAYERS):
        if name in packages:
            return n
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """The ``missive`` modules ``path`` imports at run time (``missive.`` stripped)."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - (child.level - 1)]
                    target = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    target = (child.module or "").removeprefix("missive").lstrip(".")
                    if not (child.module or "").startswith("missive"):
                        continue
                if target:
                    found.append(target)
                else:  # from missive import x
                    found.extend(alias.name for alias in child.names)
            elif isinstance(child, ast.Import):
                found.extend(
                    a.name.removeprefix("missive.") for a in child.names if a.name.startswith("missive.")
                )
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def upward_imports() -> dict[tuple[str, str], tuple[str, str]]:
    """Every (importer, imported) pair going up a layer, with the layers' names."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        own = layer_of(module)
        if own is None:
            continue
        for target in _imports(path):
            theirs = layer_of(target)
            if theirs is not None and theirs > own:
                found[(module, target)] = (LAYERS[own][0], LAYERS[theirs][0])
    return found


def test_every_package_has_a_layer() -> None:
    tops = {
        p.stem if p.is_file() else p.name
        for p in ROOT.iterdir()
        if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    }
    tops.discard("__init__")
    assert {t for t in tops if layer_of(t) is None} == set()


def test_no_upward_import_but_the_listed_exceptions() -> None:
    found = upward_imports()
    unlisted = {pair: layers for pair, layers in found.items() if pair not in EXCEPTIONS}
    assert unlisted == {}, "imports of a higher layer (move the code, or list the exception with its reason)"


def test_every_exception_still_exists() -> None:
    assert set(EXCEPTIONS) - set(upward_imports()) == set()


MAX_LINES = 450


def test_no_core_module_is_over_450_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}, long
