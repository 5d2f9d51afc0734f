"""LoRA adapters applied to a model's context (llama-server's ``--lora`` / ``--lora-scaled``).

llama.cpp's rules (``src/llama-adapter.cpp``, ``include/llama.h``):

* ``llama_adapter_lora_init`` reads an adapter GGUF (``general.type =
  "adapter"``, ``adapter.type = "lora"``) against the loaded model and
  refuses one of another architecture ("model arch and LoRA arch
  mismatch"), with a tensor the model lacks ("does not exist in base
  model") or of another shape ("has incorrect shape"); "the adapter is
  valid as long as the associated model is not freed", and adapters not
  freed by hand "will be freed when the associated model is deleted"
  (``include/llama.h``): one may be loaded at any time after the model;
* ``llama_set_adapters_lora`` sets the adapters and their scales on a
  context: every sequence decoded in it from then on goes through them
  (the effective scale is ``scale * alpha / rank`` when the adapter sets
  ``adapter.lora.alpha``); it "will only modify if the adapters currently
  in context are different" (``include/llama.h``), so setting them again
  costs nothing; a different set replaces the context's, leaves out every
  adapter of scale 0 (one at 0 is absent from the graph) and makes the
  context reserve its compute graph again before the next decode
  (``llama_context::set_adapters_lora``: ``sched_need_reserve = true``,
  ``src/llama-context.cpp``): a switch costs a graph reservation, not the
  KV cache.

Missive loads each adapter of ``settings.lora`` after the model, with
llama.cpp's log captured so a refusal is a start-up error naming the file and
llama.cpp's reason, and sets them on the context before anything is decoded.
A model entry with ``settings.base`` (:mod:`missive_llamacpp.shared`) adds
its own set to its base's loaded model (each file loaded once: an
:class:`AdapterBank` per model); the runner sets a sequence's set before
each step that decodes it (:mod:`missive_llamacpp.variants`). The adapters
are part of the prompt cache's key
(:meth:`missive_llamacpp.portable.PortableSlots.state_key` for the model's
own, the saved state's ``variant`` for another entry's): a state computed
through other adapters is never restored.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from missive.api import ConfigError

from .memory import LogCapture
from .settings import LoraAdapter

__all__ = ["AdapterBank", "Adapters", "load_adapters"]


@dataclass
class Adapters:
    """One set of adapters of one model, loaded.

    Attributes:
        names: each adapter's file name and scale, for the load line.
    """

    names: list[str] = field(default_factory=list)
    _handles: Any = None
    _scales: Any = None

    def apply(self, ctx: Any) -> None:
        """Set the adapters on context ``ctx`` (``llama_set_adapters_lora``;
        an empty set clears those set before)."""
        n = len(self.names)
        if llama_cpp.llama_set_adapters_lora(ctx, self._handles, n, self._scales) != 0:
            raise ConfigError(
                f"llama.cpp could not set the LoRA adapters {', '.join(self.names) or '(none)'}"
            )

    def describe(self) -> str:
        """``lora: style.gguf x1.0, tone.gguf x0.5``, or ``lora: none``."""
        return f"lora: {', '.join(self.names) or 'none'}"


@dataclass
class AdapterBank:
    """The adapter files loaded against one model, by resolved path (each
    loaded once, whichever entries name it)."""

    handles: dict[str, Any] = field(default_factory=dict)


def load_adapters(
    llm: Any,
    lora: Sequence[LoraAdapter],
    model_id: str,
    *,
    verbose: bool = False,
    bank: AdapterBank | None = None,
) -> Adapters:
    """Load ``lora`` (a ``settings.lora``) for ``llm``'s model, each file
    once per ``bank``.

    Raises:
        ConfigError: a file missing, or refused by llama.cpp (its reason).
    """
    if not lora:
        return Adapters()
    bank = bank if bank is not None else AdapterBank()
    handles = []
    for i, adapter in enumerate(lora):
        path = adapter.file
        if not path.is_file():
            raise ConfigError(f"model '{model_id}': settings.lora.{i}: adapter file not found: {path}")
        key = str(path.resolve())
        handle = bank.handles.get(key)
        if handle is None:
            with LogCapture.capture(forward=verbose) as lines:
                handle = llama_cpp.llama_adapter_lora_init(llm.model, str(path).encode())
            if not handle:
                said = " ".join(line.strip() for line in lines if "failed" in line or "error" in line.lower())
                raise ConfigError(
                    f"model '{model_id}': settings.lora.{i}: llama.cpp refused the adapter {path}: "
                    f"{said or 'see its log (settings.verbose = true)'}"
                )
            bank.handles[key] = handle
        handles.append(handle)
    array = (llama_cpp.llama_adapter_lora_p_ctypes * len(handles))(*handles)
    scales = (ctypes.c_float * len(handles))(*(adapter.scale for adapter in lora))
    names = [f"{adapter.file.name} x{adapter.scale:g}" for adapter in lora]
    return Adapters(names, array, scales)
