"""The example third-party drivers under examples/ are complete distributions
that CI installs as a user would and whose own tests it runs: each depends on
the core by its distribution name, publishes its plugin in the ``missive``
entry point group, has a README and tests; ``scripts/setup --test`` installs
it with ``pip install ./examples/NAME`` (not editable) and pytest's
``testpaths`` holds its tests. docs/drivers.md points to it."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parent.parent
ROOT_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/pyproject.toml"))


def project(folder: Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def test_there_is_an_example_driver() -> None:
    assert "missive-markov" in {p.name for p in EXAMPLES}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_is_a_distribution_of_its_own(example: Path) -> None:
    meta = project(example)["project"]
    assert meta["name"] == example.name
    core = [
        Requirement(r) for r in meta["dependencies"] if Requirement(r).name == ROOT_PROJECT["project"]["name"]
    ]
    assert len(core) == 1, f"{example.name} must depend on {ROOT_PROJECT['project']['name']}"
    assert core[0].specifier.contains(ROOT_PROJECT["project"]["version"])
    plugin = meta["entry-points"]["missive"][example.name]
    assert (example / (plugin.replace(".", "/") + ".py")).is_file()
    assert (example / "README.md").is_file() and meta["readme"] == "README.md"
    assert list((example / "tests").glob("test_*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_ci_installs_it_as_a_user_would_and_runs_its_tests(example: Path) -> None:
    setup = (ROOT / "scripts" / "setup").read_text()
    test_part = setup.split('if [ "$with_test" = 1 ]', 1)[1]
    assert re.search(rf"pip install (--quiet )?\./examples/{re.escape(example.name)}\b", test_part), (
        f"scripts/setup --test must pip install ./examples/{example.name}"
    )
    assert f"-e ./examples/{example.name}" not in setup and f'-e "./examples/{example.name}' not in setup
    assert f"examples/{example.name}/tests" in ROOT_PROJECT["tool"]["pytest"]["ini_options"]["testpaths"]


def test_drivers_md_points_to_the_tested_example_instead_of_untested_code() -> None:
    text = (ROOT / "docs" / "drivers.md").read_text()
    assert "../examples/missive-markov" in text
    assert "missive_upper" not in text and "missive-upper" not in text
