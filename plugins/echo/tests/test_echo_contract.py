"""The echo driver passes the shared driver contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from missive.testing import DriverContract, live_server


@pytest.fixture(scope="module")
def contract_url() -> Iterator[str]:
    with live_server({"models": {"echo": {"driver": "echo", "context_window": 200}}}) as url:
        yield url


class TestEchoContract(DriverContract):
    model = "echo"
    prompt = "red orange yellow green blue"
