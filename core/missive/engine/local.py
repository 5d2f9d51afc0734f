"""The base of in-process drivers: :class:`LocalDriver`, the Driver API on a runner.

A plugin subclasses :class:`LocalDriver` with a :class:`~missive.engine.runner.Runner`
for its backend; the base implements :meth:`~missive.driver.interface.Driver.start`,
:meth:`~missive.driver.interface.Driver.count_tokens`, :meth:`~missive.driver.interface.Driver.generate`
and :meth:`~missive.driver.interface.Driver.aclose` the same way for every backend,
as the package docstring (:mod:`missive.engine`) lists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
from jinja2 import TemplateError

from ..chat_template.rendering import compile_template
from ..config import ConfigError, ModelEntry
from ..driver.capabilities import Capabilities
from ..driver.events import Finished, GenerationEvent, Started, StopReason, TextDelta
from ..driver.interface import Driver, GenerationRequest, fit_prompt
from ..driver.parsing import ReasoningParser, ToolParser
from ..protocol.errors import ApiError
from ..reasoning.registry import reasoning_parser_class, reasoning_parser_for_template
from ..sampling import NO_DEFAULTS
from ..tools.parsers.registry import build_parser
from ..tools.parsers.selection import parser_for_template
from .batcher import Batcher
from .budget import ThinkingBudget, refuse_under_constraint
from .disk_cache import DiskPromptCache
from .disk_tier import close_tier, open_disk_tier, restore_slots, tier_report
from .host_cache import HostPromptCache, batcher_hooks, default_cache_bytes, swap_in
from .host_cache import reusable as host_reusable
from .producer import Producer
from .prompt import PromptPath
from .report import engine_choices, engine_status, speculation_counts
from .runner import ContextStates, ModelInfo, Prompt, Runner, Sampling, Sequence
from .scheduler import Scheduler

__all__ = ["LocalDriver"]

#: Seconds :meth:`LocalDriver.aclose` waits for running generations.
CLOSE_TIMEOUT = 30
#: What a driver sharing another's load takes from it (:meth:`LocalDriver.share_engine`).
_ENGINE = (
    "runner _host_cache _disk _tool_parser_setting _reasoning_setting _info _template _reasoning _prompts "
    "_scheduler _batcher _limiter _executor"
).split()


@dataclass
class _Prepared:
    prompt: Prompt
    reusable: int
    opened: str
    sampling: Sampling
    budget: ThinkingBudget | None


class LocalDriver(Driver):
    """A driver serving one model in-process through a runner.

    Args:
        model_id, entry, capabilities: as :class:`~missive.driver.interface.Driver`.
        runner: the backend's runner for this model (not loaded yet).
        tool_parser: the ``tool_parser`` setting (None: from the template).
        reasoning_parser: the ``reasoning_parser`` setting (None: from the
            template; ``"none"``: the model does not reason).

    Subclasses set :attr:`name` and may override :meth:`constraint` (with
    :attr:`constrains_output`).
    """

    #: True when :meth:`constraint` can make the whole reply a tool call or a
    #: JSON value (forced ``tool_choice``, ``output_config.format``): such a
    #: prompt is rendered with reasoning switched off, and tool parsers are
    #: built constrained.
    constrains_output: bool = False
    #: The variant of the runner's model this driver's prompts run through
    #: (:attr:`~missive.engine.runner.Prompt.variant`); None: the model as loaded.
    variant: Hashable | None = None
    _owner: LocalDriver | None = None  # the driver whose engine this one shares

    def __init__(
        self,
        model_id: str,
        entry: ModelEntry,
        capabilities: Capabilities,
        runner: Runner,
        *,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        host_cache_bytes: int | None = None,
        disk_cache_bytes: int | None = None,
    ) -> None:
        super().__init__(model_id, entry, capabilities)
        self.runner = runner
        # Prompts that leave the context are kept in RAM (runners that can
        # save their context): None sizes it from the machine, 0 turns it off.
        if host_cache_bytes is None:
            host_cache_bytes = default_cache_bytes()
        self._host_cache = (
            HostPromptCache(host_cache_bytes)
            if host_cache_bytes > 0 and isinstance(runner, ContextStates)
            else None
        )
        self.log = logging.getLogger(f"missive.{self.name}")
        # Their disk tier (opened once loaded: its folder depends on the
        # runner's state key): None sizes it from the free disk, 0 turns it off.
        self._disk_cache_bytes = disk_cache_bytes
        self._disk: DiskPromptCache | None = None
        self._tool_parser_setting = tool_parser
        self._reasoning_setting = reasoning_parser
        self._info: ModelInfo | None = None
        self._template = ""
        self._reasoning: str | None = None  # reasoning parser name, from the template
        self._prompts: PromptPath | None = None
        # Created in start(), inside the event loop that will use them.
        self._scheduler: Scheduler | None = None
        self._batcher: Batcher | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        # One thread per model runs everything that touches it.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-{model_id}")

    # -- lifecycle ---------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        """Tokens of context (prompt + output) of the loaded model; before
        :meth:`start`, the configured value."""
        return self._info.context_window if self._info is not None else self.entry.context_window

    async def start(self) -> None:
        """Load the model in its thread, compile its chat template, find its
        reasoning format (which narrows ``capabilities.thinking``).

        Raises:
            ConfigError: from the runner's ``load``, or a template that does
                not compile.
        """
        self._limiter = anyio.CapacityLimiter(self.runner.tokenize_threads)
        loop = asyncio.get_running_loop()
        info = await loop.run_in_executor(self._executor, self.runner.load)
        if self._host_cache is not None:
            self._disk = open_disk_tier(self.runner, self._host_cache, self._disk_cache_bytes, self.model_id)
        if self._disk is not None:
            await loop.run_in_executor(
                self._executor, restore_slots, self.runner, self._disk, info, self.model_id
            )
        try:
            self._configure(info)
        except BaseException:
            await loop.run_in_executor(self._executor, self.runner.close)
            raise

    def share_engine(self, base: LocalDriver) -> None:
        """Serve through ``base``'s loaded engine from now on (its runner,
        slots, caches, scheduler and model thread; prompts tagged with
        :attr:`variant`); :meth:`aclose` then only lets go of it."""
        for name in _ENGINE:
            setattr(self, name, getattr(base, name))
        self.capabilities, self._owner = base.capabilities, base

    def _configure(self, info: ModelInfo) -> None:
        try:
            compile_template(info.chat_template)
        except TemplateError as exc:
            raise ConfigError(f"model '{self.model_id}': the chat template does not compile: {exc}") from exc
        self._template = info.chat_template
        self._reasoning = reasoning_parser_for_template(
            info.chat_template, self.reasoning_parser_specs, self._reasoning_setting
        )
        # Thinking blocks only for a model whose output has a reasoning format.
        # As many generations at once as the runner has slots (the core's
        # admission and the engine's scheduler both read it).
        update: dict[str, Any] = {"thinking": self._reasoning is not None, "max_concurrency": info.slots}
        if info.input_media:
            update["input_media"] = info.input_media
        self.capabilities = self.capabilities.model_copy(update=update)
        self._prompts = PromptPath(self.runner, info, self._reasoning_class)
        self._batcher = Batcher(
            self.runner,
            self._executor,
            info.slots,
            **batcher_hooks(self.runner, self._host_cache, shared_pool=info.pool_tokens > 0),
        )
        self._scheduler = Scheduler(info.slots)
        self._info = info

    def _reasoning_class(self) -> type[ReasoningParser] | None:
        """The model's reasoning parser class, None for a model that does not reason."""
        if self._reasoning is None:
            return None
        return reasoning_parser_class(self.reasoning_parser_specs, self._reasoning)

    async def aclose(self) -> None:
        """Free the model once running generations have stopped (waits at
        most 30 s, else leaves it to the garbage collector)."""
        info, self._info = self._info, None
        if info is None or self._scheduler is None or self._owner is not None:
            return  # not loaded, or another driver's engine (that driver frees it)
        if not await self._scheduler.drain(CLOSE_TIMEOUT):
            self.log.warning("model %s still generating at shutdown; not freed explicitly", self.model_id)
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close_model, info.slots)
        finally:
            self._scheduler.release_all()
            self._executor.shutdown(wait=False)

    def _close_model(self, slots: int) -> None:
        """Spill the slots' states to the disk tier, write them, free the model (model thread)."""
        disk, self._disk = self._disk, None
        try:
            close_tier(self.runner, self._host_cache, disk, slots)
        finally:
            self.runner.close()

    def prompt_cache_disk(self) -> dict[str, int]:
        """The disk tier's counters, bytes and files (``{}`` without one)."""
        return tier_report(self._disk)

    async def status(self) -> dict[str, Any]:
        """What :func:`~missive.engine.report.engine_status` reports."""
        return engine_status(self.runner, self._info, self._batcher, self._host_cache)

    def counters(self) -> dict[str, int]:
        """Draft tokens verified and accepted, for a :class:`~missive.engine.runner.Speculative` runner."""
        return speculation_counts(self.runner)

    def choices(self) -> dict[str, Any]:
        """What :func:`~missive.engine.report.engine_choices` reports of the loaded model."""
        if self._info is None:
            return {}
        tool_format = parser_for_template(self._template, self.tool_parser_specs, self._tool_parser_setting)
        return engine_choices(self._info, self._template, tool_format, self._reasoning)

    def _loaded(self) -> PromptPath:
        if self._info is None or self._prompts is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self._prompts

    # -- parsers and constraints -------------------------------------------

    def _constrained(self, request: GenerationRequest) -> bool:
        """Whether a constraint makes the whole reply a call or a JSON value
        (forced tool choice or structured output), leaving no room for reasoning."""
        if not self.constrains_output:
            return False
        forced = bool(request.tools) and request.tool_choice.mode in ("any", "tool")
        return forced or request.output_schema is not None

    def _refuse_budget_under_constraint(self, request: GenerationRequest) -> None:
        """:func:`~missive.engine.budget.refuse_under_constraint` for this model."""
        refuse_under_constraint(request, self._reasoning is not None, self.model_id, self.name)

    def tool_parser(self, request: GenerationRequest) -> ToolParser | None:
        """The parser of the model's tool call format: the ``tool_parser``
        setting, else the chat template's, else Hermes."""
        name = parser_for_template(self._template, self.tool_parser_specs, self._tool_parser_setting)
        constrained = self.constrains_output and request.tool_choice.mode in ("any", "tool")
        return build_parser(self.tool_parser_specs, name, request.tools, constrained=constrained)

    def reasoning_parser(self, request: GenerationRequest) -> ReasoningParser | None:
        """The model's reasoning parser (``reasoning_parser`` setting, else chosen
        from the chat template), or None for a model that does not reason
        (or a constrained reply, which holds no reasoning)."""
        cls = self._reasoning_class()
        if cls is None or self._constrained(request):
            return None
        return cls()

    def constraint(self, request: GenerationRequest) -> Any:
        """A backend object constraining the reply (a grammar), or None.
        Runs in a tokenizing thread.

        Raises:
            InvalidRequestError: the request's constraint cannot be enforced.
        """
        return None

    # -- prompt ------------------------------------------------------------

    def _tokenize(self, request: GenerationRequest) -> Prompt:
        """The request's prompt (:mod:`missive.engine.prompt`): the one path
        of :meth:`count_tokens` and :meth:`generate`. Tokenizing thread.

        Raises:
            InvalidRequestError: the template rejected the conversation, or an
                image cannot be used.
            ApiError: the template failed, or the backend could not tokenize.
        """
        return self._loaded().tokenize(request, constrained=self._constrained(request))

    def _prepare(self, request: GenerationRequest) -> _Prepared:
        """The prompt, the prefix the runner's cache would serve now, the
        reasoning tag the prompt leaves open, sampling and the thinking budget.
        Tokenizing thread."""
        prompts = self._loaded()
        constrained = self._constrained(request)
        pieces, marks = prompts.render(request, constrained=constrained)
        prompt = self.runner.tokenize(pieces, marks)
        if self.variant is not None or request.cache_scope is not None:  # the key's scope: no other's cache
            prompt = prompt.with_variant(self.variant).with_scope(request.cache_scope)
        try:
            opened = "" if constrained else prompts.opened(pieces)
            reusable = host_reusable(self.runner, self._host_cache, prompt)
            sampling = self._sampling(request)
            return _Prepared(prompt, reusable, opened, sampling, self._budget(request, opened))
        except BaseException:
            prompt.close()
            raise

    def _sampling(self, request: GenerationRequest) -> Sampling:
        """The request's sampling: its own values, the model's defaults
        (:attr:`ModelInfo.sampling`, the thinking-mode ones when the request
        thinks) for what it leaves unset, and the constraint."""
        info = self._info
        defaults = info.sampling if info is not None else NO_DEFAULTS
        thinking = request.thinking.requested and self._reasoning is not None
        values = defaults.resolve(request.temperature, request.top_p, request.top_k, thinking=thinking)
        return Sampling(
            values.temperature, values.top_p, values.top_k, self.constraint(request), values.min_p
        )

    def _budget(self, request: GenerationRequest, opened: str) -> ThinkingBudget | None:
        """How to end reasoning once ``thinking.budget_tokens`` are spent, or
        None (no budget, or a format without a closing text)."""
        budget = request.thinking.budget_tokens
        cls = self._reasoning_class() if budget is not None else None
        if budget is None or cls is None:
            return None
        close = cls.close_text()
        if not close:
            return None
        return ThinkingBudget(cls(), opened, budget, self.runner.encode_special(close))

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Prompt tokens, equal to ``input_tokens + cache_read_input_tokens`` of
        :meth:`generate`'s ``Started``. Never waits behind a generation."""
        self._loaded()
        prompt = await anyio.to_thread.run_sync(self._tokenize, request, limiter=self._limiter)
        prompt.close()
        return len(prompt.tokens)

    # -- generation --------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Events of one answer (see the module documentation for the rules).

        Raises:
            PromptTooLongError: before ``Started``.
            ApiError: the backend failed (before or after ``Started``).
        """
        self._loaded()
        prepared = await anyio.to_thread.run_sync(self._prepare, request, limiter=self._limiter)
        events = self._generate(request, prepared)
        try:
            async for event in events:
                yield event
        finally:
            # _generate's own cleanup waits for the model's thread; only then
            # may the prompt's media it decodes from be freed.
            with anyio.CancelScope(shield=True):
                await events.aclose()
            prepared.prompt.close()

    async def _generate(
        self, request: GenerationRequest, prepared: _Prepared
    ) -> AsyncGenerator[GenerationEvent, None]:
        info = self._info
        if info is None or self._scheduler is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        tokens = prepared.prompt.tokens
        context = info.context_window
        max_new = fit_prompt(request.max_tokens, len(tokens), context)
        yield Started(input_tokens=len(tokens) - prepared.reusable, cache_read_input_tokens=prepared.reusable)
        if prepared.opened:
            # The template opened the reasoning tag: the output starts inside it.
            yield TextDelta(prepared.opened, tokens=0)

        assert self._batcher is not None
        async with self._scheduler.permit():
            seq = Sequence(
                prepared.prompt, max_new, prepared.sampling, cancelled=lambda: False, session=request.session
            )
            cache, runner, batcher = self._host_cache, self.runner, self._batcher
            setup = None
            if cache is not None and isinstance(runner, ContextStates):

                def setup(slot: int) -> int:  # runs in the model's thread
                    return swap_in(
                        runner, cache, prepared.prompt, slot, request.session, batcher.slot_session(slot)
                    )

            producer = Producer(self.runner, seq, prepared.budget, setup)
            self._batcher.submit(producer)
            try:
                produced = pending = 0
                while True:
                    pieces, ended = await producer.next_batch()
                    produced += len(pieces)
                    # Stop sequences: a token a delta, counted up to the one completing a match (not batching)
                    for text in pieces if request.stop_sequences else ["".join(pieces)]:
                        pending += 1 if request.stop_sequences else len(pieces)
                        if text:
                            yield TextDelta(text, tokens=pending)
                            pending = 0
                    if ended:
                        break
                if producer.tail:
                    yield TextDelta(producer.tail, tokens=pending)
                if self.log.isEnabledFor(logging.DEBUG):
                    self.log.debug(
                        "%s: slot %d, %d prompt tokens, %d reused (reported %d), %d generated, max_new=%d/%d",
                        request.request_id,
                        seq.slot,
                        len(tokens),
                        seq.reused,
                        prepared.reusable,
                        produced,
                        max_new,
                        request.max_tokens,
                    )
                stop_reason: StopReason = "end_turn" if producer.reached_eog else "max_tokens"
                if seq.reused != prepared.reusable:
                    # Another request changed the cache while this one waited,
                    # or it got another slot: the exact split, in message_delta.
                    yield Finished(
                        stop_reason,
                        output_tokens=produced,
                        input_tokens=len(tokens) - seq.reused,
                        cache_read_input_tokens=seq.reused,
                    )
                else:
                    yield Finished(stop_reason, output_tokens=produced)
            finally:
                producer.cancel()
                with anyio.CancelScope(shield=True):
                    await producer.wait_closed()  # the slot is free, the prompt's media no longer read
