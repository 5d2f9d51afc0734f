"""From a validated Messages request to the driver's :class:`~missive.driver.interface.GenerationRequest`.

One builder for every caller: ``POST /v1/messages`` and ``count_tokens``,
each request of a message batch (:mod:`missive.batches.execute`) and the test
kit's :func:`missive.testing.generation_request`. It reads nothing from
Quart: who asks is a :class:`Caller`, and what the response reports back
(the ``missive-ignored`` and ``missive-dropped-thinking`` headers) is
collected in its :class:`Notes`.

The steps, in order (the order is part of the behaviour: the first problem
found is the error):

1. tools offered (server tools only to a model that can call tools, unless
   ``tool_choice`` forces one), the history's ``tool_addition`` and
   ``tool_removal`` blocks applied (:mod:`missive.tools.changes`),
   ``tool_choice`` checked against the result, the tool history's pairing
   checked (:mod:`missive.tools`);
2. a forced call of a server tool the driver cannot force is made by the
   server first (:func:`missive.tools.server_runner.server_first`);
3. thinking a model cannot do, asked through an alias, answered without
   it (:mod:`missive.thinking.through_alias`); then
   :func:`~missive.messages.capabilities.check_request` against the driver's
   capabilities; ``output_config.effort`` for a model that does not reason
   reported (:mod:`missive.thinking.effort`);
4. replayed thinking checked against its signature (:mod:`missive.thinking.replay`),
   the conversation built (:mod:`.conversation`), deferred tools' references
   expanded, the thinking plan made;
5. ``max_tokens`` capped at the model's ``max_output_tokens``;
6. image and document blocks processed by the media pipeline (the only
   step that awaits: :func:`prepare_generation`).

Conversation management (compaction, context editing) runs before these
steps and may run them more than once to measure the prompt
(:func:`missive.messages.management.prepare_in_context`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config.schema import AliasThinking
from ..driver.capabilities import Capabilities
from ..driver.interface import GenerationRequest
from ..driver.thinking import plan_thinking
from ..protocol.errors import InvalidRequestError
from ..protocol.schema.request import CountTokensRequest
from ..thinking.between_tools import as_text as between_tools_text
from ..thinking.effort import unreasoned_effort
from ..thinking.replay import answer_position, check_replayed_thinking
from ..thinking.signing import Signer
from ..thinking.through_alias import fit_thinking
from ..tools.changes import apply_tool_changes, check_forced_choice
from ..tools.deferred import expand_references
from ..tools.definitions import offered_tools, tool_choice_of
from ..tools.history import check_tool_history
from ..tools.server import server_block_paths
from ..tools.server_runner import ServerToolRunner, server_first
from .capabilities import check_request
from .conversation import build_conversation, unrendered_media
from .session import session_of

if TYPE_CHECKING:
    from ..media.pipeline import MediaPipeline

__all__ = ["Notes", "Target", "build_generation", "prepare_generation"]

log = logging.getLogger("missive.request")


@dataclass
class Notes:
    """What preparing a request found that its response reports in headers.

    Attributes:
        strict: ``server.strict``: an ignored part is a 400, not a note.
        ignored: request parts not used (``missive-ignored``).
        dropped_thinking: replayed thinking left out of the prompt
            (``missive-dropped-thinking``).
    """

    strict: bool = False
    ignored: list[str] = field(default_factory=list)
    dropped_thinking: list[str] = field(default_factory=list)

    def ignore(self, paths: list[str]) -> None:
        """Note request parts that are not used (logged).

        Raises:
            InvalidRequestError: strict mode.
        """
        if not paths:
            return
        if self.strict:
            raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(paths))
        log.info("ignored: %s", ", ".join(paths))
        self.ignored.extend(paths)

    def scratch(self) -> Notes:
        """Empty notes with the same policy, for a preparation made only to
        count tokens: the real one notes the same things again."""
        return Notes(strict=self.strict)


@dataclass(frozen=True)
class Target:
    """The model a request is prepared for, as far as the preparation needs it.

    Attributes:
        model_id: the configured model id.
        driver: the driver's name (in capability errors).
        capabilities: what the driver can do.
        max_output_tokens: the model's output cap (None: none).
        alias: the client's model id when it matched one of the models'
            ``aliases`` (None: it named a configured model).
        alias_thinking: the model's ``alias_thinking``
            (:mod:`missive.thinking.through_alias`).
    """

    model_id: str
    driver: str
    capabilities: Capabilities
    max_output_tokens: int | None = None
    alias: str | None = None
    alias_thinking: AliasThinking = "drop"


def build_generation(
    req: CountTokensRequest,
    target: Target,
    *,
    request_id: str,
    signer: Signer,
    notes: Notes,
    headers: Mapping[str, str] | None = None,
    server_tools: ServerToolRunner | None = None,
    image_fallback: bool = False,
    cleared_thinking: frozenset[int] = frozenset(),
) -> GenerationRequest:
    """Steps 1-5 of the module doc: the driver's request, its image and
    document blocks not processed yet (:func:`prepare_generation` does).

    Args:
        request_id: ``req_...``, for the driver's logs.
        notes: receives what is ignored and what thinking is dropped.
        headers: the HTTP request's headers, names lowercased (None for a
            batch request): the session id.
        server_tools: runs ``web_search``/``web_fetch`` (None: no call is
            made by the server first).
        image_fallback: ``media.image_fallback`` is set (images become text
            for a text-only model).
        cleared_thinking: messages whose thinking context editing left out.

    Raises:
        InvalidRequestError: tool history pairing, tool_choice naming an
            unknown tool, duplicate tool names, ignored parts in strict mode.
        CapabilityError: the driver lacks something the request needs.
    """
    caps = target.capabilities
    # A model that cannot call tools is not offered server tools (reported as
    # ignored), unless tool_choice forces a call: check_request refuses that.
    can_call = bool(caps.tool_choice)
    forced = req.tool_choice is not None and req.tool_choice.type in ("any", "tool")
    tools, skipped = offered_tools(req, server_tools=can_call or forced)
    changes = apply_tool_changes(req, tools, server_tools=can_call or forced)
    check_forced_choice(req, changes)
    tools = changes.offered
    choice = tool_choice_of(req, tools)
    check_tool_history(req)
    notes.ignore(skipped if can_call else [*skipped, *server_block_paths(req)])
    server_call, tools, choice = server_first(req, caps, tools, choice, server_tools)
    req, dropped = fit_thinking(
        req, caps, model=target.model_id, alias=target.alias, policy=target.alias_thinking
    )
    notes.ignore(dropped)
    check_request(
        req,
        caps,
        model=target.model_id,
        driver=target.driver,
        tools=tools,
        tool_choice=choice,
        image_fallback=image_fallback,
    )
    notes.ignore(unreasoned_effort(req, caps, model=target.model_id))
    replay = check_replayed_thinking(req.messages, signer)
    if replay.dropped:
        log.info("thinking left out of the prompt: %s", ", ".join(replay.dropped))
        notes.dropped_thinking = list(replay.dropped)
    kept = {at: text for at, text in replay.kept.items() if at[0] not in cleared_thinking}
    conversation = build_conversation(req, kept, server_tools=can_call, tool_changes=changes.texts)
    expand_references(conversation, tools)
    thinking = plan_thinking(req.thinking, req.output_config)
    if thinking.between_tools:
        between_tools_text(conversation)  # replayed progress updates are text the model wrote
    notes.ignore(unrendered_media(req))
    if conversation.prefill is not None and req.messages[-1].role == "assistant":
        # The answer continues the prefill's text; reasoning before it is not rendered.
        last = len(req.messages) - 1
        before_prefill = [
            f"messages.{m}.content.{b} (thinking before a prefill)" for m, b in replay.kept if m == last
        ]
        notes.dropped_thinking.extend(sorted(before_prefill))
    max_tokens = req.max_tokens or 0
    if target.max_output_tokens is not None:
        max_tokens = min(
            max_tokens, target.max_output_tokens
        )  # clamped like the context: ends with max_tokens
    return GenerationRequest(
        request_id=request_id,
        model=target.model_id,
        conversation=conversation,
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        stop_sequences=tuple(req.stop_sequences or ()),
        request=req,
        tools=tools,
        tool_choice=choice,
        thinking=thinking,
        thinking_position=answer_position(req.messages),
        server_call=server_call,
        session=session_of(req, headers),
        output_schema=req.output_format_schema(),
        listed_tools=changes.listed,
    )


async def prepare_generation(
    req: CountTokensRequest,
    target: Target,
    *,
    request_id: str,
    signer: Signer,
    notes: Notes,
    media: MediaPipeline,
    media_counts: Counter[str] | None = None,
    headers: Mapping[str, str] | None = None,
    server_tools: ServerToolRunner | None = None,
    cleared_thinking: frozenset[int] = frozenset(),
) -> GenerationRequest:
    """:func:`build_generation`, then step 6: the image and document blocks
    processed by ``media`` (what it processed is counted in
    ``media_counts``, the request record's).

    Raises:
        InvalidRequestError, CapabilityError: see :func:`build_generation`.
        MediaError: an image or document block that cannot be used.
    """
    generation = build_generation(
        req,
        target,
        request_id=request_id,
        signer=signer,
        notes=notes,
        headers=headers,
        server_tools=server_tools,
        image_fallback=media.image_fallback is not None,
        cleared_thinking=cleared_thinking,
    )
    if req.media_types():
        caps = target.capabilities
        processed = await media.prepare(
            req, input_media=caps.input_media, max_edge=caps.image_max_edge, model=target.model_id
        )
        notes.ignore(processed.ignored)
        generation.conversation.replace_blocks(processed.replacements)
        if media_counts is not None:
            media_counts.update(processed.processed)
    return generation
