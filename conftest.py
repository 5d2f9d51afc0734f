"""The test tiers (docs/contributing.md): each collected test gets exactly
one of the markers ``unit``, ``api``, ``live``, ``model``, ``packaging``
(the rules: :mod:`tests.tiers`), so ``./scripts/test --fast`` can select
``unit or api``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.tiers import tier_of


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
        Path(report).write_text("".join(f"{item.nodeid}\t{tier}\n" for item, tier in zip(items, tiers)))
