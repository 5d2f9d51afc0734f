"""For every test of the repository (``tests/`` and each plugin's):

* the test tiers (docs/contributing.md): each collected test gets exactly
  one of the markers ``unit``, ``api``, ``live``, ``model``, ``packaging``
  (the rules: :mod:`tests.tiers`), so ``./scripts/test --fast`` can select
  ``unit or api``;
* no developer setting reaches a test, and in-process state (the llama.cpp
  trial records, the thinking key, the prompt cache's disk tier) goes to the
  test run's folders, never the user's ``~/.local/state/missive``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.tiers import tier_of

from missive.testing import tests_state_home


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test gets its one tier marker (before ``-m`` selects on it)."""
    for item in items:
        tier = tier_of(item)
        if not any(m.name == tier for m in item.iter_markers()):
            item.add_marker(getattr(pytest.mark, tier))
        item.user_properties.append(("tier", tier))
    report = os.environ.get("MISSIVE_TEST_TIERS_REPORT")  # a file: one "node id<TAB>tier" line per test
    if report:
        tiers = [next(value for name, value in item.user_properties if name == "tier") for item in items]
        Path(report).write_text(
            "".join(f"{item.nodeid}\t{tier}\n" for item, tier in zip(items, tiers, strict=True))
        )


#: The test suite's own switches (``MISSIVE_TEST_SHOW_LOGS``,
#: ``MISSIVE_TEST_NODE_CACHE``, ``MISSIVE_FUZZ_EXAMPLES``) and the dev
#: scripts' ``MISSIVE_VENV``: kept, they do not configure Missive.
SUITE_VARIABLES = ("MISSIVE_TEST_", "MISSIVE_FUZZ_", "MISSIVE_VENV")


def _developer_settings() -> list[str]:
    """The ``MISSIVE*`` variables of this process that configure Missive."""
    return [
        name for name in os.environ if name.startswith("MISSIVE") and not name.startswith(SUITE_VARIABLES)
    ]


@pytest.fixture(scope="session", autouse=True)
def _no_developer_settings_in_session() -> Iterator[None]:
    """The developer's own Missive settings (``MISSIVE_API_KEY``,
    ``MISSIVE_CONFIG``, ``MISSIVE_STATE_DIR``, ``MISSIVE__SERVER__...``,
    ``MISSIVE_PLUGINS``) reach no in-process code, session and module
    fixtures included (servers started by :func:`missive.testing.serve_process`
    never see them anyway), and in-process state (a thinking key, llama.cpp
    trial records) goes to the test run's state folder, like those servers',
    not to the user's ``~/.local/state/missive``."""
    with pytest.MonkeyPatch.context() as patch:
        for name in _developer_settings():
            patch.delenv(name)
        patch.setenv("XDG_STATE_HOME", str(tests_state_home()))
        # In-process models' prompt-cache disk tier: per test (below); a
        # module's or the session's model, started before, shares this one.
        patch.setenv(
            "MISSIVE_PROMPT_CACHE_DIR", tempfile.mkdtemp(prefix="prompt-cache-", dir=tests_state_home())
        )
        yield


@pytest.fixture(autouse=True)
def _no_developer_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for each test: nothing a previous test left in
    ``os.environ`` outside ``monkeypatch`` reaches the next one."""
    for name in _developer_settings():
        monkeypatch.delenv(name)
    # A model a test starts in-process finds no state an earlier test saved.
    monkeypatch.setenv(
        "MISSIVE_PROMPT_CACHE_DIR", tempfile.mkdtemp(prefix="prompt-cache-", dir=tests_state_home())
    )
