"""Every test has exactly one tier (docs/contributing.md), read by
``tests/tiers.py`` for the root conftest.py; ``--fast`` selects unit and api only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiers import TIERS, tier_of_source

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize(
    ("source", "tier"),
    [
        ("def test_x():\n    assert parse('a') == 1", "unit"),
        ("with in_process_app(CONFIG) as app:", "api"),
        ("client = app.test_client()", "api"),
        ("def test_x(echo_url): ...", "live"),
        ("with live_server({'models': {'echo': {'driver': 'echo'}}}) as url:", "live"),
        ("with live_server(None) as url:", "model"),
        ("{'models': {'m': {'driver': 'llamacpp'}}}\nwith serve_process(CONFIG) as proc:", "model"),
        ("python = layered_venv(tmp_path / 'venv')\nwith live_server(None) as url:", "packaging"),
    ],
)
def test_the_most_expensive_thing_reached_decides(source: str, tier: str) -> None:
    assert tier_of_source(source) == tier


def test_each_collected_test_has_exactly_one_tier(tmp_path: Path) -> None:
    """Collect some files of every tier and check each test is named once,
    with one of the tiers (the root conftest stops a run where a test has
    two)."""
    report = tmp_path / "tiers.tsv"
    files = [
        "tests/test_sse.py",
        "tests/test_tools.py",
        "tests/test_thinking.py",
        "tests/test_default_model.py",
        "tests/test_packaging.py",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MISSIVE_TEST_TIERS_REPORT": str(report)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line.split("\t") for line in report.read_text().splitlines()]
    collected = [line for line in run.stdout.splitlines() if "::" in line]
    assert sorted(node for node, _ in rows) == sorted(collected)
    assert {tier for _, tier in rows} <= set(TIERS)
    by_file = {(node.split("::")[0], tier) for node, tier in rows}
    assert ("tests/test_sse.py", "unit") in by_file and ("tests/test_tools.py", "api") in by_file
    assert ("tests/test_default_model.py", "model") in by_file


def test_a_test_with_two_tiers_stops_the_run(tmp_path: Path) -> None:
    case = tmp_path / "test_two_tiers.py"
    case.write_text("import pytest\n\n@pytest.mark.unit\n@pytest.mark.live\ndef test_both():\n    pass\n")
    run = subprocess.run(  # the root conftest loaded as a plugin, on a file outside the suite
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "conftest",
            str(case),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    assert run.returncode != 0
    assert "several tier markers" in run.stdout + run.stderr
