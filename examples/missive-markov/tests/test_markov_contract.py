"""The markov driver passes Missive's shared driver contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from missive.testing import DriverContract, live_server


@pytest.fixture(scope="module")
def contract_url(backend: str) -> Iterator[str]:
    with live_server({"models": {"markov": {"driver": "markov", "settings": {"base_url": backend}}}}) as url:
        yield url


class TestMarkovContract(DriverContract):
    model = "markov"
