"""Default ``resolve_model``: exact model ids first, then alias glob patterns.

Patterns use :func:`fnmatch.fnmatchcase` (``claude-*``, ``claude-3-?-haiku*``).
Models are tried in configuration order, so a specific pattern on an earlier
model wins over ``*`` on a later one (contract section 6, aliases).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from ..config import Config
from ..kernel.hookspecs import hookimpl

__all__ = ["resolve_model", "alias_match"]


def alias_match(requested: str, config: Config) -> str | None:
    """The configured model whose ``aliases`` match ``requested`` (None: it
    is a configured id itself, or no pattern matches)."""
    if requested in config.models:
        return None
    for model_id, entry in config.models.items():
        if any(fnmatchcase(requested, pattern) for pattern in entry.aliases):
            return model_id
    return None


@hookimpl(trylast=True)
def resolve_model(requested: str, config: Config) -> str | None:
    if requested in config.models:
        return requested
    return alias_match(requested, config)
