"""Every driver distribution under plugins/ is wired in the same way: its own
pyproject (name, version, entry point, package), a root extra naming it, a uv
workspace source, the editable install in scripts/setup (with its test extra
when it has one), the README's install line, and ruff's source roots; and the
``extra`` its DriverSpecs name exists."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parent.parent
PLUGINS = sorted(p.parent for p in (ROOT / "plugins").glob("*/pyproject.toml"))


#: The root extra scripts/setup and the README install for a plugin, where it
#: is not the plugin's own name (``default`` = llamacpp with the embedded model).
INSTALLED_AS = {"llamacpp": "default"}


def load(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


ROOT_PROJECT = load(ROOT / "pyproject.toml")

#: The core distribution's name. ``missive`` on PyPI is an unrelated project,
#: so the core is published as ``missive-server`` (the import package and
#: the command stay ``missive``).
CORE = "missive-server"


def test_the_core_distribution_is_missive_server() -> None:
    assert ROOT_PROJECT["project"]["name"] == CORE
    assert ROOT_PROJECT["project"]["scripts"] == {"missive": "missive.cli.main:main"}


def test_the_code_knows_its_version() -> None:
    """``missive --version`` and ``GET /v1/status`` report ``missive.__version__``
    (the running code's, installed or not): it is the distribution's."""
    import missive

    assert missive.__version__ == ROOT_PROJECT["project"]["version"]
    out = subprocess.run(
        [sys.executable, "-m", "missive", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"missive, version {missive.__version__}"


#: A requirement on the unrelated PyPI project ``missive``: an extra
#: (``missive[default]``) or a version (``missive==0.1.0``, ``missive>=0.1``)
#: after a character that cannot end another name.
WRONG_NAME = re.compile(r"(?<![-\w./])missive(?:\[[a-z][a-z,-]*\]|\s*(?:==|>=|<=|~=|!=|<|>)\s*\d)")


TEXT_SUFFIXES = {".md", ".py", ".toml", ".txt", ".cfg", ".yaml", ".yml", ".sh", ".json"}


def _text_files() -> list[Path]:
    """The repository's tracked text files (docs, code, pyprojects, scripts,
    Dockerfiles), this test file aside: it spells the wrong name on purpose."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = []
    for name in out.splitlines():
        path = ROOT / name
        if path == Path(__file__) or not path.is_file():
            continue
        script = path.suffix == "" and name.startswith("scripts/")
        if path.suffix in TEXT_SUFFIXES or script or path.name.startswith("Dockerfile"):
            files.append(path)
    return files


def test_nothing_names_the_unrelated_missive_distribution() -> None:
    """No install line, pin, template or error hint asks pip for
    ``missive[...]`` or ``missive==...``: pip would fetch the unrelated
    ``missive`` project from PyPI."""
    files = _text_files()
    assert any(p.name == "README.md" for p in files) and any(p.name == "setup" for p in files)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if WRONG_NAME.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_wrong_name_pattern_catches_what_it_should() -> None:
    for bad in (
        "pip install 'missive[default]'",
        'pip install "missive[vllm,office]"',
        "missive==0.1.0",
        "dependencies = [\"missive>=0.1,<0.2\"]",
        "pip install missive[llamacpp]",
    ):
        assert WRONG_NAME.search(bad), bad
    for good in (
        "pip install 'missive-server[default]'",
        "missive-server==0.1.0",
        "missive-llamacpp==0.1.0",
        'app.extensions["missive"]',
        "missive['bytes']",
        "/etc/missive/missive.toml",
        "-e ./plugins/missive",
    ):
        assert not WRONG_NAME.search(good), good


