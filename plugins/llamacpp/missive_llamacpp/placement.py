"""Where a model's weights live: expert offload, tensor overrides, the GPU split.

llama.cpp's rules (``common/common.h``, ``common/arg.cpp``, ``src/llama-model-loader.cpp``;
llama-server's ``--cpu-moe``, ``--n-cpu-moe``, ``--override-tensor``):

* a tensor buffer override is a pattern and a buffer type; the model loader
  puts each tensor whose name the pattern finds (``std::regex_search``) into
  that buffer type, the first matching override winning, and logs ``tensor
  blk.0.ffn_up_exps.weight (... MiB ...) buffer type overridden to CPU``;
* ``--override-tensor`` takes ``pattern=BUFFER_TYPE`` pairs separated by
  commas, the buffer types named as the devices' default buffer types
  (``CPU``, ``CUDA0``, ``Metal``...); another name is refused;
* ``--cpu-moe`` keeps the routed experts of every layer in host memory: the
  pattern ``\\.ffn_(up|down|gate|gate_up)_(ch|)exps`` (``LLM_FFN_EXPS_REGEX``)
  to the CPU buffer type; ``--n-cpu-moe N`` does it for the first N layers,
  one pattern ``blk\\.{i}`` + that per layer (``llm_ffn_exps_block_regex``).
  Attention and the shared parts stay where ``n_gpu_layers`` puts them, so
  a 30B-A3B model runs with its experts in RAM and the rest on a small GPU.

Missive takes the same settings (``override_tensor``, ``cpu_moe``,
``n_cpu_moe``), checks them against the GGUF's tensor names before loading
(read from the header by :func:`missive.api.read_tensors`: no weight is
read), so a pattern that finds no tensor, a buffer type no device has, or
expert offload on a model without experts is a start-up error naming the
setting, and says in the load line what went where and how many bytes the
overrides keep in host memory (:attr:`Placement.host_bytes`, counted against
RAM, not the GPU, by :mod:`missive_llamacpp.memory`). User patterns come
first, then the expert ones: the first match wins, as in llama-server, where
``-ot`` is usually given before ``--n-cpu-moe``.

Patterns are checked with Python's ``re`` (the same syntax as C++'s
ECMAScript regex for what these patterns use: classes, groups,
alternatives, escapes).
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from missive.api import ConfigError, GGUFError, read_tensors

__all__ = [
    "EXPERTS",
    "SPLIT_MODES",
    "Device",
    "GpuLayout",
    "Placement",
    "expert_block",
    "devices",
    "ggml",
    "gpu_layout",
    "plan",
    "tensor_sizes",
]

#: The routed experts' tensors (llama.cpp ``common/common.h`` ``LLM_FFN_EXPS_REGEX``).
EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"

GIB = 2**30


def expert_block(layer: int) -> str:
    """The experts of one layer (``llm_ffn_exps_block_regex``)."""
    return rf"blk\.{layer}{EXPERTS}"


@dataclass(frozen=True)
class Device:
    """A device llama.cpp sees (``ggml_backend_dev_*``).

    Attributes:
        name: the device's name (``CPU``, ``CUDA0``).
        gpu: whether it is a GPU (``GGML_BACKEND_DEVICE_TYPE_GPU``).
        buffer_type: its default buffer type's name, what an override names.
        handle: that buffer type (``ggml_backend_buffer_type_t``).
    """

    name: str
    gpu: bool
    buffer_type: str
    handle: int


@cache
def ggml() -> Any:
    """llama-cpp-python's ``libggml`` with the signatures of the device
    functions used here and by :func:`missive_llamacpp.memory.vram`
    (``ggml-backend.h``), declared once."""
    from llama_cpp import _ggml

    lib = _ggml.libggml
    pointer = [ctypes.c_void_p]
    for name, restype, argtypes in (
        ("ggml_backend_dev_count", ctypes.c_size_t, []),
        ("ggml_backend_dev_get", ctypes.c_void_p, [ctypes.c_size_t]),
        ("ggml_backend_dev_name", ctypes.c_char_p, pointer),
        ("ggml_backend_dev_type", ctypes.c_int, pointer),
        ("ggml_backend_dev_buffer_type", ctypes.c_void_p, pointer),
        ("ggml_backend_buft_name", ctypes.c_char_p, pointer),
        (
            "ggml_backend_dev_memory",
            None,
            [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)],
        ),
    ):
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


def devices() -> list[Device]:
    """The devices of this llama.cpp build, in its order."""
    lib = ggml()
    found = []
    for i in range(int(lib.ggml_backend_dev_count())):
        dev = lib.ggml_backend_dev_get(i)
        buft = lib.ggml_backend_dev_buffer_type(dev)
        if not buft:
            continue
        found.append(
            Device(
                name=lib.ggml_backend_dev_name(dev).decode(),
                gpu=lib.ggml_backend_dev_type(dev) == 1,  # GGML_BACKEND_DEVICE_TYPE_GPU (ggml-backend.h)
                buffer_type=lib.ggml_backend_buft_name(buft).decode(),
                handle=int(buft),
            )
        )
    return found


def tensor_sizes(path: Path) -> dict[str, int]:
    """Each tensor's name and size in bytes, from the GGUF header
    (:func:`missive.api.read_tensors`: the key/value section is skipped, no
    weight is read)."""
    try:
        return read_tensors(path)
    except (GGUFError, OSError) as exc:
        raise ConfigError(f"{path} cannot be read as GGUF: {exc}") from exc


class _Override(ctypes.Structure):
    """``struct llama_model_tensor_buft_override`` (``include/llama.h``)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@dataclass
