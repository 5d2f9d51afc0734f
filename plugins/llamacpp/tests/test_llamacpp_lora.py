"""LoRA adapters on a served model (issue 43): ``settings.lora``.

A tiny random-weight Llama and a random LoRA adapter for its output layer,
both written by the test kit (:func:`missive_llamacpp.testing_gguf.write_tiny_lora`,
the format ``llama_adapter_lora_init`` reads). One live ``missive serve``
serves the model three times: without an adapter, with it at scale 0, and
at scale 1. Greedy answers through the SDK: scale 0 answers as the plain
model (the adapter is applied, and adds nothing), scale 1 otherwise (the
adapter decides). An adapter llama.cpp refuses (another architecture's) or
a missing file is a start-up error naming ``settings.lora`` and llama.cpp's
reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tiny_served import entry, greedy, lora_files

from missive.config import ConfigError
from missive.testing import ServerProcess, in_process_app, serve_process

pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return lora_files(tmp_path_factory.mktemp("lora"))


@pytest.fixture(scope="module")
def server(files: dict[str, Path]) -> Iterator[ServerProcess]:
    adapter = str(files["adapter"])
    config = {
        "models": {
            "plain": entry(files["base"]),
            "lora0": entry(files["base"], lora=[{"path": adapter, "scale": 0.0}]),
            "lora1": entry(files["base"], lora=adapter),
        }
    }
    with serve_process(config, timeout=300) as server:
        yield server


def test_the_adapter_changes_greedy_output_by_its_scale(server: ServerProcess) -> None:
    plain, zero, one = (greedy(server, model) for model in ("plain", "lora0", "lora1"))
    assert plain and zero == plain
    assert one != plain
    log = server.log()
    line = next(x for x in log.splitlines() if "model lora1 loaded from" in x)
    assert "lora: style.gguf x1," in line, line
    assert "lora: style.gguf x0," in next(x for x in log.splitlines() if "model lora0 loaded from" in x)
    assert "lora: none" in next(x for x in log.splitlines() if "model plain loaded from" in x)


def test_an_adapter_llama_cpp_refuses_stops_start_up(files: dict[str, Path]) -> None:
    config = {"models": {"m": entry(files["base"], lora=str(files["foreign"]))}}
    with pytest.raises(
        ConfigError, match=r"settings.lora.0: llama.cpp refused the adapter .*qwen3-style.gguf: .*"
    ):
        with in_process_app(config):
            pass
    missing = {"models": {"m": entry(files["base"], lora=str(files["base"].with_name("absent.gguf")))}}
    with pytest.raises(ConfigError, match=r"settings.lora.0: adapter file not found: .*absent.gguf"):
        with in_process_app(missing):
            pass
