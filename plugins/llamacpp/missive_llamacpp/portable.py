"""Saved slot states as bytes: the llama.cpp side of the prompt cache's disk tier.

A mixin of :class:`~missive_llamacpp.runner.LlamaCppRunner`, the
:class:`~missive.api.PortableStates` side of its slots
(:mod:`missive_llamacpp.slots`); the engine owns the files
(:mod:`missive.engine.disk_cache`).

* **key** (:meth:`PortableSlots.state_key`): what the bytes of
  ``llama_state_seq_get_data`` depend on: the model file (path, size,
  mtime; a file replaced in place is another model), the vision projector,
  llama.cpp's build (llama-cpp-python's version, ``llama_print_system_info``, the ``libllama`` file),
  and the KV layout: ``cache_type_k`` / ``cache_type_v`` (the cells' types),
  flash attention as it was resolved (without it llama.cpp stores V
  transposed: ``llama_kv_cache::state_write_data`` writes ``v_trans`` in
  the state and ``state_read_data`` refuses a mismatch) and ``swa_full``
  (a sliding-window cache of the whole context or of the window).
* **bytes** (:meth:`PortableSlots.state_bytes`): the sequence's state, then
  each checkpoint's, one after the other; the description (``info``, JSON)
  gives their sizes, the checkpoints' token counts, ``pos_min`` and the
  adapter set it was computed through (``variant``: null for the model's
  own ``settings.lora``, which the key covers; another entry's set,
  ``settings.base``, as its files' paths, sizes, modification times and
  scales), so a state read back is restored only for prompts of that set.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import llama_cpp

from missive.api import SavedContext

from .checkpoints import Checkpoint
from .settings import LlamaCppSettings
from .slots import SlotStates, _State

__all__ = ["PortableSlots"]


def _build() -> str:
    """llama-cpp-python's version, what the library says of its build, and
    the loaded ``libllama`` file itself (path, size, modification time): a
    rebuilt wheel of the same version, or another build's libraries loaded
    through llama-cpp-python's ``LLAMA_CPP_LIB_PATH``, may write states of
    another layout (``LLAMA_STATE_SEQ_VERSION`` changes between builds)."""
    try:
        package = version("llama_cpp_python")
    except PackageNotFoundError:
        package = getattr(llama_cpp, "__version__", "?")
    system = llama_cpp.llama_print_system_info()
    library = getattr(getattr(llama_cpp.llama_cpp, "_lib", None), "_name", None) or "?"
    try:
        st = os.stat(library)
        library = f"{os.path.realpath(library)} {st.st_size} {st.st_mtime_ns}"
    except OSError:
        pass
    return f"{package} {system.decode(errors='replace') if isinstance(system, bytes) else system} {library}"


class PortableSlots(SlotStates):
    """Saved states to and from bytes (module documentation)."""

    settings: LlamaCppSettings

    def state_key(self) -> str:
        """A digest of the model file, llama.cpp's build and the KV layout."""
        s = self.settings
        layout = self._layout
        files = []
        for path in (s.path, s.mmproj):
            if path is not None:
                st = path.stat()
                files.append([str(path.resolve()), st.st_size, st.st_mtime_ns])
        flash = layout.report.flash_attn if layout is not None else None
        parts = {
            "files": files,
            "build": _build(),
            "cache_type_k": s.cache_type_k,
            "cache_type_v": s.cache_type_v,
            "flash_attn": flash if flash is not None else s.flash_attn,
            "swa_full": s.swa_full,
            # States computed through LoRA adapters hold other values (missive_llamacpp.lora).
            "lora": [
                [str(a.file.resolve()), a.file.stat().st_size, a.file.stat().st_mtime_ns, a.scale]
                for a in s.lora
            ],
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]

    def state_bytes(self, saved: SavedContext) -> tuple[bytes, list[Any]]:
        """``(info, [state, checkpoint, ...])`` (module documentation)."""
        state: _State = saved.state
        info = {
            "size": state.size,
            "pos_min": state.pos_min,
            "checkpoints": [[c.n_tokens, c.size] for c in state.checkpoints],
            "variant": state.variant,
        }
        parts = [memoryview(state.data)[: state.size]]
        parts += [memoryview(c.data)[: c.size] for c in state.checkpoints]
        return json.dumps(info).encode(), parts

    def state_from_bytes(self, tokens: list[int], info: bytes, payload: memoryview | None) -> SavedContext:
        """The state back from :meth:`state_bytes`' output (``payload``
        None: sizes only, to plan reuse).

        Raises:
            ValueError: the description or the payload's size is wrong.
        """
        try:
            described = json.loads(info)
            size, pos_min = int(described["size"]), int(described["pos_min"])
            marks = [(int(n), int(k)) for n, k in described["checkpoints"]]
            variant = _tuples(described.get("variant"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a llama.cpp state description: {exc}") from exc
        total = size + sum(k for _, k in marks)
        if payload is not None and payload.nbytes != total:
            raise ValueError(f"the state holds {payload.nbytes} bytes, its description {total}")
        data: Any = None
        checkpoints = []
        if payload is not None:
            data = (ctypes.c_uint8 * size).from_buffer(payload[:size])
        at = size
        for n_tokens, k in marks:
            part = (ctypes.c_uint8 * k).from_buffer(payload[at : at + k]) if payload is not None else None
            checkpoints.append(Checkpoint(n_tokens, part, k))
            at += k
        return SavedContext(tokens, _State(data, size, tuple(checkpoints), pos_min, variant), total, variant)


def _tuples(value: Any) -> Any:
    """A variant read back from JSON: its lists as tuples again (the key it was)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
