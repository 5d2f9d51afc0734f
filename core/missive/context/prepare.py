"""The order in which conversation management runs before a driver sees a request.

1. ``speed``, ``inference_geo`` and the workspace and user profile headers:
   reported as ignored where they ask for what Missive cannot do
   (:mod:`.routing`);
2. ``compaction`` blocks at the head of ``messages`` are checked and
   rendered as the summary (:func:`.compaction.expand_compaction`);
3. a compaction request (``compaction`` on ``POST /v1/messages``; ignored
   by ``count_tokens``, as the API does) becomes the summarisation request
   (:func:`.compaction.summarisation_request`);
4. ``context_management`` edits, measured with the driver's own token count
   (:func:`.editing.apply_edits`);
5. the core's preparation (validation against the driver, media, the
   conversation), given the edited request and the turns whose thinking the
   edits left out.

What the steps found for the response is kept in ``g.context_extras``
(:class:`.response.ContextExtras`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from quart import g, has_request_context, request

from ..driver import Driver, GenerationRequest
from ..errors import CapabilityError
from ..schema.request import CountTokensRequest, MessagesRequest
from ..thinking.signing import Signer
from .compaction import expand_compaction, summarisation_request
from .editing import apply_edits
from .response import ContextExtras
from .routing import ignored_routing

__all__ = ["BasePrepare", "prepare_in_context", "context_extras"]

#: The core's preparation: ``(request, model id, driver, message indices
#: whose thinking is left out) -> GenerationRequest``.
BasePrepare = Callable[[CountTokensRequest, str, Driver, frozenset[int]], Awaitable[GenerationRequest]]


@contextmanager
def _quiet() -> Iterator[None]:
    """A preparation made only to count tokens reports nothing: what it
    notes as ignored or dropped is noted again by the real one."""
    ignored, dropped = getattr(g, "ignored", None), getattr(g, "dropped_thinking", None)
    try:
        yield
    finally:
        for name, value in (("ignored", ignored), ("dropped_thinking", dropped)):
            if value is None:
                g.pop(name, None)
            else:
                setattr(g, name, value)


def context_extras() -> ContextExtras:
    """What the preparation of this request found (empty before it ran)."""
    extras = getattr(g, "context_extras", None)
    return extras if isinstance(extras, ContextExtras) else ContextExtras()


async def prepare_in_context(
    req: CountTokensRequest,
    model_id: str,
    driver: Driver,
    base: BasePrepare,
    *,
    signer: Signer,
    note_ignored: Callable[[list[str]], None],
) -> GenerationRequest:
    """Run the steps of the module doc and return the driver's request.

    Raises:
        CompactionError: a compaction block or request the API refuses.
        CapabilityError: edits that need token counts on a driver that
            cannot count.
        MissiveError: whatever the core's preparation raises.
    """
    headers = {k.lower(): v for k, v in request.headers.items()} if has_request_context() else {}
    note_ignored(ignored_routing(req, headers))
    extras = ContextExtras()
    g.context_extras = extras
    req = expand_compaction(req, signer)
    if isinstance(req, MessagesRequest) and req.compaction is not None:
        req = summarisation_request(req, can_choose="auto" in driver.capabilities.tool_choice)
        extras.compaction = True

    async def count(edited: CountTokensRequest, cleared: frozenset[int]) -> int:
        if driver.capabilities.count_tokens == "none":
            raise CapabilityError(
                capability="context_management edits", model=model_id, driver=driver.name,
                supported="no token counting (edits are measured in tokens)",
            )
        with _quiet():
            prepared = await base(edited, model_id, driver, cleared)
        return await driver.count_tokens(prepared)

    if req.context_management is not None:
        edited = await apply_edits(req, count)
        extras.applied_edits = edited.applied
        extras.original_tokens = edited.original_tokens
        return await base(edited.request, model_id, driver, edited.cleared_thinking)
    return await base(req, model_id, driver, frozenset())


def count_tokens_body(input_tokens: int, req: CountTokensRequest) -> dict[str, Any]:
    """The ``count_tokens`` answer: ``input_tokens`` after the edits, and
    with ``context_management``, the count before them
    (``BetaMessageTokensCount.context_management.original_input_tokens``)."""
    body: dict[str, Any] = {"input_tokens": input_tokens}
    if req.context_management is not None:
        original = context_extras().original_tokens
        body["context_management"] = {"original_input_tokens": input_tokens if original is None else original}
    return body
