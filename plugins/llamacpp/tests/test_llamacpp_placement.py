"""Where the weights go: expert offload, tensor overrides and the GPU settings (issue 43).

A tiny random-weight Qwen3-MoE (``qwen3moe``: every block routed, the
Qwen3-Coder-30B-A3B layout) written by the test kit is served by a live
``missive serve`` with ``verbose`` on, so llama.cpp's own log is in the
server's output beside Missive's load line:

* ``n_cpu_moe = 1``: llama.cpp says the experts of layer 0, and only they,
  were put in the CPU buffer type; the load line says which tensors and how
  many bytes;
* ``override_tensor``: the same for the pattern's tensors (layer 1's);
* ``cpu_moe``, ``mmap = false``, ``mlock``, ``kv_offload = false`` load;
* every model answers a greedy request through the SDK the same as the
  model with none of them: placement moves weights, never changes results.

A setting that cannot apply is a start-up error naming it (a pattern that
finds no tensor, a buffer type no device has, expert offload on a dense
model, ``main_gpu`` past the GPUs), and bad values are refused when the
configuration is read. On this CPU-only build every buffer type is host
memory; the GPU check script runs the same settings on a GPU when a task is
lent one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tiny_served import TEMPLATE, entry, greedy

from missive.config import ConfigError
from missive.testing import ServerProcess, in_process_app, serve_process

pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from missive_llamacpp.testing_gguf import write_tiny_gguf

    folder = tmp_path_factory.mktemp("moe")
    return write_tiny_gguf(
        folder / "qwen3moe.gguf", arch="qwen3moe", chat_template=TEMPLATE, special_tokens=["<|end|>"]
    )


@pytest.fixture(scope="module")
def dense(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from missive_llamacpp.testing_gguf import write_tiny_gguf

    folder = tmp_path_factory.mktemp("dense")
    return write_tiny_gguf(
        folder / "llama.gguf", arch="llama", chat_template=TEMPLATE, special_tokens=["<|end|>"]
    )


@pytest.fixture(scope="module")
def server(moe: Path) -> Iterator[ServerProcess]:
    config = {
        "models": {
            "plain": entry(moe),
            "ncpumoe": entry(moe, n_cpu_moe=1, verbose=True),
            "override": entry(moe, override_tensor=r"blk\.1\.ffn_(up|down)_exps=CPU", verbose=True),
            "cpumoe": entry(moe, cpu_moe=True, mmap=False, mlock=True, kv_offload=False),
        }
    }
    with serve_process(config, timeout=300) as server:
        yield server


def load_line(log: str, model: str) -> str:
    return next(line for line in log.splitlines() if f"model {model} loaded from" in line)


def overridden(log: str) -> list[str]:
    """The tensors llama.cpp's loader put in another buffer type, as it logs them."""
    return re.findall(r"tensor (\S+) \([^)]*\) buffer type overridden to CPU", log)


