"""A model as files on this machine, and what its files say about it.

:class:`LocalModel` is what every reference resolves to (a Hugging Face
download, an Ollama blob, a path); :func:`model_facts` reads the numbers
``missive models`` lists and ``missive serve --model`` chooses its defaults
from: size, quantization, training context, chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..sampling import folder_sampling, gguf_names, model_sampling
from .gguf import GGUFError, read_gguf, template_family
from .refs import ModelRef

__all__ = ["LocalModel", "ModelFacts", "model_facts", "local_path_model", "folder_size", "human_size"]

Format = Literal["gguf", "mlx"]


@dataclass(frozen=True)
class LocalModel:
    """A model's files on this machine.

    Attributes:
        ref: the reference it was resolved from.
        format: ``"gguf"`` (one file, or the first part of a split model) or
            ``"mlx"`` (a folder with ``config.json`` and ``*.safetensors``).
        path: the GGUF file or the MLX folder.
        projector: the vision projector GGUF (``mmproj``) to load with it, or None.
        files: every file it is made of (for sizes).
        source: where it came from, for people (``Hugging Face OWNER/REPO``,
            ``Ollama qwen3:4b``, ``local file``).
    """

    ref: ModelRef
    format: Format
    path: Path
    projector: Path | None
    files: tuple[Path, ...]
    source: str

    @property
    def size(self) -> int:
        """Bytes of every file (0 for files not there)."""
        return sum(p.stat().st_size for p in self.files if p.exists())


@dataclass(frozen=True)
class ModelFacts:
    """What a model's files say about it (None: not stated there).

    Attributes:
        name: the model's own name (GGUF ``general.name``, else the file or folder name).
        architecture: ``llama``, ``qwen3``... (GGUF ``general.architecture``,
            MLX ``config.json`` ``model_type``).
        size: bytes on disk (weights and projector).
        quantization: ``Q4_K_M``... (GGUF ``general.file_type``), ``4bit``
            (MLX ``quantization.bits``), or None (unquantized).
        context_length: training context in tokens (GGUF
            ``{arch}.context_length``, MLX ``max_position_embeddings``).
        chat_template: the Jinja chat template, or None.
        template_family: :func:`~missive.sources.gguf.template_family` of it.
        error: why the metadata could not be read (the other fields None then).
        sampling: the default sampling requests get
            (:meth:`missive.sampling.SamplingDefaults.describe`), None when
            the metadata could not be read.
    """

    name: str | None
    architecture: str | None
    size: int
    quantization: str | None
    context_length: int | None
    chat_template: str | None
    template_family: str
    error: str | None = None
    sampling: str | None = None


def human_size(n: int | None) -> str:
    """Bytes for people: ``93.8 MiB``, ``4.37 GiB`` (``?`` for None)."""
    if n is None:
        return "?"
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def folder_size(folder: Path) -> int:
    """Bytes of the files under ``folder`` (links followed: the Hugging Face
    cache's snapshots are links to its blobs)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def local_path_model(ref: ModelRef) -> LocalModel:
    """A ``path`` reference as a :class:`LocalModel` (not checked to exist:
    the driver says so when it loads it): a folder with ``config.json`` is
    an MLX model, anything else a GGUF file."""
    assert ref.path is not None
    path = ref.path
    if path.is_dir() and (path / "config.json").is_file():
        files = tuple(p for p in path.rglob("*") if p.is_file())
        return LocalModel(ref, "mlx", path, None, files, "local folder")
    return LocalModel(ref, "gguf", path, None, (path,), "local file")


def _mlx_facts(folder: Path, size: int) -> ModelFacts:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return ModelFacts(folder.name, None, size, None, None, None, "none", f"config.json: {exc}")
    template = None
    jinja = folder / "chat_template.jinja"
    try:
        if jinja.is_file():
            template = jinja.read_text(encoding="utf-8")
        else:
            tokenizer = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
            value = tokenizer.get("chat_template")
            template = value if isinstance(value, str) else None
    except (OSError, ValueError):
        template = None
    quant = config.get("quantization") or config.get("quantization_config") or {}
    bits = quant.get("bits") if isinstance(quant, dict) else None
    context = config.get("max_position_embeddings")
    return ModelFacts(
        name=folder.name,
        architecture=config.get("model_type"),
        size=size,
        quantization=f"{bits}bit" if bits else None,
        context_length=context if isinstance(context, int) else None,
        chat_template=template,
        template_family=template_family(template),
        sampling=folder_sampling(folder).describe(),
    )


def model_facts(model: LocalModel) -> ModelFacts:
    """Read what ``model``'s files say (GGUF header, MLX ``config.json`` and
    tokenizer files). Never raises: an unreadable file gives ``error``."""
    size = model.size
    if model.format == "mlx":
        return _mlx_facts(model.path, size)
    try:
        info = read_gguf(model.path)
    except (GGUFError, OSError) as exc:
        return ModelFacts(model.path.name, None, size, None, None, None, "none", str(exc))
    return ModelFacts(
        name=info.name or model.path.name,
        architecture=info.architecture,
        size=max(size, info.size),
        quantization=info.quantization,
        context_length=info.context_length,
        chat_template=info.chat_template,
        template_family=info.template_family,
        sampling=model_sampling(info.metadata, gguf_names(info.metadata, model.path.name)).describe(),
    )
