"""Grammar-constrained decoding: the logits processor of a sequence's constraint.

A placeholder for the batched path (:mod:`missive_mlx.batched`): nothing
constrains decoding yet, so no sequence has a processor. The constrained
decoding work replaces this module with one that returns an mlx-lm
``LogitsProcessor`` (``(tokens, logits) -> logits``) for a constrained
``Sampling``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from missive.api import Sampling

__all__ = ["logits_processor"]


def logits_processor(sampling: Sampling) -> Callable[[Any, Any], Any] | None:
    """The mlx-lm logits processor enforcing ``sampling.constraint``; None: unconstrained."""
    return None
