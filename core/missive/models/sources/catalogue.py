"""What ``missive models`` lists: the models available on this machine.

Three places, none of them asked over the network:

* the configured models (a configuration file): each entry's reference
  looked up locally (a Hugging Face one in the cache only), or the error
  saying why it is not there yet;
* huggingface_hub's cache (``scan_cache_dir``): every GGUF model file of
  every cached model repository (projectors left out), and every repository
  that is an MLX model folder;
* Ollama's store (:func:`missive.models.sources.ollama.list_ollama`).

Each row carries what the files say (:func:`~missive.models.sources.local.model_facts`):
size, quantization, training context, chat template family, default sampling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ...config import ModelEntry
from ...kernel.specs import DriverSpec
from . import resolve
from .huggingface import PREFERRED_QUANTS, choose_gguf
from .local import LocalModel, ModelFacts, model_facts
from .refs import ModelRef, ModelRefError, parse_ref

__all__ = ["CatalogueRow", "catalogue", "configured_rows", "hf_cache_rows", "ollama_rows"]

log = logging.getLogger("missive.sources")


@dataclass(frozen=True)
class CatalogueRow:
    """One listed model.

    Attributes:
        name: what to pass to ``missive serve --model`` (a reference), or
            the configured model id (``kind`` ``configured``).
        kind: ``configured``, ``huggingface`` or ``ollama``.
        path: the model file or folder (None: not on this machine).
        size: bytes on disk; quantization, context_length, template_family:
            from the files (None when unknown).
        reference: the configured reference or path (configured rows).
        driver: the configured driver (configured rows).
        error: why a configured model's files are not available.
        sampling: the default sampling of requests that leave it unset
            (:meth:`missive.sampling.SamplingDefaults.describe`).
    """

    name: str
    kind: str
    path: str | None
    size: int | None
    quantization: str | None
    context_length: int | None
    template_family: str | None
    reference: str | None = None
    driver: str | None = None
    error: str | None = None
    sampling: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(name: str, kind: str, local: LocalModel, **extra: Any) -> CatalogueRow:
    facts: ModelFacts = model_facts(local)
    return CatalogueRow(
        name=name,
        kind=kind,
        path=str(local.path),
        size=facts.size,
        quantization=facts.quantization,
        context_length=facts.context_length,
        template_family=facts.template_family,
        error=facts.error,
        sampling=facts.sampling,
        **extra,
    )


def configured_rows(
    models: Mapping[str, ModelEntry], drivers: Mapping[str, DriverSpec]
) -> list[CatalogueRow]:
    """A row per configured model whose driver loads model files."""
    rows = []
    for model_id, entry in models.items():
        spec = drivers.get(entry.driver)
        if spec is None or spec.model_format is None:
            continue
        value = entry.settings.get(spec.model_setting)
        if not isinstance(value, str):
            continue
        try:
            local = resolve(value, download=False)
        except ModelRefError as exc:
            rows.append(
                CatalogueRow(
                    model_id, "configured", None, None, None, None, None, value, entry.driver, str(exc)
                )
            )
            continue
        if not local.path.exists():
            rows.append(
                CatalogueRow(
                    model_id,
                    "configured",
                    str(local.path),
                    None,
                    None,
                    None,
                    None,
                    value,
                    entry.driver,
                    f"{local.path} does not exist",
                )
            )
            continue
        rows.append(_row(model_id, "configured", local, reference=value, driver=entry.driver))
    return rows


def _gguf_name(repo: str, name: str, files: list[str]) -> str:
    """The shortest reference that picks ``name`` in the repository: the
    bare repository when the default choice is it, else its quantization
    tag when that picks it, else the file path."""
    try:
        if choose_gguf(files, None)[0] == name:
            return f"hf://{repo}"
    except ModelRefError:
        pass
    from .gguf import FILE_TYPES

    for tag in (*PREFERRED_QUANTS, *FILE_TYPES.values()):
        try:
            if choose_gguf(files, tag)[0] == name:
                return f"hf://{repo}:{tag}"
        except ModelRefError:
            continue
    return f"hf://{repo}:{name}"


def hf_cache_rows() -> list[CatalogueRow]:
    """A row per GGUF model (split models once) and per MLX folder in
    huggingface_hub's cache; an unreadable cache gives none."""
    try:
        from huggingface_hub import scan_cache_dir

        info = scan_cache_dir()
    except Exception as exc:  # no cache yet, or not readable
        log.debug("no Hugging Face cache: %s", exc)
        return []
    rows = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for revision in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True)[:1]:
            snapshot = Path(revision.snapshot_path)
            files = sorted(f.file_path.relative_to(snapshot).as_posix() for f in revision.files)
            ref = ModelRef("hf", f"hf://{repo.repo_id}", repo=repo.repo_id)
            ggufs = [f for f in files if f.lower().endswith(".gguf") and "mmproj" not in f.lower()]
            seen: set[str] = set()
            for name in ggufs:
                try:
                    parts = choose_gguf(files, name)
                except ModelRefError:
                    continue  # a part of a split model whose other parts are missing
                if parts[0] in seen:
                    continue
                seen.add(parts[0])
                local = LocalModel(
                    ref,
                    "gguf",
                    snapshot / parts[0],
                    None,
                    tuple(snapshot / p for p in parts),
                    f"Hugging Face {repo.repo_id}",
                )
                rows.append(_row(_gguf_name(repo.repo_id, parts[0], files), "huggingface", local))
            if not ggufs and "config.json" in files and any(f.endswith(".safetensors") for f in files):
                local = LocalModel(
                    ref,
                    "mlx",
                    snapshot,
                    None,
                    tuple(snapshot / f for f in files),
                    f"Hugging Face {repo.repo_id}",
                )
                rows.append(_row(f"hf://{repo.repo_id}", "huggingface", local))
    return rows


def ollama_rows() -> list[CatalogueRow]:
    """A row per model in Ollama's store(s)."""
    from .ollama import list_ollama

    rows = []
    for found in list_ollama():
        ref = parse_ref(f"ollama://{found.name}")
        files = (found.model,) + ((found.projector,) if found.projector else ())
        local = LocalModel(ref, "gguf", found.model, found.projector, files, f"Ollama {found.name}")
        name = found.name if "/" not in found.name else f"ollama://{found.name}"
        rows.append(_row(name, "ollama", local))
    return rows


def catalogue(models: Mapping[str, ModelEntry], drivers: Mapping[str, DriverSpec]) -> list[CatalogueRow]:
    """Every row: the configured models, then the Hugging Face cache, then Ollama's store."""
    return [*configured_rows(models, drivers), *hf_cache_rows(), *ollama_rows()]
