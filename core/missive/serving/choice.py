"""Which model answers a request: the choice the routes used to make.

One :class:`ModelChoice` per server, built with the model table and the
routing rules. For a request and the key's scope (``allowed``: the models
the request's API key may use, :meth:`missive.keys.ring.Identity.may_use`):

1. :meth:`ModelChoice.resolve`: the client's model id through the aliases
   to a configured model, refused as absent when the key may not use it
   (404 ``model: {id}``, issue 32: "as if absent");
2. :meth:`ModelChoice.route`: the first ``[[routing.rules]]`` rule that
   matches and whose target the key may use sends it there
   (:mod:`missive.routing.rules`); the rule's name is returned for the
   request's record;
3. :meth:`ModelChoice.chain`: for ``POST /v1/messages``, the model then
   each ``fallbacks`` entry the key may use (the model's configured chain
   for a request that names none, with ``routing.default_fallbacks``:
   :mod:`missive.routing.fallbacks`, :mod:`missive.routing.chain`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..models.table import ModelTable
from ..protocol.agents import NO_AGENT, Agent
from ..protocol.errors import ModelNotFoundError
from ..protocol.schema.request import MessagesRequest
from ..routing.chain import Attempt, attempts
from ..routing.fallbacks import with_model_chain
from ..routing.rules import RoutingRules

__all__ = ["ModelChoice", "Allowed"]

#: The key's scope: whether the request's API key may use a configured model.
Allowed = Callable[[str], bool]


class ModelChoice:
    """See the module doc.

    Args:
        models: the served models (aliases, entries, drivers).
        routing: ``[[routing.rules]]`` and ``default_fallbacks``.
    """

    def __init__(self, models: ModelTable, routing: RoutingRules) -> None:
        self.models = models
        self.routing = routing

    def resolve(self, requested: str, allowed: Allowed) -> str:
        """The configured model serving ``requested`` for a key that may use ``allowed``.

        Raises:
            ModelNotFoundError: 404, no served model matches, or the key may not use it.
        """
        model_id, _ = self.models.resolve(requested)
        if not allowed(model_id):
            raise ModelNotFoundError(requested)
        return model_id

    def route(self, req: Any, allowed: Allowed, agent: Agent = NO_AGENT) -> tuple[str, str | None]:
        """The model that answers ``req`` (sent by ``agent``: a Claude Code
        subagent, :mod:`missive.protocol.agents`) and the routing rule that
        chose it (None: no rule fired, the resolved model answers)."""
        model_id = self.resolve(req.model, allowed)
        rule = self.routing.route(req, allowed=allowed, agent=agent)
        if rule is None:
            return model_id, None
        return rule.to, rule.name

    def chain(self, req: MessagesRequest, model_id: str, allowed: Allowed) -> list[Attempt]:
        """``model_id``, then each fallback it may move on to (validated up front).

        Raises:
            InvalidRequestError: an entry naming no served model, or whose
                overrides make an invalid request.
        """
        req = with_model_chain(req, self.models.entries[model_id].fallbacks, self.routing.default_fallbacks)
        return attempts(req, model_id, self.models, lambda requested: self.resolve(requested, allowed))
