"""Models already pulled by Ollama, used in place from its store.

Ollama keeps each model as an OCI-style manifest and content-addressed
blobs (its ``server/modelpath.go`` and ``manifest`` code)::

    $OLLAMA_MODELS/                     # default ~/.ollama/models; the Linux
      manifests/HOST/NAMESPACE/MODEL/TAG  # service's /usr/share/ollama/.ollama/models
      blobs/sha256-<hex>

A manifest is JSON with ``layers``, each a ``mediaType``, a ``digest``
(``sha256:<hex>``, the blob ``sha256-<hex>``) and a ``size``. The layer
``application/vnd.ollama.image.model`` is the model's GGUF file; a layer
``application/vnd.ollama.image.projector`` its vision projector. Missive
reads the GGUF blob where it is (no copy); Ollama's own template layer (a Go
template) is not used: the GGUF carries the model's Jinja chat template.

Names are Ollama's ``[HOST/][NAMESPACE/]MODEL[:TAG]``, defaulting to
``registry.ollama.ai``, ``library`` and ``latest``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .local import LocalModel
from .refs import ModelRef, ModelRefError

__all__ = [
    "OllamaModel",
    "ollama_dirs",
    "find_ollama",
    "list_ollama",
    "resolve_ollama",
    "MODEL_LAYER",
    "PROJECTOR_LAYER",
]

MODEL_LAYER = "application/vnd.ollama.image.model"
PROJECTOR_LAYER = "application/vnd.ollama.image.projector"
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class OllamaModel:
    """One pulled model: its short name (as ``ollama list`` shows it), its
    manifest file, its GGUF blob and projector blob (None without one)."""

    name: str
    manifest: Path
    model: Path
    projector: Path | None


def ollama_dirs() -> list[Path]:
    """Ollama stores to look in: ``$OLLAMA_MODELS`` when set (only it, as
    Ollama does), else ``~/.ollama/models`` and the Linux service's
    ``/usr/share/ollama/.ollama/models``, those that exist."""
    explicit = os.environ.get("OLLAMA_MODELS")
    if explicit:
        return [Path(explicit).expanduser()]
    candidates = [Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")]
    return [p for p in candidates if p.is_dir()]


def _split_name(name: str, tag: str | None) -> tuple[str, str, str, str]:
    parts = name.split("/")
    model = parts[-1]
    namespace = parts[-2] if len(parts) >= 2 else DEFAULT_NAMESPACE
    host = parts[-3] if len(parts) >= 3 else DEFAULT_HOST
    return host, namespace, model, tag or DEFAULT_TAG


def _short_name(host: str, namespace: str, model: str, tag: str) -> str:
    prefix = "" if host == DEFAULT_HOST else f"{host}/"
    prefix += "" if host == DEFAULT_HOST and namespace == DEFAULT_NAMESPACE else f"{namespace}/"
    return f"{prefix}{model}:{tag}"


def _blob(store: Path, digest: str) -> Path:
    return store / "blobs" / digest.replace(":", "-")


def _read_manifest(store: Path, manifest: Path, name: str) -> OllamaModel:
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layers = data["layers"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelRefError(f"Ollama model {name}: unreadable manifest {manifest}: {exc}") from None
    by_type = {layer.get("mediaType"): layer.get("digest") for layer in layers if isinstance(layer, dict)}
    digest = by_type.get(MODEL_LAYER)
    if not digest:
        raise ModelRefError(
            f"Ollama model {name}: its manifest {manifest} has no model layer ({MODEL_LAYER})"
        )
    projector = by_type.get(PROJECTOR_LAYER)
    return OllamaModel(
        name=name,
        manifest=manifest,
        model=_blob(store, digest),
        projector=_blob(store, projector) if projector else None,
    )


def _manifest_path(store: Path, host: str, namespace: str, model: str, tag: str) -> Path | None:
    exact = store / "manifests" / host / namespace / model / tag
    if exact.is_file():
        return exact
    # Ollama matches names without regard to case; its folders keep the case they were pulled with.
    base = store / "manifests"
    parts = [host, namespace, model, tag]
    node = base
    for part in parts:
        if not node.is_dir():
            return None
        match = next((child for child in node.iterdir() if child.name.lower() == part.lower()), None)
        if match is None:
            return None
        node = match
    return node if node.is_file() else None


def find_ollama(name: str, tag: str | None = None) -> OllamaModel:
    """The pulled model ``name`` (``[HOST/][NAMESPACE/]MODEL``) at ``tag``.

    Raises:
        ModelRefError: no store, or no such model in any; the message names
            the stores looked in and the models they have.
    """
    host, namespace, model, tag = _split_name(name, tag)
    short = _short_name(host, namespace, model, tag)
    stores = ollama_dirs()
    for store in stores:
        manifest = _manifest_path(store, host, namespace, model, tag)
        if manifest is not None:
            found = _read_manifest(store, manifest, short)
            if not found.model.is_file():
                raise ModelRefError(
                    f"Ollama model {short}: its blob {found.model} is missing (pull it again)"
                )
            return found
    where = ", ".join(str(s) for s in stores) or "no Ollama store (~/.ollama/models; set OLLAMA_MODELS)"
    have = sorted(m.name for m in list_ollama())
    listed = f"; it has: {', '.join(have)}" if have else ""
    raise ModelRefError(
        f"no Ollama model {short} in {where}{listed} (pull it with `ollama pull {short}`; "
        "a file path must exist, and a Hugging Face model is written hf://OWNER/REPO)"
    )


def list_ollama() -> list[OllamaModel]:
    """Every pulled model of every store (:func:`ollama_dirs`); manifests
    that cannot be read are left out."""
    found: list[OllamaModel] = []
    for store in ollama_dirs():
        root = store / "manifests"
        if not root.is_dir():
            continue
        for manifest in sorted(p for p in root.glob("*/*/*/*") if p.is_file()):
            host, namespace, model, tag = manifest.relative_to(root).parts
            try:
                found.append(_read_manifest(store, manifest, _short_name(host, namespace, model, tag)))
            except ModelRefError:
                continue
    return found


def resolve_ollama(ref: ModelRef) -> LocalModel:
    """The GGUF blob (and projector blob) of an Ollama reference, in place.

    Raises:
        ModelRefError: see :func:`find_ollama`.
    """
    found = find_ollama(ref.repo, ref.selector)
    files = (found.model,) + ((found.projector,) if found.projector else ())
    return LocalModel(ref, "gguf", found.model, found.projector, files, f"Ollama {found.name}")