class Placement:
    """The overrides of one model, checked (see the module doc).

    Attributes:
        rules: ``(pattern, buffer type, setting)`` in the order llama.cpp
            tries them.
        placed: buffer type -> names of the tensors the rules put there
            (each tensor under the first rule finding it).
        sizes: each tensor's bytes.
    """

    rules: list[tuple[str, str, str]] = field(default_factory=list)
    placed: dict[str, list[str]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    _keep: Any = None

    @property
    def host_bytes(self) -> int:
        """Bytes the overrides put in host memory (the CPU buffer type)."""
        return sum(self.sizes[name] for name in self.placed.get("CPU", []))

    def describe(self) -> str:
        """The load line's part: ``placement: 12 tensors (1.50 GiB) to CPU
        (n_cpu_moe=4)``, or ``placement: as n_gpu_layers puts it``."""
        if not self.rules:
            return "placement: as n_gpu_layers puts it"
        parts = []
        for buffer_type, names in self.placed.items():
            total = sum(self.sizes[name] for name in names)
            parts.append(f"{len(names)} tensors ({total / GIB:.2f} GiB) to {buffer_type}")
        settings = ", ".join(dict.fromkeys(setting for _, _, setting in self.rules))
        return f"placement: {'; '.join(parts)} ({settings})"

    def overrides(self, known: list[Device]) -> int:
        """The ``tensor_buft_overrides`` pointer for ``llama_model_params``
        (0: none); the array stays alive with this object."""
        if not self.rules:
            return 0
        handles = {device.buffer_type: device.handle for device in known}
        array = (_Override * (len(self.rules) + 1))()
        for i, (pattern, buffer_type, _) in enumerate(self.rules):
            array[i].pattern = pattern.encode()
            array[i].buft = handles[buffer_type]
        array[len(self.rules)].pattern = None  # the terminator llama.cpp stops at
        array[len(self.rules)].buft = None
        self._keep = array
        return ctypes.addressof(array)


def plan(
    *,
    override_tensor: list[str],
    cpu_moe: bool,
    n_cpu_moe: int,
    sizes: dict[str, int],
    known: list[Device],
    model: str,
) -> Placement:
    """Check the settings against the model's tensors and the devices.

    Raises:
        ConfigError: naming the setting: a malformed ``pattern=TYPE`` pair, a
            pattern that finds no tensor, a buffer type no device has,
            expert offload for a model without routed experts.
    """
    placement = Placement(sizes=dict(sizes))
    types = [device.buffer_type for device in known]
    for entry in override_tensor:
        pattern, sep, buffer_type = entry.rpartition("=")
        if not sep or not pattern or not buffer_type:
            raise ConfigError(
                f"model '{model}': settings.override_tensor '{entry}' is not PATTERN=BUFFER_TYPE "
                r"(llama-server's -ot syntax: 'blk\.1[0-9]\.ffn_.*_exps=CPU')"
            )
        if buffer_type not in types:
            raise ConfigError(
                f"model '{model}': settings.override_tensor '{entry}' names the buffer type {buffer_type!r}, "
                f"which no device of this llama.cpp build has; it has: {', '.join(types)}"
            )
        _add(placement, pattern, buffer_type, "override_tensor", entry, model)
    if cpu_moe or n_cpu_moe:
        if not any(re.search(EXPERTS, name) for name in sizes):
            setting = "cpu_moe" if cpu_moe else "n_cpu_moe"
            raise ConfigError(
                f"model '{model}': settings.{setting} keeps routed experts in host memory, but this model "
                "has none (no ffn_*_exps tensors: it is not a mixture of experts)"
            )
        if "CPU" not in types:  # pragma: no cover - every llama.cpp build has the CPU device
            raise ConfigError(f"model '{model}': this llama.cpp build has no CPU buffer type")
        if cpu_moe:
            _add(placement, EXPERTS, "CPU", "cpu_moe", EXPERTS, model)
        else:
            blocks = 1 + max(
                (int(m.group(1)) for n in sizes if (m := re.match(r"blk\.(\d+)\.", n))), default=-1
            )
            for layer in range(min(n_cpu_moe, blocks)):  # layers 0..N-1, as llama.cpp counts them
                _add(placement, expert_block(layer), "CPU", f"n_cpu_moe={n_cpu_moe}", None, model)
    return placement


def _add(
    placement: Placement, pattern: str, buffer_type: str, setting: str, entry: str | None, model: str
) -> None:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise ConfigError(
            f"model '{model}': settings.{setting} pattern '{pattern}' is not a regex: {exc}"
        ) from None
    matched = [name for name in placement.sizes if compiled.search(name)]
    if entry is not None and not matched:
        example = next((n for n in placement.sizes if n.startswith("blk.")), next(iter(placement.sizes), ""))
        raise ConfigError(
            f"model '{model}': settings.{setting} '{entry}' finds no tensor of this model (its names look "
            f"like {example!r})"
        )
    placement.rules.append((pattern, buffer_type, setting))
    taken = {name for names in placement.placed.values() for name in names}
    fresh = [name for name in matched if name not in taken]
    if fresh:
        placement.placed.setdefault(buffer_type, []).extend(fresh)


#: ``split_mode`` names -> llama.cpp's ``LLAMA_SPLIT_MODE_*`` (``include/llama.h``).
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2, "tensor": 3}


