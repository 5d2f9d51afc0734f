"""The declared plugin API: ``missive.api`` exports what plugins use, and a
plugin built for another plugin API version, or one that fails to import, is
listed with a clear line by ``missive plugins`` instead of crashing it
(missive.kernel.compat; docs/hooks.md, "Compatibility").

The fake plugins here are real distributions as pip would leave them: a
package and a ``.dist-info`` folder with an entry point in group ``missive``,
in a folder put on the path."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import missive.api
from missive import __version__
from missive.kernel.compat import API_VERSION, api_mismatch, declared_versions
from missive.kernel.plugins import Kernel

ROOT = Path(__file__).parent.parent


def test_api_exports_what_it_declares() -> None:
    assert missive.api.API_VERSION == API_VERSION == "1"
    for name in missive.api.__all__:
        assert hasattr(missive.api, name), name
    for name in (
        "hookimpl",
        "Driver",
        "GenerationRequest",
        "Capabilities",
        "DriverSpec",
        "DefaultModel",
        "Started",
        "TextDelta",
        "Finished",
        "MissiveError",
        "PromptTooLongError",
        "LocalDriver",
        "ReplicaPool",
        "ToolParser",
        "ReasoningParser",
    ):
        assert name in missive.api.__all__, name


def _core_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "missive" or node.module.startswith("missive."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "missive"]
    return found


def test_shipped_plugins_import_only_the_declared_api() -> None:
    """The distributions under plugins/ import ``missive.api`` (and the test
    kit, ``missive.testing``, in their test helpers), no other core module."""
    files = sorted(ROOT.glob("plugins/*/missive_*/**/*.py"))
    assert len(files) > 30
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in files
        for line, module in _core_imports(path)
        if module not in ("missive.api", "missive.testing")
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "plugin", sorted(ROOT.glob("plugins/*/missive_*/plugin.py")), ids=lambda p: p.parent.name
)
def test_shipped_plugins_declare_this_api(plugin: Path) -> None:
    module = __import__(f"{plugin.parent.name}.plugin", fromlist=["MISSIVE_API"])
    assert module.MISSIVE_API == API_VERSION


def test_declared_versions() -> None:
    class Plugin:
        pass

    assert declared_versions(Plugin) == ("1",)  # undeclared: written against API 1
    Plugin.MISSIVE_API = "2"  # type: ignore[attr-defined]
    assert declared_versions(Plugin) == ("2",)
    Plugin.MISSIVE_API = ("1", "2")  # type: ignore[attr-defined]
    assert declared_versions(Plugin) == ("1", "2")
    for bad in (1, (), ["1", 2]):
        Plugin.MISSIVE_API = bad  # type: ignore[attr-defined]
        with pytest.raises(TypeError, match="MISSIVE_API must be a string"):
            declared_versions(Plugin)


def test_mismatch_messages_say_which_side_to_upgrade() -> None:
    assert api_mismatch("missive-foo", "0.3", ("1",), "1") is None
    assert api_mismatch("missive-foo", "0.3", ("1", "2"), "2") is None
    newer = api_mismatch("missive-foo", "0.3", ("2",), "1")
    assert newer == (
        f"missive-foo 0.3 was built for plugin API 2; this Missive (missive-server {__version__}) "
        "provides 1; upgrade missive-server to a release providing plugin API 2"
    )
    older = api_mismatch("missive-foo", None, ("1",), "2")
    assert older is not None and older.startswith("missive-foo was built for plugin API 1;")
    assert older.endswith("upgrade missive-foo to a release built for plugin API 2")


# --- fake distributions on the path ------------------------------------------

DRIVER = '''
from missive.api import Capabilities, DriverSpec, hookimpl
{declaration}

@hookimpl
def register_drivers():
    spec = DriverSpec(name="{driver}", factory="missive_echo.driver:EchoDriver", capabilities=Capabilities())
    return [spec]
'''


def fake_distribution(site: Path, name: str, version: str, body: str) -> None:
    """A distribution ``name`` as installed: ``missive_<x>/__init__.py`` with
    ``body`` and its ``.dist-info`` naming it in the ``missive`` group."""
    package = name.replace("-", "_")
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(textwrap.dedent(body))
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[missive]\n{name} = {package}\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    fake_distribution(
        site, "missive-future", "0.3", DRIVER.format(declaration='MISSIVE_API = "2"', driver="future")
    )
    fake_distribution(
        site, "missive-current", "1.0", DRIVER.format(declaration='MISSIVE_API = "1"', driver="current")
    )
    fake_distribution(site, "missive-legacy", "0.1", DRIVER.format(declaration="", driver="legacy"))
    fake_distribution(site, "missive-stale", "0.2", "from missive.engine.gone import OldRunner\n")
    fake_distribution(site, "missive-crashes", "0.4", "raise RuntimeError('no backend library')\n")
    return site


def test_the_kernel_loads_only_plugins_built_for_this_api(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(site))
    kernel = Kernel()
    info = {p.name: p for p in kernel.plugins}
    assert info["missive-current"].error is None and info["missive-current"].api == ("1",)
    assert info["missive-legacy"].error is None and info["missive-legacy"].api == ("1",)
    assert {"current", "legacy", "echo"} <= set(kernel.drivers)
    assert "future" not in kernel.drivers
    assert info["missive-future"].error == api_mismatch("missive-future", "0.3", ("2",), API_VERSION)
    stale = info["missive-stale"].error or ""
    assert stale.startswith(
        "missive-stale 0.2 failed to import: ModuleNotFoundError: No module named 'missive.engine.gone'"
    )
    assert "it may have been built for another Missive" in stale
    crashes = info["missive-crashes"].error or ""
    assert crashes == "missive-crashes 0.4 failed to import: RuntimeError: no backend library"


def test_missive_plugins_shows_the_line(site: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "missive", "plugins", "--config", os.devnull]
    text = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=True).stdout
    assert (
        f"missive-future 0.3 (entry point): FAILED: missive-future 0.3 was built for plugin API 2; this "
        f"Missive (missive-server {__version__}) provides 1; upgrade missive-server"
    ) in text
    assert "missive-stale 0.2 (entry point): FAILED: missive-stale 0.2 failed to import" in text
    assert "\ndriver current:" in text and "\ndriver future:" not in text
    data = json.loads(
        subprocess.run(
            [*cmd, "--json"], capture_output=True, text=True, env=env, timeout=120, check=True
        ).stdout
    )
    plugins = {p["name"]: p for p in data["plugins"]}
    assert plugins["missive-current"]["api"] == ["1"] and plugins["missive-future"]["api"] == ["2"]
