"""Model references: what a model path setting, ``missive pull`` and
``missive serve --model`` accept.

Three forms (docs/models.md):

* ``hf://OWNER/REPO[@REVISION][:SELECTOR]``: a Hugging Face repository. For a
  GGUF repository ``SELECTOR`` is a quantization tag (``Q4_K_M``, any case,
  matched against the file names as ``llama-server -hf`` does) or a file
  path in the repository (ending in ``.gguf``); without it ``Q4_K_M`` is
  preferred. An MLX repository takes no selector.
* an Ollama model already pulled on this machine: ``ollama://NAME[:TAG]``, or
  the bare name when it is not a path (``qwen3:4b``, ``llama3.2``); the name
  follows Ollama's ``[HOST/][NAMESPACE/]MODEL[:TAG]``.
* a local path (``~`` expanded): anything containing a path separator,
  starting with ``.`` or ``~``, ending in ``.gguf``, or that exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["ModelRef", "ModelRefError", "parse_ref", "is_reference"]

HF_SCHEME = "hf://"
OLLAMA_SCHEME = "ollama://"

# A Hugging Face repo id: OWNER/NAME, each of letters, digits, "-", "_", "."
# (huggingface_hub's validate_repo_id; 96 characters at most).
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.\-]{0,95}/[\w.\-]{1,96}$")
# An Ollama name: [host/][namespace/]model[:tag] (Ollama's types/model ParseName).
_OLLAMA_NAME = re.compile(r"^(?:[\w.\-]+(?::\d+)?/){0,2}[\w.\-]+(?::[\w.\-]{1,128})?$")


class ModelRefError(Exception):
    """A reference that cannot be used: malformed, or what it names is
    missing, gated or unreachable. The message names the reference, the
    repository or store, and the files concerned."""


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference.

    Attributes:
        kind: ``"hf"``, ``"ollama"`` or ``"path"``.
        text: the reference as written.
        repo: ``OWNER/REPO`` (hf) or the Ollama name without its tag.
        revision: hf only: branch, tag or commit (None: ``main``).
        selector: hf: quantization tag or file path; ollama: the tag
            (None: ``latest``).
        path: the expanded path (kind ``path``).
    """

    kind: Literal["hf", "ollama", "path"]
    text: str
    repo: str = ""
    revision: str | None = None
    selector: str | None = None
    path: Path | None = None

    def __str__(self) -> str:
        return self.text


def _looks_like_path(text: str) -> bool:
    return (
        os.sep in text
        or (os.altsep is not None and os.altsep in text)
        or text.startswith((".", "~"))
        or text.lower().endswith(".gguf")
        or Path(text).expanduser().exists()
    )


def is_reference(text: str) -> bool:
    """Whether ``text`` names a model to fetch or look up (``hf://``,
    ``ollama://`` or a bare Ollama name) rather than a local path."""
    return parse_ref(text).kind != "path"


def parse_ref(text: str) -> ModelRef:
    """Parse a model reference (see the module doc for the forms).

    Raises:
        ModelRefError: ``hf://`` without ``OWNER/REPO``, an empty selector, or
            an ``ollama://`` name Ollama would not accept.
    """
    text = text.strip()
    if not text:
        raise ModelRefError("empty model reference")
    if text.startswith(HF_SCHEME):
        rest = text[len(HF_SCHEME) :]
        repo, sep, selector = rest.partition(":")
        repo, at, revision = repo.partition("@")
        if not _HF_REPO.match(repo) or (at and not revision) or (sep and not selector):
            raise ModelRefError(
                f"bad Hugging Face reference {text!r}: write hf://OWNER/REPO, hf://OWNER/REPO:Q4_K_M "
                "(a quantization tag) or hf://OWNER/REPO:path/in/repo.gguf"
            )
        return ModelRef("hf", text, repo=repo, revision=revision or None, selector=selector or None)
    explicit = text.startswith(OLLAMA_SCHEME)
    name = text[len(OLLAMA_SCHEME) :] if explicit else text
    if explicit or not _looks_like_path(text):
        if _OLLAMA_NAME.match(name):
            model, sep, tag = name.rpartition(":") if _has_tag(name) else (name, "", "")
            return ModelRef("ollama", text, repo=model, selector=tag or None)
        if explicit:
            raise ModelRefError(f"bad Ollama model name {name!r}: write NAME[:TAG], e.g. qwen3:4b")
    return ModelRef("path", text, path=Path(text).expanduser())


def _has_tag(name: str) -> bool:
    """Whether the last ``:`` of an Ollama name starts a tag (not a port:
    ``host:5000/model`` has none)."""
    return ":" in name.rsplit("/", 1)[-1]
