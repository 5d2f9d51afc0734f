"""A plugin's tests get the same isolation as ``tests/`` (the root conftest.py):
in-process models write their state (trial records, the prompt cache's disk
tier) to the test run's folders, and each test gets a prompt-cache folder of
its own, so no test restores a state an earlier test saved (an in-process
driver's first answer once read 36 tokens from another test's file)."""

from __future__ import annotations

import os
from pathlib import Path

from missive.testing import tests_state_home as run_state_home  # not collected as a test

FOLDERS: list[str] = []


def _check_this_test() -> None:
    folder = os.environ["MISSIVE_PROMPT_CACHE_DIR"]
    assert Path(folder).parent == run_state_home()
    assert os.environ["XDG_STATE_HOME"] == str(run_state_home())
    assert folder not in FOLDERS
    FOLDERS.append(folder)


def test_a_prompt_cache_folder_of_its_own() -> None:
    _check_this_test()


def test_another_prompt_cache_folder_of_its_own() -> None:
    _check_this_test()