def test_placement_moves_weights_and_not_results(server: ServerProcess) -> None:
    answers = {model: greedy(server, model) for model in ("plain", "ncpumoe", "override", "cpumoe")}
    assert len(set(answers.values())) == 1 and answers["plain"], answers
    log = server.log()
    # llama.cpp's own log: layer 0's three expert tensors (n_cpu_moe = 1), then
    # layer 1's up and down (the override); never layer 1's gate.
    assert overridden(log) == [
        "blk.0.ffn_gate_exps.weight",
        "blk.0.ffn_down_exps.weight",
        "blk.0.ffn_up_exps.weight",
        "blk.1.ffn_down_exps.weight",
        "blk.1.ffn_up_exps.weight",
    ], log[-3000:]
    assert "placement: 3 tensors (" in load_line(log, "ncpumoe")
    assert "GiB) to CPU (n_cpu_moe=1)" in load_line(log, "ncpumoe")
    assert "placement: 2 tensors (" in load_line(log, "override")
    assert "placement: 6 tensors (" in load_line(log, "cpumoe") and "(cpu_moe)" in load_line(log, "cpumoe")
    assert "placement: as n_gpu_layers puts it" in load_line(log, "plain")
    assert "gpus: none" in load_line(log, "plain")
    assert "weights: mapped (mmap)," in load_line(log, "plain")
    assert "weights: read into memory (mmap=false), locked (mlock)" in load_line(log, "cpumoe")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"override_tensor": r"blk\.9\.ffn_up_exps=CPU"},
            r"settings.override_tensor 'blk\.9\.ffn_up_exps=CPU' finds no tensor of this model "
            "(its names look like 'blk.0.attn_norm.weight')",
        ),
        ({"override_tensor": "ffn_up_exps=CUDA7"}, "names the buffer type 'CUDA7', which no device"),
        ({"override_tensor": "ffn_(up=CPU"}, "pattern 'ffn_(up' is not a regex"),
    ],
)
def test_an_override_that_cannot_apply_stops_start_up(
    moe: Path, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        with in_process_app({"models": {"m": entry(moe, **settings)}}):
            pass


def test_expert_offload_on_a_dense_model_stops_start_up(dense: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"settings.n_cpu_moe keeps routed experts in host memory, but this model"
    ):
        with in_process_app({"models": {"m": entry(dense, n_cpu_moe=2)}}):
            pass


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cpu_moe": True, "n_cpu_moe": 4}, "settings: cpu_moe keeps every layer's experts in host memory"),
        # Values of another type are refused, not converted; numbers must be finite.
        ({"cpu_moe": "yes"}, "settings.cpu_moe: Input should be a valid boolean"),
        ({"n_cpu_moe": True}, "settings.n_cpu_moe: Input should be a valid integer"),
        ({"kv_offload": "no"}, "settings.kv_offload: Input should be a valid boolean"),
        ({"draft_p_min": "0.5"}, "settings.draft_p_min: Input should be a valid number"),
        (
            {"lora": [{"path": "a.gguf", "scale": float("nan")}]},
            "settings.lora.0.scale: Input should be a finite number",
        ),
        ({"tensor_split": [float("inf"), 1]}, "settings.tensor_split.0: Input should be a finite number"),
        ({"tensor_split": [0, 0]}, "settings.tensor_split: must be 1 to 16 shares"),
        ({"tensor_split": [1, -1]}, "settings.tensor_split: must be 1 to 16 shares"),
        ({"override_tensor": ["no-equals-sign"]}, "settings.override_tensor: must be PATTERN"),
        ({"split_mode": "rows"}, "settings.split_mode: Input should be 'none', 'layer', 'row' or 'tensor'"),
        ({"n_cpu_moe": -1}, "settings.n_cpu_moe: Input should be greater than or equal to 0"),
    ],
)
def test_bad_values_are_refused_when_read(settings: dict[str, Any], message: str) -> None:
    from missive_llamacpp.settings import parse_settings

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_settings("m", {"model_path": "x.gguf", **settings})


def test_a_comma_separated_override_is_llama_servers_syntax() -> None:
    from missive_llamacpp.settings import parse_settings

    parsed = parse_settings("m", {"model_path": "x", "override_tensor": r"blk\.0\.ffn_up_exps=CPU,exps=CPU"})
    assert parsed.override_tensor == [r"blk\.0\.ffn_up_exps=CPU", "exps=CPU"]


def test_gpu_settings_without_a_gpu_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    from missive_llamacpp.placement import Device, gpu_layout
    from missive_llamacpp.settings import parse_settings

    cpu = [Device("CPU", False, "CPU", 1)]
    settings = parse_settings(
        "m", {"model_path": "x", "tensor_split": [1, 1], "main_gpu": 1, "split_mode": "tensor"}
    )
    layout = gpu_layout(settings, cpu, "m")
    assert layout.describe(settings) == "gpus: none"
    # llama.cpp fails to load with "tensor" and no GPU, and gives no reason: not given to it.
    assert layout.split_mode == "layer"
    assert "main_gpu and tensor_split and split_mode ignored: this llama.cpp build sees no GPU" in caplog.text
    two = [*cpu, Device("CUDA0", True, "CUDA0", 2), Device("CUDA1", True, "CUDA1", 3)]
    assert (
        gpu_layout(settings, two, "m").describe(settings)
        == "gpus: CUDA0, CUDA1, split_mode=tensor, tensor_split=[1.0, 1.0]"
    )
    with pytest.raises(
        ConfigError, match=r"settings.main_gpu = 2, but llama.cpp sees 2 GPU\(s\): 0: CUDA0, 1: CUDA1"
    ):
        gpu_layout(parse_settings("m", {"model_path": "x", "main_gpu": 2, "split_mode": "none"}), two, "m")
    with pytest.raises(ConfigError, match=r"settings.tensor_split has 3 shares for 2 GPU\(s\)"):
        gpu_layout(parse_settings("m", {"model_path": "x", "tensor_split": [1, 1, 1]}), two, "m")