def test_every_plugin_folder_is_found() -> None:
    names = {p.name for p in PLUGINS}
    assert {"llamacpp", "echo", "ollama", "mlx", "openai", "vllm", "llamaserver"} <= names


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_distribution(plugin: Path) -> None:
    project = load(plugin / "pyproject.toml")
    name = plugin.name
    meta = project["project"]
    assert meta["name"] == f"missive-{name}"
    assert meta["version"] == ROOT_PROJECT["project"]["version"]
    assert f"{CORE}=={ROOT_PROJECT['project']['version']}" in meta["dependencies"]
    package = "missive_" + name.replace("-", "_")  # plugins/openai-api ships missive_openai_api
    assert meta["entry-points"]["missive"] == {f"missive-{name}": f"{package}.plugin"}
    assert project["tool"]["setuptools"]["packages"] == [package]
    assert (plugin / package / "plugin.py").is_file()


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_root_extra_and_uv_source(plugin: Path) -> None:
    name, version = plugin.name, ROOT_PROJECT["project"]["version"]
    extras = ROOT_PROJECT["project"]["optional-dependencies"]
    assert extras.get(name) == [f"missive-{name}=={version}"]
    assert ROOT_PROJECT["tool"]["uv"]["sources"].get(f"missive-{name}") == {"workspace": True}
    assert f"plugins/{name}" in ROOT_PROJECT["tool"]["ruff"]["src"]


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_setup_and_readme_install_it(plugin: Path) -> None:
    name = plugin.name
    setup = (ROOT / "scripts" / "setup").read_text()
    installs = re.findall(r'-e "\./plugins/([a-z-]+)(?:\[([a-z,-]+)\])?"', setup)
    extras_of = {n: set(e.split(",")) if e else set() for n, e in installs}
    assert name in extras_of, f"scripts/setup does not install plugins/{name}"
    if "test" in load(plugin / "pyproject.toml")["project"].get("optional-dependencies", {}):
        assert "test" in extras_of[name], (
            f"scripts/setup must install plugins/{name}[test] (CI runs its tests)"
        )
    extra = INSTALLED_AS.get(name, name)
    root_extras = re.search(r'-e "\.\[([a-z,-]+)\]"', setup)
    assert root_extras is not None and extra in root_extras.group(1).split(",")
    readme = (ROOT / "README.md").read_text()
    readme_extras = re.search(r'pip install -e "\.\[([a-z,-]+)\]"', readme)
    assert readme_extras is not None and extra in readme_extras.group(1).split(",")
    assert f"./plugins/{name}" in readme


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_driver_specs_name_existing_extras(plugin: Path) -> None:
    module = importlib.import_module(f"missive_{plugin.name.replace('-', '_')}.plugin")
    register = getattr(module, "register_drivers", None)
    if register is None:
        pytest.skip("registers no driver")
    extras = ROOT_PROJECT["project"]["optional-dependencies"]
    for spec in register():
        assert spec.extra is None or spec.extra in extras, (spec.name, spec.extra)


APACHE_2 = "Apache License\n                           Version 2.0, January 2004"


@pytest.mark.parametrize("folder", [ROOT, *PLUGINS], ids=lambda p: p.name if p != ROOT else "core")
def test_license_file_matches_the_declared_license(folder: Path) -> None:
    """Each distribution declares Apache-2.0 (PEP 639) and ships the full
    text as its LICENSE, the same file everywhere."""
    meta = load(folder / "pyproject.toml")["project"]
    assert meta["license"] == "Apache-2.0"
    assert meta["license-files"] == ["LICENSE"]
    text = (folder / "LICENSE").read_text()
    assert APACHE_2 in text and "END OF TERMS AND CONDITIONS" in text
    assert text == (ROOT / "LICENSE").read_text()


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.name)
def test_plugin_readme_is_its_package_page(plugin: Path) -> None:
    """Each plugin distribution has its own README (its PyPI page): it names
    the distribution and the install line, and its configuration examples are
    valid: the driver is built from them (its settings validated)."""
    from missive.config import Config
    from missive.kernel.plugins import Kernel
    from missive.models.table import ModelTable

    assert load(plugin / "pyproject.toml")["project"]["readme"] == "README.md"
    text = (plugin / "README.md").read_text()
    assert text.startswith(f"# missive-{plugin.name}")
    assert f"pip install '{CORE}[{plugin.name}]'" in text
    blocks = re.findall(r"```toml\n(.*?)```", text, re.DOTALL)
    kernel = Kernel()
    drivers = [d for d in kernel.drivers.values() if str(d.factory).startswith(_package(plugin) + ".")]
    if not drivers:  # a front door (openai-api): nothing to configure, shown in use instead
        assert "```python" in text and not blocks, "a plugin without a driver shows a client, not a config"
        return
    assert blocks, "no configuration example"
    for block in blocks:
        config = Config.model_validate(tomllib.loads(block))
        table = ModelTable(config, kernel)
        assert {d.name for d in table.drivers.values()} == {plugin.name}


def _package(plugin: Path) -> str:
    """The import package a plugin distribution ships (``[tool.setuptools] packages``)."""
    return str(load(plugin / "pyproject.toml")["tool"]["setuptools"]["packages"][0])


def test_the_core_ships_py_typed() -> None:
    """PEP 561: ``py.typed`` is in the package and declared as package data
    (tests/test_wheelhouse.py checks it lands in the wheel)."""
    assert (ROOT / "core" / "missive" / "py.typed").is_file()
    assert ROOT_PROJECT["tool"]["setuptools"]["package-data"]["missive"] == ["py.typed"]
