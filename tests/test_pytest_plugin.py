"""The test kit as a pytest plugin (``pytest11`` entry point
``missive.pytest_plugin``): a project holding nothing but a test file, no
conftest, gets the contract's server from the test class's ``config`` (the
smallest test file of docs/drivers.md, run as it is written there), the
``missive_server`` factory and a header line naming the drivers found. Each
case runs pytest in a subprocess in an empty folder, as another project would."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def smallest_test_file() -> str:
    """The smallest working test file docs/drivers.md shows ("Testing a driver")."""
    section = (ROOT / "docs" / "drivers.md").read_text().split("## Testing a driver", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


FACTORY = '''
import os

import anthropic


def test_two_servers(missive_server):
    one = missive_server({"models": {"one": {"driver": "echo"}}})
    two = missive_server({"models": {"two": {"driver": "echo"}}})
    for server, model in ((one, "one"), (two, "two")):
        client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
        assert [m.id for m in client.models.list()] == [model]
    with open(os.environ["URLS_FILE"], "w") as urls:
        urls.write(one.url + "\\n" + two.url)
'''

NO_CONFIG = '''
from missive.testing import DriverContract


class TestNothing(DriverContract):
    model = "echo"
'''


def run_pytest(folder: Path, source: str, **env: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_it.py").write_text(source)
    import os

    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "test_it.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_the_documented_smallest_test_file_runs_the_contract(tmp_path: Path) -> None:
    source = smallest_test_file()
    assert "DriverContract" in source and "config = " in source
    result = run_pytest(tmp_path, source)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6 passed" in result.stdout, result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("missive "))
    assert "drivers " in header and "echo" in header.split("drivers ", 1)[1], header


def test_missive_server_factory_stops_its_servers(tmp_path: Path) -> None:
    urls_file = tmp_path / "urls.txt"
    result = run_pytest(tmp_path, FACTORY, URLS_FILE=str(urls_file))
    assert result.returncode == 0, result.stdout + result.stderr
    urls = urls_file.read_text().split()
    assert len(set(urls)) == 2
    for url in urls:  # stopped after the test
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{url}/health", timeout=2)


def test_a_contract_without_config_says_what_to_do(tmp_path: Path) -> None:
    result = run_pytest(tmp_path, NO_CONFIG)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "6 errors" in result.stdout, result.stdout
    assert "set `config` on the DriverContract subclass" in result.stdout
