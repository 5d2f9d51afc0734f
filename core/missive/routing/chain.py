"""``fallbacks``: other models that answer when the requested one cannot.

The API (SDK 2.15 ``BetaFallbacksParam``/``BetaFallbackParam`` docstrings;
Anthropic docs, "Refusals and fallback", beta
``server-side-fallback-2026-07-01``): a list of entries tried in order after
the requested model, or ``"default"`` for the model's server-defined chain.
Each entry names a ``model`` and may override ``max_tokens``, ``thinking``,
``output_config`` and ``speed`` for its attempt ("any other key is rejected
at parse time"); each attempt is "validated as if the request were made to
``model``". Overrides: a key left out takes the request's value (for
``thinking``, only when the model supports that type; a ``between_tools``
request becomes ``disabled`` on a model without it; else the model's
default, no thinking); a key set to ``null`` takes the model's default;
``output_config`` is combined with the request's one field at a time. The
request's ``thinking.display`` still applies. A response served by a
fallback carries a ``fallback_message`` entry in ``usage.iterations`` (the
API's signal of which model answered) and the model's id as ``model``.

When an entry is taken. The API falls back when the requested model
*declines* (a refusal); local models do not refuse for policy, so Missive
maps the decline onto what makes one of its models unable to take a request:
the model is overloaded or rate limited before it starts answering (529
``overloaded_error``: its wait queue is full, a request waited
``queue_timeout``, a remote backend is unreachable or busy; 429
``rate_limit_error`` from a backend). Every other error is the client's or
the model's and is returned as it is, and nothing is retried once an
answer has started (``message_start`` sent): a stream never changes model
midway. Defaults per model: ``models.NAME.fallbacks`` in the configuration,
used for ``"default"``; a model without one answers ``"default"`` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..driver.capabilities import Capabilities
from ..protocol.errors import InvalidRequestError, ModelNotFoundError, OverloadedError, RateLimitError
from ..protocol.schema.management import FallbackEntry
from ..protocol.schema.request import MessagesRequest
from ..protocol.validation import validate_body

if TYPE_CHECKING:
    from ..models.table import ModelTable

__all__ = ["Attempt", "attempts", "TRIGGERS", "iteration"]

#: Errors raised before an answer starts that send the request to the next model.
TRIGGERS = (OverloadedError, RateLimitError)


@dataclass(frozen=True)
class Attempt:
    """One model to try: the request as that model gets it, its configured
    id, and the entry it comes from (None: the requested model)."""

    request: MessagesRequest
    model_id: str
    entry: FallbackEntry | None = None


def _chain(req: MessagesRequest, model_id: str, models: ModelTable) -> list[FallbackEntry]:
    if req.fallbacks is None:
        return []
    if req.fallbacks == "default":
        configured = models.entries[model_id].fallbacks
        try:
            return [
                FallbackEntry.model_validate({"model": e} if isinstance(e, str) else e) for e in configured
            ]
        except ValidationError as exc:
            raise InvalidRequestError(
                f"models.{model_id}.fallbacks is not valid: {exc.errors()[0]['msg']}"
            ) from None
    return list(req.fallbacks)


def _supports(kind: str, caps: Capabilities) -> bool:
    """Whether a model with ``caps`` takes ``thinking.type`` ``kind``
    (Missive answers ``adaptive`` and ``disabled`` for every model)."""
    if kind == "enabled":
        return caps.thinking
    if kind == "between_tools":
        return bool(caps.tool_choice)
    return True


def _thinking(req: MessagesRequest, entry: FallbackEntry, caps: Capabilities) -> dict[str, Any] | None:
    display = req.thinking.display if req.thinking is not None else None
    if "thinking" in entry.model_fields_set:
        chosen = dict(entry.thinking) if entry.thinking is not None else None
    elif req.thinking is None:
        chosen = None
    elif _supports(req.thinking.type, caps):
        chosen = req.thinking.model_dump(exclude_unset=True)
    elif req.thinking.type == "between_tools":
        chosen = {"type": "disabled"}
    else:
        chosen = None  # the model's default: no thinking
    if chosen is not None and display is not None and "display" not in chosen:
        chosen["display"] = display
    return chosen


def _output_config(req: MessagesRequest, entry: FallbackEntry) -> dict[str, Any] | None:
    base = req.output_config.model_dump(by_alias=True, exclude_unset=True) if req.output_config else {}
    if "output_config" not in entry.model_fields_set:
        return base or None
    if entry.output_config is None:
        return None
    combined = dict(base)
    for key, value in entry.output_config.items():
        if value is None:
            combined.pop(key, None)
        else:
            combined[key] = value
    return combined or None


#: The configured model id serving a model string for this request's API
#: key (unknown, or not the key's to use: :class:`ModelNotFoundError`).
Resolve = Callable[[str], str]


def _attempt(
    req: MessagesRequest, i: int, entry: FallbackEntry, models: ModelTable, resolve: Resolve
) -> Attempt:
    try:
        model_id = resolve(entry.model)  # a key never reaches a model it may not use
    except ModelNotFoundError:
        raise InvalidRequestError(f"fallbacks.{i}.model: no model '{entry.model}' is served here") from None
    driver = models.drivers[model_id]
    body = req.model_dump(by_alias=True, exclude_unset=True)
    body.pop("fallbacks", None)
    body["model"] = entry.model
    if entry.max_tokens is not None:
        body["max_tokens"] = entry.max_tokens
    for key, value in (
        ("thinking", _thinking(req, entry, driver.capabilities)),
        ("output_config", _output_config(req, entry)),
    ):
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    try:
        request = validate_body(type(req), body)  # a front door's variant stays itself
    except InvalidRequestError as exc:
        raise InvalidRequestError(f"fallbacks.{i}: {exc.message}") from None
    return Attempt(request, model_id, entry)


def attempts(req: MessagesRequest, model_id: str, models: ModelTable, resolve: Resolve) -> list[Attempt]:
    """The requested model, then each fallback entry as its own request
    (all built and validated up front: a bad entry is a 400 before anything
    runs). ``resolve`` maps an entry's model to the configured id for the
    request's key (:func:`missive.server.routes.common.resolve_for`), so an entry
    naming a model the key may not use is refused like an unknown one.

    Raises:
        InvalidRequestError: an entry naming no served model, or whose
            overrides make an invalid request.
    """
    chain = _chain(req, model_id, models)
    return [Attempt(req, model_id), *(_attempt(req, i, e, models, resolve) for i, e in enumerate(chain))]


def iteration(model: str, usage: dict[str, Any]) -> dict[str, Any]:
    """The ``usage.iterations`` entry of an answer served by fallback ``model``
    (``BetaFallbackMessageIterationUsage``)."""
    keys: Sequence[str] = (
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    )
    return {"type": "fallback_message", "model": model, **{k: usage.get(k, 0) for k in keys}}
