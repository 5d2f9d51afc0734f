"""The serving seam: one service that turns a validated request into an answer.

:class:`Messages` is used alike by ``POST /v1/messages`` and ``count_tokens``
(:mod:`missive.server.routes.messages`), by each request of a message batch
(:mod:`missive.batches.execute`), so that a request answers the same
whichever way it came:

1. :meth:`Messages.hold`: the model is held for the request (never unloaded
   while in use) and loaded if it is not;
2. :meth:`Messages.prepare` -> :class:`Prepared`: conversation management
   (:mod:`missive.messages.management`), then the core's checks and conversions
   (:mod:`.prepare`); the notes that become response headers are collected
   in the :class:`Caller`'s :class:`~.prepare.Notes`, never in Quart's ``g``;
3. :meth:`Messages.begin` -> :class:`~.answer.Answer`: the stream
   (:class:`~.stream.MessageStream`, wrapped for what conversation
   management adds) started and an admission permit taken, in the order the
   driver needs: a remote driver gets nothing while the request waits for
   its permit; an in-process driver renders and tokenizes the prompt first
   (a huge prompt never holds a permit a small request waits for, and an
   oversized one is refused without queueing), and starts no model work
   before its own permit. The answer owns both from then on.

:meth:`Messages.answer` runs 2-3 on the requested model, then on each
``fallbacks`` entry while the one before could not take the request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from ..config.keys import cache_scope_of
from ..default_plugins.aliases import alias_match
from ..driver.interface import Driver, GenerationRequest
from ..messages.extras import finish_stream
from ..messages.management import count_tokens_body, prepare_in_context
from ..messages.prepare import Notes, Target, prepare_generation
from ..messages.stream import MessageStream
from ..protocol.errors import CapabilityError
from ..protocol.ids import message_id
from ..protocol.schema.request import CountTokensRequest
from ..routing.chain import TRIGGERS, Attempt
from ..tools.mcp import McpOffer, with_mcp_tools
from .answer import Answer
from .prepared import Admit, Caller, Prepared

if TYPE_CHECKING:
    from ..media.pipeline import MediaPipeline
    from ..models.table import ModelTable
    from ..thinking.signing import Signer
    from ..tools.server_runner import ServerToolRunner
    from .admission import Admission, Permit
    from .record import RequestRecord

__all__ = ["Messages", "Caller", "Prepared", "Admit"]

log = logging.getLogger("missive.messages")


class Messages:
    """See the module doc.

    Args:
        models: the served models.
        admission: per-model slots and queues.
        signer: signs thinking and compaction blocks.
        media: the image and document pipeline.
        server_tools: runs ``web_search``/``web_fetch`` calls.
    """

    def __init__(
        self,
        *,
        models: ModelTable,
        admission: Admission,
        signer: Signer,
        media: MediaPipeline,
        server_tools: ServerToolRunner,
    ) -> None:
        self.models = models
        self.admission = admission
        self.signer = signer
        self.media = media
        self.server_tools = server_tools

    async def hold(self, model_id: str, record: RequestRecord) -> Driver:
        """Hold ``model_id`` for the request of ``record`` (given back when
        the record finishes) and wait until it is loaded; its driver."""
        record.at_finish(self.models.use(model_id).release)
        return await self.models.ensure_loaded(model_id)

    async def prepare(
        self,
        req: CountTokensRequest,
        model_id: str,
        driver: Driver,
        caller: Caller,
        *,
        fallback: bool = False,
    ) -> Prepared:
        """Everything the core checks and converts before ``driver`` sees ``req``.

        Raises:
            InvalidRequestError: tool history pairing, tool_choice naming an
                unknown tool, duplicate tool names, ignored parts in strict
                mode, compaction blocks the API refuses.
            CapabilityError: the driver lacks something the request needs.
            MediaError: an image or document block that cannot be used.
            PermissionDeniedError: an MCP server the caller's key may not use.
        """
        mcp = await self._mcp_offer(req, driver, caller)
        target = Target(
            model_id,
            driver.name,
            driver.capabilities,
            driver.entry.max_output_tokens,
            alias=req.model if alias_match(req.model, self.models.config) is not None else None,
            alias_thinking=driver.entry.alias_thinking,
        )

        async def base(
            edited: CountTokensRequest, cleared: frozenset[int], notes: Notes
        ) -> GenerationRequest:
            generation = await prepare_generation(
                with_mcp_tools(edited, mcp),
                target,
                request_id=caller.request_id,
                signer=self.signer,
                notes=notes,
                media=self.media,
                media_counts=caller.record.media,
                headers=caller.headers,
                server_tools=self.server_tools,
                cleared_thinking=cleared,
            )
            # The key's prompt-cache scope: no cache serves it another key's prompt.
            return replace(generation, cache_scope=cache_scope_of(self.models.config.keys, caller.record.key))

        generation, extras = await prepare_in_context(
            req, model_id, driver, base, signer=self.signer, notes=caller.notes, headers=caller.headers
        )
        if generation.output_schema is not None:  # what the driver's grammar leaves out (a 400 if strict)
            caller.notes.ignore(await anyio.to_thread.run_sync(driver.unenforced, generation))
        return Prepared(req, model_id, driver, generation, extras, caller, fallback, mcp.listings)

    async def _mcp_offer(self, req: CountTokensRequest, driver: Driver, caller: Caller) -> McpOffer:
        """The tools of the request's MCP servers, listed once per request
        (:mod:`missive.tools.mcp`); none, reported as ignored, when the
        connector is off or the model cannot call tools."""
        mcp = self.server_tools.mcp
        if not (req.mcp_servers or req.mcp_toolsets):
            return McpOffer()
        if not mcp.enabled or not driver.capabilities.tool_choice:
            caller.notes.ignore(mcp.ignored(req) or ["mcp_servers (this model cannot call tools)"])
            return McpOffer()
        return await mcp.offer(req, caller.record.key, {t.name for t in req.tools or []})

    async def begin(self, prepared: Prepared, *, admit: Admit | None = None) -> Answer:
        """Start the answer and take its permit (see the module doc).

        ``admit``: takes the permit (default: the model's gate, the time
        waited noted in the record; a batch takes a background slot).

        Raises:
            MissiveError: a refusal before anything is sent (529 queue full,
                prompt too long, backend down...).
        """
        driver, record = prepared.driver, prepared.caller.record
        if admit is None:
            admit = self._admit(prepared)
        req = prepared.request
        message = MessageStream(
            driver,
            prepared.generation,
            message_id=message_id(),
            model=req.model,
            signer=self.signer,
            server_tools=self.server_tools,
        )
        stream = finish_stream(
            message,
            prepared.extras,
            self.signer,
            fallback_model=req.model if prepared.fallback else None,
            leading=prepared.leading,
        )
        if driver.capabilities.in_process:
            first = await stream.start()
            try:
                permit = await admit()
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
                raise
        else:
            permit = await admit()  # before the backend is sent anything
            try:
                first = await stream.start()
            except BaseException:
                permit.release()
                raise
        record.note(first)
        return Answer(prepared, first, stream, permit, usage=message.usage)

    def _admit(self, prepared: Prepared) -> Admit:
        gate = self.admission.gate(prepared.model_id, prepared.driver)
        record = prepared.caller.record

        async def admit() -> Permit:
            queued_at = record.queued_at = time.monotonic()
            permit = await gate.admit()  # 529 when full; waits otherwise
            record.queue_seconds = time.monotonic() - queued_at
            return permit

        return admit

    async def answer(self, chain: list[Attempt], caller: Caller) -> Answer:
        """Hold, prepare and begin the requested model (``chain[0]``), then
        each ``fallbacks`` entry in turn while the one before could not take
        the request (429, 529: :data:`missive.routing.chain.TRIGGERS`);
        nothing has been sent then. The last model's error is the answer
        when every one fails.

        Raises:
            MissiveError: a refusal before anything is sent (400s, 529 queue full...).
        """
        record = caller.record
        for n, attempt in enumerate(chain):
            try:
                driver = await self.hold(attempt.model_id, record)
                record.model = attempt.model_id
                prepared = await self.prepare(
                    attempt.request, attempt.model_id, driver, caller, fallback=attempt.entry is not None
                )
                return await self.begin(prepared)
            except TRIGGERS as exc:
                if n + 1 == len(chain):
                    raise
                log.info(
                    "model %s cannot take the request (%s: %s); trying fallback %s",
                    attempt.model_id,
                    exc.error_type,
                    exc.message,
                    chain[n + 1].request.model,
                )
                # Named in the log line, counted in missive:fallbacks_total.
                record.fallbacks.append((attempt.model_id, chain[n + 1].model_id, exc.error_type))
        raise AssertionError("an empty fallback chain")  # attempts() always holds the requested model

    async def count_tokens(self, req: CountTokensRequest, model_id: str, caller: Caller) -> dict[str, Any]:
        """The ``count_tokens`` answer for ``req`` on ``model_id`` (no permit: it
        never waits behind generation).

        Raises:
            CapabilityError: the model's driver cannot count tokens.
            MissiveError: what :meth:`prepare` raises.
        """
        driver = await self.hold(model_id, caller.record)
        if driver.capabilities.count_tokens == "none":
            raise CapabilityError(
                capability="count_tokens", model=model_id, driver=driver.name, supported="messages only"
            )
        prepared = await self.prepare(req, model_id, driver, caller)
        tokens = await driver.count_tokens(prepared.generation)
        return count_tokens_body(tokens, req, prepared.extras)
