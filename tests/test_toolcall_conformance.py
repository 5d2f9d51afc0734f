"""Missive's tool and reasoning parsers against the public canitoolcall
corpus (469 recorded outputs of real open-weight models, each with the parse
a correct engine returns; issue 40).

Every fixture is replayed through the server's parsing pipeline with the
parsers a served model gets from its chat template (``detected``) and with
the best parser Missive has for its format (``best``), unstreamed and in
ten chunkings (:mod:`missive.testing.toolcall_conformance`); canitoolcall's
checks judge each parse: the expected content, reasoning and calls, streams
equal to the unstreamed parse, no format marker leaking into text, arguments
valid JSON against the tool's schema. The corpus's own pytest plugin
parametrizes the test by fixture id, so a failure names the fixture.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from canitoolcall.fixtures import Fixture

from missive.testing.toolcall_conformance import MODES
from missive.testing.toolcall_report import (
    BEGIN,
    CONFLICTS,
    END,
    NOT_CARRIED,
    load_corpus,
    replay_fixture,
    results_table,
)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "models.md"


@functools.cache
def _results(mode: str) -> dict[str, Any]:
    """Every fixture's case in ``mode``, by fixture id (replayed once a run)."""
    return {f.id: replay_fixture(f, fam, mode) for f, fam in load_corpus()}


def _describe(case: Any) -> str:
    rows = [r for r in case.checks if r.status.value != "pass"]
    return "\n".join(f"{r.check} [{r.strategy}] {r.status.value}: {r.detail}" for r in rows[:8])


@pytest.mark.parametrize("mode", MODES)
def test_fixture(canitoolcall_fixture: Fixture, mode: str) -> None:
    case = _results(mode)[canitoolcall_fixture.id]
    want = "soft_pass" if canitoolcall_fixture.id in CONFLICTS else "pass"
    assert case.status.value == want, f"{canitoolcall_fixture.id} ({mode}):\n{_describe(case)}"


def test_every_listed_fixture_exists() -> None:
    """The exceptions name fixtures of the installed corpus (an update of
    canitoolcall that renames one fails here, not silently)."""
    ids = {f.id for f, _ in load_corpus()}
    assert set(CONFLICTS) <= ids
    assert set(NOT_CARRIED) <= ids


def test_docs_table_is_current() -> None:
    """docs/models.md holds the table this run produces; regenerate it with
    ``python -m missive.testing.toolcall_report --write docs/models.md``."""
    table = results_table({mode: list(_results(mode).values()) for mode in MODES})
    text = DOCS.read_text("utf-8")
    assert BEGIN in text and END in text
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == table, "docs/models.md's conformance table is out of date"
