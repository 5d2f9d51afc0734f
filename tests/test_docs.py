"""docs/hooks.md documents every hookspec with its exact signature, and nothing else."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from missive.kernel import hookspecs

DOC = Path(__file__).parent.parent / "docs" / "hooks.md"


def spec_signatures() -> dict[str, str]:
    found = {}
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if hasattr(func, "missive_spec"):
            sig = inspect.signature(func)
            params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
            found[name] = f"{name}({params}) -> {sig.return_annotation}"
    return found


def documented() -> dict[str, str]:
    text = DOC.read_text()
    section = text.split("## Hooks", 1)[1]
    found = {}
    for match in re.finditer(r"^### (\w+)\n\n    (.+)$", section, re.MULTILINE):
        found[match.group(1)] = match.group(2).strip()
    return found


def test_every_hook_is_documented_with_its_signature() -> None:
    specs = spec_signatures()
    assert len(specs) >= 8
    assert documented() == specs


def test_firstresult_hooks_say_so() -> None:
    section = DOC.read_text().split("## Hooks", 1)[1]
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        opts = getattr(func, "missive_spec", None)
        if opts and opts.get("firstresult"):
            body = section.split(f"### {name}\n", 1)[1].split("### ", 1)[0]
            assert "firstresult" in body, name


def test_llamacpp_settings_table_lists_every_setting() -> None:
    """docs/drivers.md's llamacpp settings table names each field of
    LlamaCppSettings and the settings of an entry sharing another's load
    (``base``: missive_llamacpp.shared), and no field that does not exist."""
    from missive_llamacpp.settings import LlamaCppSettings
    from missive_llamacpp.shared import SHARED_SETTINGS

    text = (DOC.parent / "drivers.md").read_text()
    section = text.split("### `llamacpp` (`missive-llamacpp`)", 1)[1].split("\n### ", 1)[0]
    table = section.split("| Key | Default | Meaning |", 1)[1].split("\n\n", 1)[0]
    keys = set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    assert keys == set(LlamaCppSettings.model_fields) | set(SHARED_SETTINGS)


def _shipped_drivers() -> set[str]:
    """Driver names registered by the plugins under plugins/ (their plugin.py)."""
    names = set()
    for plugin in (DOC.parent.parent / "plugins").glob("*/missive_*/plugin.py"):
        names |= set(re.findall(r'DriverSpec\(\s*name="(\w+)"', plugin.read_text()))
    return names


def test_every_shipped_driver_is_documented() -> None:
    """configuration.md's `driver` key lists every shipped driver, drivers.md
    has a section for each, and the model table knows its pip extra."""
    from missive.models.table import BUILTIN_DRIVERS

    drivers = _shipped_drivers()
    assert len(drivers) >= 7
    config = (DOC.parent / "configuration.md").read_text()
    row = next(line for line in config.splitlines() if line.startswith("| `driver` |"))
    assert set(re.findall(r"`(\w+)`", row)) - {"driver"} == drivers
    sections = set(
        re.findall(r"^### `(\w+)` \(`missive-\w+`\)$", (DOC.parent / "drivers.md").read_text(), re.MULTILINE)
    )
    assert sections == drivers
    assert BUILTIN_DRIVERS == drivers


def test_every_subcommand_is_in_the_cli_synopsis() -> None:
    """configuration.md's command line synopsis shows every `missive`
    subcommand with every option it takes."""
    from missive.cli.main import cli

    text = (DOC.parent / "configuration.md").read_text()
    synopsis = text.split("## Command line", 1)[1].split("```", 2)[1]
    for name, command in cli.commands.items():
        assert f"missive {name} " in synopsis, name
        block = synopsis.split(f"missive {name} ", 1)[1].split("\nmissive ", 1)[0]
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--"):
                    assert opt in block, f"missive {name} {opt}"


def test_docs_point_only_to_what_the_repository_has() -> None:
    """No page cites the protocol contract's sections (it is not in the
    repository), and relative links to files resolve."""
    root = DOC.parent.parent
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        text = page.read_text()
        assert not re.search(r"contract's section \d", text), page
        text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.DOTALL))
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text):
            assert (page.parent / target).exists(), f"{page.name}: {target}"
