"""The MLX driver, on SmolLM2-135M converted from its GGUF, passes the shared driver contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from missive.testing import DriverContract, live_server


@pytest.fixture(scope="module")
def contract_url(mlx_model_dir: Path) -> Iterator[str]:
    config = {
        "models": {
            "smollm2-mlx": {
                "driver": "mlx",
                "context_window": 2048,
                "settings": {"model_path": str(mlx_model_dir)},
            }
        }
    }
    with live_server(config) as url:
        yield url


class TestMlxContract(DriverContract):
    model = "smollm2-mlx"
