"""Which default model is served when the configuration names no model.

Plugins offer default models (the ``register_default_models`` hook; the
llamacpp plugin's embedded SmolLM2, a hardware vendor's own). Exactly one is
served, chosen by a rule that does not depend on install or load order
(docs/configuration.md, "Default models"):

1. ``server.default_model`` names one: that one (an id no plugin offers is
   a configuration error listing the offered ids);
2. else the highest :attr:`DefaultModel.priority <missive.kernel.specs.DefaultModel.priority>`;
3. among equal priorities, the smallest id (plain string order).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..config import ConfigError
from ..kernel.specs import DefaultModel

__all__ = ["choose_default_model", "ranked"]


def ranked(offered: Mapping[str, DefaultModel]) -> list[DefaultModel]:
    """The offered default models, the one rule 2 and 3 choose first."""
    return sorted(offered.values(), key=lambda d: (-d.priority, d.id))


def choose_default_model(offered: Mapping[str, DefaultModel], wanted: str | None) -> DefaultModel | None:
    """The default model to serve.

    Args:
        offered: default models by id (``Kernel.default_models``).
        wanted: ``server.default_model`` (None: unset).

    Returns:
        The chosen model, or None when no plugin offers one.

    Raises:
        ConfigError: ``wanted`` is set and no plugin offers that id.
    """
    if wanted is not None:
        if wanted not in offered:
            known = ", ".join(d.id for d in ranked(offered)) or "none installed"
            raise ConfigError(
                f"server.default_model is '{wanted}', which no plugin offers (offered: {known}); "
                "see `missive plugins`"
            )
        return offered[wanted]
    order = ranked(offered)
    return order[0] if order else None
