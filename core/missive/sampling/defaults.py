"""A model's default sampling: what a request that leaves ``temperature``,
``top_p``, ``top_k`` (and ``min_p``, which the Messages API has no field for)
unset samples with.

Clients such as Claude Code send no ``temperature``: without a default of the
model's own, every model would run at the API's 1.0 with no top-k or min-p
cut, far from what its authors recommend (Qwen3-Coder: 0.7 / 0.8 / 20). In
order, the first source that states any value:

1. the GGUF file's recommended sampler keys ``general.sampling.temp``,
   ``.top_p``, ``.top_k``, ``.min_p`` (names: llama.cpp ``gguf-py``
   ``Keys.General.SAMPLING_*``; llama.cpp's ``common`` applies them to
   llama-server and llama-cli where the command line sets none);
2. the family table (:mod:`missive.sampling.families`), by the model's names;
3. the model's ``generation_config.json`` (``temperature``, ``top_p``,
   ``top_k``, ``min_p``: Hugging Face's ``GenerationConfig`` names; MLX folders);
4. none: the API's defaults.

A request's own values always win, field by field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .families import Values, family_for

__all__ = ["SamplingDefaults", "GGUF_KEYS", "model_sampling", "gguf_names", "folder_sampling", "NO_DEFAULTS"]

#: GGUF keys of the recommended sampler values (llama.cpp gguf-py constants).
GGUF_KEYS: dict[str, str] = {
    "temperature": "general.sampling.temp",
    "top_p": "general.sampling.top_p",
    "top_k": "general.sampling.top_k",
    "min_p": "general.sampling.min_p",
}


def _number(value: Any, integer: bool) -> float | int | None:
    """A metadata value as a number (llama-cpp-python gives every GGUF
    scalar as a string), None when it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if number != number or number < 0:  # NaN or negative: not a usable setting
        return None
    return int(number) if integer else number


def _values(source: Mapping[str, Any], keys: Mapping[str, str]) -> Values | None:
    found = {field: _number(source.get(key), field == "top_k") for field, key in keys.items()}
    if all(v is None for v in found.values()):
        return None
    return Values(**found)  # type: ignore[arg-type]


@dataclass(frozen=True)
class SamplingDefaults:
    """A model's default sampling values and where they come from.

    Attributes:
        values: for requests without thinking (all of them, for most models).
        thinking: for requests with thinking on, when the source recommends
            other values for the model's thinking mode (hybrid Qwen3); None:
            as ``values``.
        source: ``gguf`` (the file's ``general.sampling.*``),
            ``table:NAME`` (the family table), ``generation_config``, or
            ``api`` (none: the Messages API's defaults).
    """

    values: Values = Values()
    source: str = "api"
    thinking: Values | None = None

    def resolve(
        self, temperature: float | None, top_p: float | None, top_k: int | None, *, thinking: bool = False
    ) -> Values:
        """The values a request samples with: its own where set, else these
        defaults (the thinking ones when the request thinks)."""
        base = self.thinking if thinking and self.thinking is not None else self.values
        return Values(
            temperature=base.temperature if temperature is None else temperature,
            top_p=base.top_p if top_p is None else top_p,
            top_k=base.top_k if top_k is None else top_k,
            min_p=base.min_p,
        )

    def describe(self) -> str:
        """One line for logs and ``missive models``:
        ``temperature=0.7,top_p=0.8,top_k=20(table:qwen3-coder)``; ``api``
        when nothing is set."""

        def text(values: Values) -> str:
            parts = [f"{k}={getattr(values, k):g}" for k in GGUF_KEYS if getattr(values, k) is not None]
            return ",".join(parts) or "api"

        out = text(self.values)
        if self.thinking is not None:
            out += f";thinking:{text(self.thinking)}"
        return out if self.source == "api" else f"{out}({self.source})"


NO_DEFAULTS = SamplingDefaults()


def model_sampling(
    metadata: Mapping[str, Any] | None = None,
    names: list[str] | None = None,
    generation_config: Mapping[str, Any] | None = None,
) -> SamplingDefaults:
    """The default sampling of a model (see the module documentation).

    Args:
        metadata: GGUF key/values (strings or numbers), or None.
        names: the model's names to match the family table against
            (``general.name``, ``general.basename``, the file name...).
        generation_config: the model's ``generation_config.json``, or None.
    """
    if metadata and (values := _values(metadata, GGUF_KEYS)) is not None:
        return SamplingDefaults(values, "gguf")
    family = family_for(list(names or []))
    if family is not None:
        return SamplingDefaults(family.values, f"table:{family.name}", family.thinking)
    if generation_config and generation_config.get("do_sample") is not False:
        fields = {k: k for k in GGUF_KEYS}
        if (values := _values(generation_config, fields)) is not None:
            return SamplingDefaults(values, "generation_config")
    return NO_DEFAULTS


def gguf_names(metadata: Mapping[str, Any], file_name: str | None = None) -> list[str]:
    """The names a GGUF model goes by, for :func:`model_sampling`."""
    keys = ("general.name", "general.basename", "general.finetune")
    names = [str(metadata[k]) for k in keys if isinstance(metadata.get(k), str)]
    if file_name:
        names.append(file_name)
    return names


def folder_sampling(folder: Path) -> SamplingDefaults:
    """The default sampling of a model folder (MLX, Hugging Face layout):
    the family table by the folder's name (a Hugging Face cache folder is
    named by its commit: the repository's name is in the ``models--ORG--REPO``
    folder above it), else its ``generation_config.json``."""
    try:
        generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        generation = None
    names = [folder.name] + [p.name.split("--")[-1] for p in folder.parents if p.name.startswith("models--")]
    return model_sampling(None, names, generation if isinstance(generation, dict) else None)
