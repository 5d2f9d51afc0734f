"""Default sampling per model: the GGUF's recommended values, the family
table, ``generation_config.json`` (see :mod:`.defaults`)."""

from .defaults import GGUF_KEYS, NO_DEFAULTS, SamplingDefaults, folder_sampling, gguf_names, model_sampling
from .families import FAMILIES, Family, Values, family_for

__all__ = [
    "FAMILIES",
    "Family",
    "GGUF_KEYS",
    "NO_DEFAULTS",
    "SamplingDefaults",
    "Values",
    "family_for",
    "folder_sampling",
    "gguf_names",
    "model_sampling",
]
