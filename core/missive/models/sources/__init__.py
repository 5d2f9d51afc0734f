"""Where models come from: references (``hf://``, Ollama names, paths)
resolved to files on this machine (docs/models.md).

* :mod:`.refs`: parsing references;
* :mod:`.huggingface`: Hugging Face repositories through ``huggingface_hub``;
* :mod:`.ollama`: Ollama's store, read in place;
* :mod:`.local`: the resolved files and what they say (:func:`model_facts`);
* :mod:`.gguf`: a GGUF header reader;
* :mod:`.catalogue`: what ``missive models`` lists;
* :mod:`.entries`: references in model entries, and the entry
  ``missive serve --model`` builds.
"""

from __future__ import annotations

from .local import LocalModel, ModelFacts, local_path_model, model_facts
from .refs import ModelRef, ModelRefError, is_reference, parse_ref

__all__ = [
    "LocalModel",
    "ModelFacts",
    "ModelRef",
    "ModelRefError",
    "is_reference",
    "parse_ref",
    "resolve",
    "model_facts",
]


def resolve(reference: str | ModelRef, *, download: bool = True) -> LocalModel:
    """The local files of a model reference: a Hugging Face repository is
    downloaded into its cache as needed (``download`` False: only looked
    for there), an Ollama model found in its store, a path taken as it is
    (not checked).

    Raises:
        ModelRefError: a malformed reference, or what it names is missing,
            gated or cannot be fetched (the message says which).
    """
    ref = parse_ref(reference) if isinstance(reference, str) else reference
    if ref.kind == "hf":
        from .huggingface import resolve_hf

        return resolve_hf(ref, download=download)
    if ref.kind == "ollama":
        from .ollama import resolve_ollama

        return resolve_ollama(ref)
    return local_path_model(ref)