@dataclass(frozen=True)
class GpuLayout:
    """The GPU settings of one model, checked against the GPUs there are.

    Attributes:
        known: every device of the build.
        gpus: its GPUs' names.
        tensor_split: the shares given to llama.cpp (None: its default).
        split_mode: the split mode given to llama.cpp (``"layer"`` without a GPU).
    """

    known: list[Device]
    gpus: list[str]
    tensor_split: list[float] | None
    split_mode: str = "layer"

    def describe(self, settings: Any) -> str:
        """The load line's part: ``gpus: CUDA0, CUDA1, split_mode=layer,
        tensor_split=[3, 1]``, ``gpus: none``."""
        if not self.gpus:
            return "gpus: none"
        split = f", tensor_split={self.tensor_split}" if self.tensor_split else ""
        main = f", main_gpu={settings.main_gpu}" if settings.split_mode in ("none", "row") else ""
        kv = "" if settings.kv_offload else ", KV cache in host memory (kv_offload=false)"
        return f"gpus: {', '.join(self.gpus)}, split_mode={settings.split_mode}{main}{split}{kv}"


def gpu_layout(settings: Any, known: list[Device], model: str) -> GpuLayout:
    """Check ``main_gpu`` and ``tensor_split`` against the GPUs.

    Raises:
        ConfigError: ``main_gpu`` past the last GPU, more ``tensor_split``
            shares than GPUs.
    """
    gpus = [device.name for device in known if device.gpu]
    if not gpus:
        # llama.cpp refuses some split modes without GPUs ("tensor": the load fails with no reason).
        ignored = [
            name
            for name, unset in (
                ("main_gpu", settings.main_gpu == 0),
                ("tensor_split", settings.tensor_split is None),
                ("split_mode", settings.split_mode == "layer"),
            )
            if not unset
        ]
        if ignored:
            import logging

            logging.getLogger("missive.llamacpp").warning(
                "model %s: %s ignored: this llama.cpp build sees no GPU", model, " and ".join(ignored)
            )
        return GpuLayout(known, [], None, "layer")
    if settings.main_gpu >= len(gpus):
        raise ConfigError(
            f"model '{model}': settings.main_gpu = {settings.main_gpu}, but llama.cpp sees {len(gpus)} "
            f"GPU(s): {', '.join(f'{i}: {name}' for i, name in enumerate(gpus))}"
        )
    split = settings.tensor_split
    if split is not None and len(split) > len(gpus):
        raise ConfigError(
            f"model '{model}': settings.tensor_split has {len(split)} shares for {len(gpus)} GPU(s) "
            f"({', '.join(gpus)}): give one share per GPU"
        )
    return GpuLayout(known, gpus, split, settings.split_mode)
