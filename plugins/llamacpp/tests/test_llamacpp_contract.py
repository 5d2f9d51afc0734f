"""The llama.cpp driver, on the embedded default model, passes the shared driver contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from missive.testing import DriverContract, live_server


@pytest.fixture(scope="module")
def contract_url() -> Iterator[str]:
    with live_server(None) as url:
        yield url


class TestLlamaCppContract(DriverContract):
    model = "smollm2-135m"
