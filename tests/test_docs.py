"""docs/hooks.md documents every hookspec with its exact signature, and nothing else."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from missive import hookspecs

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
    LlamaCppSettings, and no field that does not exist."""
    from missive_llamacpp.settings import LlamaCppSettings

    text = (DOC.parent / "drivers.md").read_text()
    section = text.split("### `llamacpp` (`missive-llamacpp`)", 1)[1].split("\n### ", 1)[0]
    table = section.split("| Key | Default | Meaning |", 1)[1].split("\n\n", 1)[0]
    keys = set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    assert keys == set(LlamaCppSettings.model_fields)
