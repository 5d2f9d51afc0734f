"""Fallbacks across a fleet: another model answers when the chosen one cannot start.

The Messages API's ``fallbacks`` field (SDK 2.15 ``BetaFallbacksParam``: a
list of models tried in order after the requested one, or ``"default"`` for
the server's chain per model) is what a client asks for; this module adds
what a fleet's operator needs on top of it:

* **a per-model default chain in config**, ``models.<id>.fallbacks`` (model
  ids), applied with ``[routing] default_fallbacks = true`` to every request
  that names no ``fallbacks`` of its own (Claude Code sends none);
* **which failures move on**: those that mean the model cannot take the
  request now, raised before its answer starts: 529 ``overloaded_error``
  (its queue is full or timed out, no replica of its backend is reachable
  or every one is busy) and 429 ``rate_limit_error`` (a backend's); any
  other error is the request's or the model's and is answered as it is;
* **never after the first byte of an answer**: a model is left only while
  :func:`first_that_starts`'s ``begin`` raises, that is before its
  ``message_start`` exists; once begun, an error ends the message (an SSE
  ``error`` event) and no other model is tried. A stream whose model loads
  on demand sends ``ping`` events meanwhile; they carry nothing of an
  answer, and a fallback after them is still one answer from one model;
* **counted**: each move is noted on the request's record (its log line
  names it, ``fallback=main->spare``) and counted in
  ``missive:fallbacks_total`` by model, fallback model and error type.

The chain a request's ``fallbacks`` field builds (the API's per-entry
overrides) is built by the messages route; :func:`chain_for` gives the
model ids of the configured default chain, in the same shape: a list of
model ids tried in order after the first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import MissiveError, OverloadedError, RateLimitError

__all__ = ["TRIGGERS", "chain_for", "first_that_starts"]

log = logging.getLogger("missive.routing")

#: Errors raised before an answer starts that send the request to the next model.
TRIGGERS: tuple[type[MissiveError], ...] = (OverloadedError, RateLimitError)

T = TypeVar("T")


def _model_of(entry: str | Mapping[str, Any]) -> str | None:
    return entry if isinstance(entry, str) else entry.get("model")


def chain_for(req: Any, model_id: str, configured: Mapping[str, Sequence[str | Mapping[str, Any]]],
              default_fallbacks: bool) -> list[str]:
    """The models to try for ``req``, ``model_id`` first: with
    ``default_fallbacks``, then the model's configured chain (``configured``:
    each model's ``fallbacks``), unless the request names its own
    ``fallbacks`` (the API's field, handled where it is parsed). Each model
    once; unknown ids are left to the caller's check."""
    chain = [model_id]
    if default_fallbacks and getattr(req, "fallbacks", None) is None:
        for entry in configured.get(model_id, ()):
            model = _model_of(entry)
            if model and model not in chain:
                chain.append(model)
    return chain


async def first_that_starts(
    chain: Sequence[str],
    begin: Callable[[str], Awaitable[T]],
    moved: Callable[[str, str, str], None],
) -> T:
    """``begin(model)`` for each model of ``chain`` in turn until one starts
    (returns); a :data:`TRIGGERS` error moves on to the next, after
    ``moved(model, next_model, error_type)``; the last model's error, and any
    other error, is raised.

    ``begin`` must raise only before its answer has started (the messages
    route's ``_begin`` returns ``message_start`` and sends nothing itself).
    """
    for i, model in enumerate(chain):
        try:
            return await begin(model)
        except TRIGGERS as exc:
            if i == len(chain) - 1:
                raise
            log.info("model %s could not take the request (%s: %s); falling back to %s",
                     model, exc.error_type, exc.message, chain[i + 1])
            moved(model, chain[i + 1], exc.error_type)
    raise AssertionError("an empty chain")  # pragma: no cover - chains start with the model itself
