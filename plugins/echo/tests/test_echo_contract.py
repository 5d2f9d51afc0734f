"""The echo driver passes the shared driver contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from missive.testing import DriverContract, live_server


class TestEchoContract(DriverContract):
    model = "echo"
    prompt = "red orange yellow green blue"

    @pytest.fixture(scope="class")
    def contract_url(self) -> Iterator[str]:
        with live_server({"models": {"echo": {"driver": "echo", "context_window": 200}}}) as url:
            yield url
