"""docs/models.md's recipes by machine are what ``scripts/recipes`` computes
from Missive's own arithmetic (header-only GGUFs read by Missive's reader,
the llamacpp driver's placement, budget and fit; the MLX driver's fit): the
generated part of the doc fails here until it is regenerated
(``.venv/bin/python scripts/recipes --write-docs``).

Cheap: no model is loaded and no weight written (sparse files of the
models' sizes, removed at once); the llamacpp and MLX modules are imported
for their pure functions only.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("recipes_script", str(ROOT / "scripts" / "recipes"))
    spec = importlib.util.spec_from_loader("recipes_script", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return _script()


@pytest.fixture(scope="module")
def found(script: ModuleType) -> list:
    return script.recipes()


def test_the_docs_recipes_are_the_scripts(script: ModuleType, found: list) -> None:
    text = script.DOC.read_text()
    assert script.BEGIN in text and script.END in text, "docs/models.md lost the recipes' markers"
    generated = text[text.index(script.BEGIN) : text.index(script.END) + len(script.END)]
    assert generated == script.markdown(found), (
        "docs/models.md's recipes by machine are out of date: run "
        "`.venv/bin/python scripts/recipes --write-docs`"
    )


def test_the_header_only_ggufs_weigh_what_the_published_files_do(found: list) -> None:
    """The quantization rules give the published files' sizes (GB, from the
    model pages): a check that the shapes and types are the real ones."""
    sizes = {m.name: file_bytes / 1e9 for m, file_bytes, _ in found}
    assert sizes["Qwen3-Coder-30B-A3B-Instruct"] == pytest.approx(18.6, abs=0.1)
    assert sizes["gpt-oss-20b"] == pytest.approx(12.1, abs=0.1)
    assert sizes["Qwen3 8B"] == pytest.approx(5.0, abs=0.1)


def test_every_recipe_fits_by_missives_arithmetic(found: list) -> None:
    """Each recipe's window is at least Claude Code's 32k (the trained context
    when shorter), its KV cache within the budget its line names, and an
    expert offload only for mixtures of experts."""
    for m, _, rows in found:
        for r in rows:
            if not r.window:
                assert r.note.startswith("does not fit")
                continue
            assert r.window >= min(m.trained, 32768), (m.name, r.machine.name)
            assert "over the free memory" not in r.arithmetic
            if any("cpu_moe" in s for s in r.settings):
                assert m.experts, m.name
