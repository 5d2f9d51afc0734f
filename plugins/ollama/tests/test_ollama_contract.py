"""The Ollama driver, against the fake Ollama server, passes the shared driver contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from missive.testing import DriverContract, live_server
from missive_ollama.testing import FakeModel, FakeOllama


@pytest.fixture(scope="module")
def contract_url() -> Iterator[str]:
    with FakeOllama({"qwen3:8b": FakeModel(capabilities=["completion", "tools", "thinking"])}) as fake:
        config = {
            "models": {
                "qwen": {
                    "driver": "ollama",
                    "context_window": 2048,
                    "settings": {"model": "qwen3:8b", "base_url": fake.url},
                }
            }
        }
        with live_server(config) as url:
            yield url


class TestOllamaContract(DriverContract):
    model = "qwen"
    prompt = "red orange yellow green blue"
    exact_count_tokens = False  # Ollama has no tokenize endpoint: count_tokens is an estimate
