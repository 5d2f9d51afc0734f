"""LoRA adapters applied to a model's context (llama-server's ``--lora`` / ``--lora-scaled``).

llama.cpp's rules (``src/llama-adapter.cpp``, ``include/llama.h``):

* ``llama_adapter_lora_init`` reads an adapter GGUF (``general.type =
  "adapter"``, ``adapter.type = "lora"``) against the loaded model and
  refuses one of another architecture ("model arch and LoRA arch
  mismatch"), with a tensor the model lacks ("does not exist in base
  model") or of another shape ("has incorrect shape");
* ``llama_set_adapters_lora`` sets the adapters and their scales on a
  context: every sequence decoded in it from then on goes through them
  (the effective scale is ``scale * alpha / rank`` when the adapter sets
  ``adapter.lora.alpha``); adapters are freed with the model.

Missive loads each adapter of ``settings.lora`` after the model, with
llama.cpp's log captured so a refusal is a start-up error naming the file and
llama.cpp's reason, and sets them on the context before anything is decoded.
The adapters are part of the prompt cache's key
(:meth:`missive_llamacpp.portable.PortableSlots.state_key`): a state
computed through other adapters is never restored. One set per model: a
request cannot choose its own (two requests decoded in one step share the
context's adapters, and their cached prefixes would not be interchangeable).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from missive.api import ConfigError

from .memory import LogCapture
from .settings import LlamaCppSettings

__all__ = ["Adapters", "load_adapters"]


@dataclass
class Adapters:
    """The adapters of one model, loaded.

    Attributes:
        names: each adapter's file name and scale, for the load line.
    """

    names: list[str] = field(default_factory=list)
    _handles: Any = None
    _scales: Any = None

    def apply(self, ctx: Any) -> None:
        """Set the adapters on context ``ctx`` (``llama_set_adapters_lora``)."""
        if not self.names:
            return
        if llama_cpp.llama_set_adapters_lora(ctx, self._handles, len(self.names), self._scales) != 0:
            raise ConfigError(f"llama.cpp could not set the LoRA adapters {', '.join(self.names)}")

    def describe(self) -> str:
        """``lora: style.gguf x1.0, tone.gguf x0.5``, or ``lora: none``."""
        return f"lora: {', '.join(self.names) or 'none'}"


def load_adapters(llm: Any, settings: LlamaCppSettings, model_id: str) -> Adapters:
    """Load ``settings.lora`` for ``llm``'s model.

    Raises:
        ConfigError: a file missing, or refused by llama.cpp (its reason).
    """
    if not settings.lora:
        return Adapters()
    handles = []
    for i, adapter in enumerate(settings.lora):
        path = adapter.file
        if not path.is_file():
            raise ConfigError(f"model '{model_id}': settings.lora.{i}: adapter file not found: {path}")
        with LogCapture.capture(forward=settings.verbose) as lines:
            handle = llama_cpp.llama_adapter_lora_init(llm.model, str(path).encode())
        if not handle:
            said = " ".join(line.strip() for line in lines if "failed" in line or "error" in line.lower())
            raise ConfigError(
                f"model '{model_id}': settings.lora.{i}: llama.cpp refused the adapter {path}: "
                f"{said or 'see its log (settings.verbose = true)'}"
            )
        handles.append(handle)
    array = (llama_cpp.llama_adapter_lora_p_ctypes * len(handles))(*handles)
    scales = (ctypes.c_float * len(handles))(*(adapter.scale for adapter in settings.lora))
    names = [f"{adapter.file.name} x{adapter.scale:g}" for adapter in settings.lora]
    return Adapters(names, array, scales)
