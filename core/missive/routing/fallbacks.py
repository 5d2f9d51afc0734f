"""Fallbacks across a fleet: what an operator adds to the API's ``fallbacks``.

The Messages API's ``fallbacks`` field (:mod:`missive.routing.chain`: a
list of models tried in order after the requested one when it cannot take
the request, or ``"default"`` for the model's configured chain,
``models.<id>.fallbacks``) is what a client asks for. A fleet's operator
needs three things on top of it:

* **a per-model default chain for every request**: Claude Code and most
  clients send no ``fallbacks``. With ``[routing] default_fallbacks = true``
  a request that names none is given its model's chain, as if it had sent
  ``fallbacks: "default"`` (:func:`with_model_chain`); a request that names
  its own keeps it;
* **counted**: each move to the next model is noted on the request's record
  (its log line: ``fallback=main->spare``) and counted in
  ``missive:fallbacks_total`` by model, fallback model and error type
  (:class:`missive.server.metrics.Metrics`);
* **never after the first byte of an answer**: the chain moves on only while
  a model's answer has not started (its ``message_start`` does not exist
  yet: ``_begin_chain`` in :mod:`missive.server.routes.messages`); once begun, an
  error ends the message. A stream whose model loads on demand sends
  ``ping`` events meanwhile; they carry nothing of an answer.

Which errors move on (429, 529 before the answer) is the API field's rule
(:data:`missive.routing.chain.TRIGGERS`); a model a request's key may not
use is never tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..protocol.schema.request import MessagesRequest

__all__ = ["with_model_chain"]


def with_model_chain(
    req: MessagesRequest, configured: Sequence[str | Mapping[str, Any]], enabled: bool
) -> MessagesRequest:
    """``req`` (a validated Messages request) asking for its model's
    ``configured`` chain when ``enabled``, it names no ``fallbacks`` and the
    chain is not empty; else ``req`` unchanged."""
    if not enabled or not configured or getattr(req, "fallbacks", None) is not None:
        return req
    return req.model_copy(update={"fallbacks": "default"})
