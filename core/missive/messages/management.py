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

What the steps found for the response is returned with the driver's
request (:class:`.response.ContextExtras`); what they ignore goes into the
caller's :class:`~missive.messages.prepare.Notes`. Nothing here reads or
writes Quart's request context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..context_management.compaction import expand_compaction, summarisation_request
from ..context_management.editing import apply_edits
from ..driver.interface import Driver, GenerationRequest
from ..protocol.errors import CapabilityError
from ..protocol.schema.request import CountTokensRequest, MessagesRequest
from ..thinking.signing import Signer
from .extras import ContextExtras
from .placement import ignored_routing
from .prepare import Notes

__all__ = ["BasePrepare", "prepare_in_context", "count_tokens_body"]

#: The core's preparation (:func:`missive.messages.prepare.prepare_generation`):
#: ``(request, message indices whose thinking is left out, notes) -> GenerationRequest``.
BasePrepare = Callable[[CountTokensRequest, frozenset[int], Notes], Awaitable[GenerationRequest]]


async def prepare_in_context(
    req: CountTokensRequest,
    model_id: str,
    driver: Driver,
    base: BasePrepare,
    *,
    signer: Signer,
    notes: Notes,
    headers: Mapping[str, str],
) -> tuple[GenerationRequest, ContextExtras]:
    """Run the steps of the module doc: the driver's request and what the
    steps found for the response.

    Args:
        notes: receives what is ignored (a preparation made only to count
            tokens notes into a scratch copy: the real one notes it again).
        headers: the HTTP request's headers, names lowercased (empty for a
            batch request).

    Raises:
        CompactionError: a compaction block or request the API refuses.
        CapabilityError: edits that need token counts on a driver that
            cannot count.
        MissiveError: whatever the core's preparation raises.
    """
    notes.ignore(ignored_routing(req, headers))
    extras = ContextExtras()
    req = expand_compaction(req, signer)
    if isinstance(req, MessagesRequest) and req.compaction is not None:
        req = summarisation_request(req, can_choose="auto" in driver.capabilities.tool_choice)
        extras.compaction = True

    async def count(edited: CountTokensRequest, cleared: frozenset[int]) -> int:
        if driver.capabilities.count_tokens == "none":
            raise CapabilityError(
                capability="context_management edits",
                model=model_id,
                driver=driver.name,
                supported="no token counting (edits are measured in tokens)",
            )
        prepared = await base(edited, cleared, notes.scratch())
        return await driver.count_tokens(prepared)

    if req.context_management is not None:
        edited = await apply_edits(req, count)
        extras.applied_edits = edited.applied
        extras.original_tokens = edited.original_tokens
        return await base(edited.request, edited.cleared_thinking, notes), extras
    return await base(req, frozenset(), notes), extras


def count_tokens_body(input_tokens: int, req: CountTokensRequest, extras: ContextExtras) -> dict[str, Any]:
    """The ``count_tokens`` answer: ``input_tokens`` after the edits, and
    with ``context_management``, the count before them
    (``BetaMessageTokensCount.context_management.original_input_tokens``)."""
    body: dict[str, Any] = {"input_tokens": input_tokens}
    if req.context_management is not None:
        original = extras.original_tokens
        body["context_management"] = {"original_input_tokens": input_tokens if original is None else original}
    return body
