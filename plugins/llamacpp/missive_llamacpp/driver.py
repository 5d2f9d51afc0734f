"""The ``llamacpp`` driver: a GGUF model in-process through llama-cpp-python.

One :class:`llama_cpp.Llama` per configured model, one generation at a time
(``max_concurrency=1``), queued fairly (FIFO) behind a per-model semaphore.
A semaphore of 1 rather than ``anyio.Lock``: a lock must be released by the
task that took it, but an async generator left unclosed is finalized by
asyncio in another task; the lock would then stay held and the model hang.

Prompt: ``conversation.chat_messages()`` rendered by
:func:`missive.templating.render_prompt` with the model's chat template
(``settings.chat_template`` or GGUF ``tokenizer.chat_template``), then tokenized
with special tokens parsed. BOS is added when the vocabulary asks for it
(``llama_vocab_get_add_bos``) unless the rendered text already starts with the
BOS text, as llama.cpp's ``common_chat_templates_apply`` does (strip the
template's BOS, let the tokenizer add it): never two BOS, never none.
:meth:`LlamaCppDriver.count_tokens` and :meth:`LlamaCppDriver.generate` share
:meth:`LlamaCppDriver._tokenize`, so the counts are equal by construction.

Generation, in :meth:`LlamaCppDriver.generate`:

1. render + tokenize in a worker thread (not behind the generation queue);
   ``len(prompt) >= n_ctx`` raises :class:`~missive.errors.PromptTooLongError`
   (``prompt is too long: N tokens > M maximum``, contract section 5): a prompt
   filling the whole context leaves no room for a single output token;
2. ``max_tokens`` is clamped to ``n_ctx - len(prompt)`` (contract section 5:
   clamping preferred to a 400); hitting the clamp ends with ``max_tokens``;
3. :class:`~missive.events.Started` is yielded at once, before queueing, with
   the KV-cache prefix ``Llama.generate`` would reuse at that moment as
   ``cache_read_input_tokens`` (see :mod:`missive_llamacpp.prefix`). Nuance:
   another request served while this one waits in the queue changes the
   cache, so the reuse actually obtained can differ from the reported one;
   the total ``input_tokens + cache_read_input_tokens`` is always exact;
4. under the queue, ``Llama.generate(..., reset=True)`` runs in the model's
   own thread (:class:`_Producer`), which decodes ahead of the event loop and
   checks a cancel flag before every token: closing the iterator (client gone,
   stop sequence matched by the core) stops the model within one token. The
   prompt decode is the first step and is not interruptible;
5. an end-of-generation token (``llama_vocab_is_eog``, the test
   ``Llama.create_completion`` uses) ends with ``end_turn``; it is neither
   shown nor counted (as ``create_completion``'s ``completion_tokens``; note
   llama-server's ``n_decoded`` does count it);
6. token bytes go through an incremental UTF-8 decoder, so a character split
   across tokens is emitted whole; invalid bytes become U+FFFD. A token that
   completes no character adds its count to the next text delta;
   :class:`~missive.events.Finished` carries the exact ``output_tokens``.

``max_tokens: 0`` (the API's cache warm-up) decodes the prompt into the KV
cache without emitting anything, so the next request with that prefix reads it
from the cache; it finishes with ``max_tokens`` and 0 output tokens.

Sampling (API defaults when unset): temperature 1.0 (0 = greedy, llama-cpp-python
adds a greedy sampler for ``temp == 0``), ``top_p`` 1.0 and ``top_k`` 0 (both
disable their cut in llama.cpp's samplers), ``min_p`` 0 (llama-cpp-python's 0.05
default is not part of the API), no repetition penalty.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import llama_cpp
from jinja2 import TemplateError

from missive.capabilities import Capabilities
from missive.config import ConfigError, ModelEntry
from missive.driver import Driver, GenerationRequest, clamp_max_tokens
from missive.errors import ApiError, InvalidRequestError, MissiveError, PromptTooLongError
from missive.media.types import ImageInput
from missive.events import Finished, GenerationEvent, Started, StopReason, TextDelta
from missive.templating import compile_template, render_segments
from missive.reasoning.base import ReasoningParser
from missive.thinking.plan import ThinkingPlan
from missive.reasoning.registry import reasoning_parser_class, reasoning_parser_for_template
from missive.tools.parsers.base import ToolParser
from missive.tools.parsers.registry import build_parser, parser_class
from missive.tools.parsers.selection import parser_for_template
from missive.tools.render import template_messages
from missive.worker import ThreadChannel

from .plugin import CAPABILITIES
from .grammar import json_schema_grammar, tool_call_grammar
from .grammar import warm_up as warm_up_grammar
from .prefix import reused_prefix
from .settings import LlamaCppSettings, parse_settings
from .trial import BufferChoice, choose_extra_buffer_types, crash_point, model_params
from .vision import VISION_MEDIA_TYPES, MediaPrompt, Projector, load_projector

__all__ = ["LlamaCppDriver"]

log = logging.getLogger("missive.llamacpp")

#: Worker threads per model that render and tokenize prompts at once
#: (count_tokens and the preparation of queued generations).
TOKENIZE_THREADS = 4


class LlamaCppDriver(Driver):
    """Serves one GGUF model. Built as ``LlamaCppDriver(model_id, entry)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "llamacpp"

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        super().__init__(model_id, entry, capabilities or CAPABILITIES)
        self.settings: LlamaCppSettings = parse_settings(model_id, entry.settings)
        self._llm: Any = None
        self._n_ctx: int | None = None
        self._template = ""
        self._reasoning: str | None = None  # reasoning parser name, from the template
        self._control_texts: tuple[str, ...] = ()
        self._bos_text = ""
        self._eos_text = ""
        self._add_bos = False
        # Created in start(), inside the event loop that will use them.
        self._queue: anyio.Semaphore | None = None
        # One thread per model runs generation: llama.cpp contexts are not thread-safe.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"llamacpp-{model_id}")
        self._prep_limiter: anyio.CapacityLimiter | None = None
        self._projector: Projector | None = None  # settings.mmproj_path, loaded

    # -- lifecycle ---------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        """Tokens of context of the loaded model (prompt + output); before
        :meth:`start`, the configured value (None: the GGUF's training context)."""
        return self._n_ctx if self._n_ctx is not None else self.entry.context_window

    async def start(self) -> None:
        """Try the model in a child process (``settings.extra_buffer_types``,
        :mod:`missive_llamacpp.trial`), then load it in a worker thread.

        Raises:
            ConfigError: file missing or not loadable, llama.cpp crashes with
                it in every configuration, no chat template, or a template
                that does not compile.
        """
        path = self.settings.path
        if not path.is_file():
            raise ConfigError(f"model '{self.model_id}': GGUF file not found: {path} (settings.model_path)")
        self._queue = anyio.Semaphore(1)  # FIFO: waiters are served in arrival order
        self._prep_limiter = anyio.CapacityLimiter(TOKENIZE_THREADS)
        # A native crash with this model on this CPU is found here, in a
        # child process, not at a user's first request (missive_llamacpp.trial).
        buffers = await anyio.to_thread.run_sync(choose_extra_buffer_types, self.settings, self.model_id)
        await anyio.to_thread.run_sync(self._load, path, buffers)

    def _load(self, path: Path, buffers: BufferChoice) -> None:
        s = self.settings
        try:
            with model_params(use_extra_bufts=buffers.use_extra_bufts):
                llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=self.entry.context_window or 0,  # 0: the model's n_ctx_train
                    n_threads=s.threads,
                    n_threads_batch=s.threads,
                    n_batch=s.n_batch,
                    n_gpu_layers=s.gpu_layers,
                    verbose=s.verbose,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"model '{self.model_id}': llama.cpp could not load {path}: {exc}") from exc
        try:
            self._configure(llm)
            warm_up_grammar(llm)
            if s.mmproj is not None:
                self._projector = load_projector(
                    llm,
                    path,
                    s.mmproj,
                    model_id=self.model_id,
                    threads=s.threads,
                    use_gpu=s.gpu_layers != 0,
                    verbose=s.verbose,
                )
                # Images: every type of the API (Pillow decodes them for libmtmd).
                self.capabilities = self.capabilities.model_copy(update={"input_media": VISION_MEDIA_TYPES})
        except BaseException:
            llm.close()
            raise
        self._llm = llm
        log.info(
            "model %s loaded from %s: n_ctx=%d, %d threads, %s, %s, bos=%r add_bos=%s, projector=%s",
            self.model_id,
            path,
            self._n_ctx,
            s.threads,
            _offload(llm, s, self.model_id),
            buffers.describe(),
            self._bos_text,
            self._add_bos,
            s.mmproj,
        )

    def _configure(self, llm: Any) -> None:
        # llama.cpp may round n_ctx up (to a multiple of 256), but
        # llama-cpp-python sizes its token buffer (input_ids) with the requested
        # value, so the smaller of the two is the real limit.
        self._n_ctx = min(llm.n_ctx(), len(llm.input_ids))
        if self.settings.seed is not None:
            # Llama(seed=0) would mean "random" (``seed or LLAMA_DEFAULT_SEED``); set_seed keeps 0.
            llm.set_seed(self.settings.seed)
        template = self.settings.chat_template or llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(
                f"model '{self.model_id}': the GGUF has no tokenizer.chat_template; "
                "set settings.chat_template"
            )
        try:
            compile_template(template)
        except TemplateError as exc:
            raise ConfigError(f"model '{self.model_id}': the chat template does not compile: {exc}") from exc
        self._template = template
        self._reasoning = reasoning_parser_for_template(
            template, self.reasoning_parser_specs, self.settings.reasoning_parser
        )
        # Thinking blocks only for a model whose output has a reasoning format.
        self.capabilities = self.capabilities.model_copy(update={"thinking": self._reasoning is not None})
        self._control_texts = _control_texts(llm)
        self._bos_text = _token_text(llm, llm.token_bos())
        self._eos_text = _token_text(llm, llm.token_eos())
        self._add_bos = llm.token_bos() != -1 and bool(llm._model.add_bos_token())

    async def aclose(self) -> None:
        """Free the model once the running generation (if any) has stopped
        (waits at most 30 s, else leaves it to the garbage collector)."""
        llm, self._llm = self._llm, None
        if llm is None or self._queue is None:
            return
        with anyio.move_on_after(30) as scope:
            await self._queue.acquire()
        if scope.cancelled_caught:
            log.warning("model %s still generating at shutdown; not freed explicitly", self.model_id)
            return
        try:
            if self._projector is not None:
                await anyio.to_thread.run_sync(self._projector.close)
            await anyio.to_thread.run_sync(llm.close)
        finally:
            self._queue.release()
            self._executor.shutdown(wait=False)

    def _loaded(self) -> Any:
        if self._llm is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self._llm

    # -- prompt ------------------------------------------------------------

    def _tokenize(self, llm: Any, request: GenerationRequest) -> tuple[list[int], MediaPrompt | None]:
        """Render the request with the chat template and tokenize it.

        The one prompt path of both :meth:`count_tokens` and :meth:`generate`.
        Returns the prompt's token ids (an image's positions hold its synthetic
        id, see :mod:`missive_llamacpp.vision`) and its image chunks (None
        without images).

        Raises:
            InvalidRequestError: the template rejected the conversation, or an
                image cannot be used.
            ApiError: the template failed, or llama.cpp could not tokenize.
        """
        pieces, images, nonce = self._render(request)
        return self._tokenize_pieces(llm, pieces, images, nonce)

    def _render(self, request: GenerationRequest) -> tuple[list[tuple[str, bool]], list[ImageInput], str]:
        """The prompt as ``(text, is_client_text)`` pieces, rendered with the
        template's reasoning switches (``enable_thinking``...) set from the
        request (:meth:`missive.thinking.plan.ThinkingPlan.template_kwargs`),
        the images its markers stand for (with a projector; else none: a
        model without one is never sent images, see the capabilities) and
        the markers' nonce."""
        images: list[ImageInput] = []
        projector = self._projector
        nonce = Projector.new_nonce()

        def mark(image: ImageInput) -> str:
            assert projector is not None
            images.append(image)
            return projector.marker(len(images) - 1, nonce)

        messages, extra = template_messages(request, self._template, mark if projector is not None else None)
        # A grammar-constrained reply (forced tool, structured output) is the
        # call or the JSON itself: the template's reasoning is switched off.
        switches = ThinkingPlan().template_kwargs() if _constrained(request) else request.thinking.template_kwargs()
        pieces = render_segments(
            self._template,
            messages,
            control_texts=self._control_texts,
            prefill=request.conversation.prefill,
            bos_token=self._bos_text,
            eos_token=self._eos_text,
            **{**switches, **extra},
        )
        return pieces, images, nonce

    def _tokenize_pieces(
        self, llm: Any, pieces: list[tuple[str, bool]], images: list[ImageInput], nonce: str
    ) -> tuple[list[int], MediaPrompt | None]:
        # The template's own BOS text: a client's typed one (a True piece) is text.
        first, client_first = pieces[0] if pieces else ("", False)
        starts_with_bos = not client_first and bool(self._bos_text) and first.startswith(self._bos_text)
        add_bos = self._add_bos and not starts_with_bos
        tokens: list[int] = []
        media = MediaPrompt() if images else None
        rendered: set[int] = set()
        try:
            for text, client in pieces:
                parts = Projector.split(text, nonce) if media is not None and not client else (text,)
                for part in parts:
                    if isinstance(part, int):  # an image's marker
                        assert media is not None and self._projector is not None
                        if part >= len(images):
                            raise ApiError(f"the rendered prompt names image {part}; the request has {len(images)}")
                        rendered.add(part)
                        self._projector.append_image(images[part], tokens, media)
                    elif part:
                        # Client text is plain text: a typed "<|im_end|>" stays characters.
                        tokens += llm.tokenize(part.encode("utf-8"), add_bos=add_bos and not tokens, special=not client)
        except RuntimeError as exc:
            if media is not None:
                media.close()
            raise ApiError(f"llama.cpp could not tokenize the prompt: {exc}") from exc
        except BaseException:
            if media is not None:
                media.close()
            raise
        if not tokens:
            raise ApiError("the chat template rendered an empty prompt")
        if len(rendered) < len(images):
            assert media is not None
            media.close()
            # A 400: the request cannot be answered by this model as sent (and
            # a 5xx would be retried by clients to the same end).
            raise InvalidRequestError(
                f"the model's chat template left out {len(images) - len(rendered)} of the request's "
                f"{len(images)} images (it does not render every message); they would not reach the model: "
                "send the images in the last user message, or use a model whose template renders them"
            )
        if media is not None and media.spans and media.spans[-1].end == len(tokens):
            media.close()
            raise ApiError("the chat template rendered a prompt ending with an image; nothing would sample after it")
        return tokens, media

    def _prepare(self, llm: Any, request: GenerationRequest) -> tuple[list[int], MediaPrompt | None, int, Any, str]:
        """Prompt tokens and image chunks, the KV-cache prefix
        ``Llama.generate`` would reuse now, the grammar constraining the reply
        (or None), and the reasoning tag the prompt leaves open (``<think>``, or "")."""
        pieces, images, nonce = self._render(request)
        tokens, media = self._tokenize_pieces(llm, pieces, images, nonce)
        try:
            opened = ""
            if self._reasoning is not None and not _constrained(request):
                opened = self._reasoning_class().prompt_prefix("".join(text for text, _ in pieces))
            return tokens, media, _cached_prefix(llm, tokens, media), self._grammar(request), opened
        except BaseException:
            if media is not None:
                media.close()
            raise

    def _reasoning_class(self) -> type[ReasoningParser]:
        assert self._reasoning is not None
        return reasoning_parser_class(self.reasoning_parser_specs, self._reasoning)

    def reasoning_parser(self, request: GenerationRequest) -> ReasoningParser | None:
        """The model's reasoning parser (``reasoning_parser`` setting, else chosen
        from the chat template), or None for a model that does not reason."""
        if self._reasoning is None or _constrained(request):
            return None  # a constrained reply holds no reasoning
        return self._reasoning_class()()

    def _budget(self, llm: Any, request: GenerationRequest, opened: str) -> _Budget | None:
        """How to end reasoning once ``thinking.budget_tokens`` are spent, or
        None (no budget, or a format without a closing text)."""
        budget = request.thinking.budget_tokens
        if budget is None or self._reasoning is None:
            return None
        cls = self._reasoning_class()
        close = cls.close_text()
        if not close:
            return None
        close_tokens = llm.tokenize(close.encode("utf-8"), add_bos=False, special=True)
        return _Budget(cls(), opened, budget, close_tokens)

    # -- tools and structured output ---------------------------------------

    def _parser_name(self) -> str:
        """The tool call format: the ``tool_parser`` setting, else the one the
        chat template uses, else Hermes (the fallback rendering's convention)."""
        return parser_for_template(self._template, self.tool_parser_specs, self.settings.tool_parser)

    def tool_parser(self, request: GenerationRequest) -> ToolParser | None:
        constrained = request.tool_choice.mode in ("any", "tool")
        return build_parser(self.tool_parser_specs, self._parser_name(), request.tools, constrained=constrained)

    def _grammar(self, request: GenerationRequest) -> Any:
        """A compiled llama.cpp grammar for forced tool choice or structured
        output, or None for free generation. Runs in a worker thread."""
        choice = request.tool_choice
        if request.thinking.budget_tokens is not None and self._reasoning is not None:
            if (request.tools and choice.mode in ("any", "tool")) or request.request.output_format_schema():
                # A grammar constrains the whole output: the model could not reason first.
                raise InvalidRequestError(
                    "thinking {\"type\": \"enabled\"} cannot be combined with a constrained output "
                    f"(output_config.format) on model '{self.model_id}' (driver llamacpp): its grammar "
                    "would forbid the reasoning; use thinking \"adaptive\" or \"disabled\""
                )
        relaxed: list[str] = []
        try:
            if request.tools and choice.mode in ("any", "tool"):
                cls = parser_class(self.tool_parser_specs, self._parser_name())
                text = tool_call_grammar(cls, request.tools, choice, relaxed)
            elif (schema := request.request.output_format_schema()) is not None:
                text = json_schema_grammar(schema, relaxed)
            else:
                return None
        except MissiveError:
            raise
        except Exception as exc:  # llama-cpp-python's converter asserts on schemas it cannot handle
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise InvalidRequestError(
                f"the strict tool's input_schema cannot be enforced by a llama.cpp grammar ({detail}); "
                "llama.cpp supports JSON Schema without unresolved $ref, boolean subschemas, "
                "unanchored patterns or not/if/then/else; remove strict: true to have the rest enforced"
            ) from exc
        if relaxed:
            log.info(
                "%s: the grammar does not enforce %s (the output is checked against the full schema afterwards)",
                request.request_id,
                ", ".join(relaxed),
            )
        try:
            return llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise InvalidRequestError(f"the schema could not be turned into a llama.cpp grammar: {exc}") from exc

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Prompt tokens, equal to ``input_tokens + cache_read_input_tokens`` of
        :meth:`generate`'s ``Started``. Never waits behind a generation."""
        llm = self._loaded()
        tokens, media = await anyio.to_thread.run_sync(self._tokenize, llm, request, limiter=self._prep_limiter)
        if media is not None:
            media.close()
        return len(tokens)

    # -- generation --------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Events of one answer (see the module documentation for the rules).

        Raises:
            PromptTooLongError: before ``Started``.
            ApiError: llama.cpp failed (before or after ``Started``).
        """
        llm = self._loaded()
        assert self._queue is not None and self._n_ctx is not None
        tokens, media, prefix, grammar, opened = await anyio.to_thread.run_sync(
            self._prepare, llm, request, limiter=self._prep_limiter
        )
        events = self._generate(llm, request, tokens, media, prefix, grammar, opened)
        try:
            async for event in events:
                yield event
        finally:
            # _generate's own cleanup waits for the model's thread; only then
            # may the image chunks it decodes from be freed.
            with anyio.CancelScope(shield=True):
                await events.aclose()
            if media is not None:
                media.close()

    async def _generate(
        self,
        llm: Any,
        request: GenerationRequest,
        tokens: list[int],
        media: MediaPrompt | None,
        prefix: int,
        grammar: Any,
        opened: str,
    ) -> AsyncIterator[GenerationEvent]:
        assert self._queue is not None and self._n_ctx is not None
        n_ctx = self._n_ctx
        if len(tokens) >= n_ctx:
            raise PromptTooLongError(len(tokens), n_ctx - 1)  # one token must be left to answer
        max_new = clamp_max_tokens(request.max_tokens, len(tokens), n_ctx)
        yield Started(input_tokens=len(tokens) - prefix, cache_read_input_tokens=prefix)
        if opened:
            # The template opened the reasoning tag: the output starts inside it.
            yield TextDelta(opened, tokens=0)

        async with self._queue:
            if log.isEnabledFor(logging.DEBUG):
                actual = _cached_prefix(llm, tokens, media)
                log.debug(
                    "%s: %d prompt tokens, %d cached (reported %d), max_new=%d/%d",
                    request.request_id,
                    len(tokens),
                    actual,
                    prefix,
                    max_new,
                    request.max_tokens,
                )
            def start(prompt: list[int], grammar: Any = grammar) -> Iterator[int]:
                return llm.generate(  # type: ignore[no-any-return]
                    prompt,
                    temp=1.0 if request.temperature is None else request.temperature,
                    top_p=1.0 if request.top_p is None else request.top_p,
                    top_k=0 if request.top_k is None else request.top_k,
                    min_p=0.0,
                    typical_p=1.0,
                    repeat_penalty=1.0,
                    reset=True,
                    grammar=grammar,
                )

            budget = self._budget(llm, request, opened)
            producer = _Producer(llm, start, max_new, tokens, budget, media, self._projector)
            future = asyncio.get_running_loop().run_in_executor(self._executor, producer.run)
            try:
                if max_new == 0:
                    await producer.next_batch()  # the prompt is decoded into the KV cache
                    yield Finished("max_tokens", output_tokens=0)
                    return
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                produced = pending = 0
                while True:
                    pieces, ended = await producer.next_batch()
                    produced += len(pieces)
                    pending += len(pieces)
                    text = decoder.decode(b"".join(pieces))
                    if text:
                        yield TextDelta(text, tokens=pending)
                        pending = 0
                    if ended:
                        break
                # Bytes of a character cut off by max_tokens are dropped, not
                # shown as U+FFFD: the API never returns half a character.
                stop_reason: StopReason = "end_turn" if producer.reached_eog else "max_tokens"
                yield Finished(stop_reason, output_tokens=produced)  # includes tokens of dropped bytes
            finally:
                producer.cancel()
                with anyio.CancelScope(shield=True):
                    await future  # the model is never used by two threads at once


class _Budget:
    """Ends the model's reasoning once ``budget`` reasoning tokens are spent.

    The thinking budget of ``thinking: {type: "enabled", budget_tokens}``:
    a parser of the model's reasoning format follows the output; when the
    budget is reached inside the reasoning, the format's closing text
    (``\n</think>\n\n``) is written into the context and generation goes on
    from there, so the model answers instead of reasoning further (the
    technique of llama.cpp's ``--reasoning-budget`` and vLLM's thinking budget
    processors). Runs in the model's thread.
    """

    def __init__(self, parser: ReasoningParser, opened: str, budget: int, close_tokens: list[int]) -> None:
        self.parser = parser
        self.budget = budget
        self.close_tokens = close_tokens
        self.spent = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        if opened:
            parser.feed(opened)

    def exhausted(self, piece: bytes) -> bool:
        """Account one output token; True when reasoning must end now."""
        reasoning = self.parser.in_reasoning
        self.parser.feed(self._decoder.decode(piece))
        if reasoning or self.parser.in_reasoning:
            self.spent += 1
        return self.parser.in_reasoning and self.spent >= self.budget

    def closed(self, close: bytes) -> None:
        self.parser.feed(self._decoder.decode(close))


class _Producer:
    """Runs ``Llama.generate`` in the model's own thread, ahead of the event loop.

    The thread decodes token after token without waiting for the loop; each
    token's bytes are handed over with ``call_soon_threadsafe``. Pieces that
    arrive while the loop is busy are taken together (one text delta with
    their token count), so a busy loop never slows decoding. :meth:`cancel`
    makes the thread stop before its next token (a client that disconnects
    stops its generation within one token). With a :class:`_Budget`, the
    reasoning is closed when its budget is spent: the closing tokens are
    handed over like generated ones (first piece their bytes, then empty
    pieces, so token counts stay exact) and generation restarts after them,
    reusing the KV cache.
    """

    def __init__(
        self,
        llm: Any,
        start: Callable[[list[int]], Iterator[int]],
        max_new: int,
        tokens: list[int],
        budget: _Budget | None = None,
        media: MediaPrompt | None = None,
        projector: Projector | None = None,
    ) -> None:
        self.llm = llm
        self.media = media
        self.projector = projector
        self.start = start
        self.tokens = tokens
        self.max_new = max_new
        self.budget = budget
        self.reached_eog = False
        self.channel: ThreadChannel[bytes] = ThreadChannel("llama.cpp failed while generating")
        self.cancel = self.channel.cancel
        self.next_batch = self.channel.next_batch

    def run(self) -> None:
        """The thread's loop; always closes the generator and signals the end."""
        gen: Iterator[int] | None = None
        try:
            crash_point("decode")  # tests only: a native crash mid-request
            if not _prefill(self.llm, self.tokens, self.channel.cancelled, self.media, self.projector):
                return  # the client went away while the prompt was decoded
            if self.max_new == 0:
                return  # the prompt is in the KV cache (cache warm-up)
            gen = self.start(self.tokens)
            produced: list[int] = []
            while len(produced) < self.max_new:
                if self.channel.cancelled():
                    return
                step = _step(self.llm, gen)
                if step is None:
                    self.reached_eog = True
                    return
                token, piece = step
                produced.append(token)
                self.channel.send(piece)
                budget = self.budget
                if budget is not None and budget.exhausted(piece) and len(produced) < self.max_new:
                    close = budget.close_tokens[: self.max_new - len(produced)]
                    gen.close()
                    closing = self.llm.detokenize(close)
                    budget.closed(closing)
                    produced += close
                    for i in range(len(close)):
                        self.channel.send(closing if i == 0 else b"")
                    prompt = self.tokens + produced
                    if not _prefill(self.llm, prompt, self.channel.cancelled, self.media, self.projector):
                        return
                    gen = self.start(prompt)  # no grammar: a budget excludes one (see _grammar)
        except Exception as exc:
            self.channel.fail(exc)
        finally:
            if gen is not None:
                gen.close()
            self.channel.close()


def _constrained(request: GenerationRequest) -> bool:
    """Whether a grammar constrains the whole reply (forced tool choice or
    structured output), which leaves no room for reasoning."""
    forced = bool(request.tools) and request.tool_choice.mode in ("any", "tool")
    return forced or request.request.output_format_schema() is not None


def _step(llm: Any, gen: Iterator[int]) -> tuple[int, bytes] | None:
    """Sample one token: ``(token, its bytes)``, or None at end of generation
    (EOG token, or ``Llama.generate`` stopped). Runs in a worker thread."""
    token = next(gen, None)
    if token is None or llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
        return None
    return token, llm.detokenize([token])


def _prefill(
    llm: Any,
    tokens: list[int],
    cancelled: Callable[[], bool],
    media: MediaPrompt | None = None,
    projector: Projector | None = None,
) -> bool:
    """Decode the prompt's uncached part one batch (``n_batch`` tokens) at a
    time, checking ``cancelled`` between batches; False if cancelled.

    ``Llama.generate`` would decode it in one uninterruptible call, so a client
    that left during a long prompt would keep the model busy for its whole
    prefill. Afterwards the context holds exactly ``tokens`` with live logits,
    and ``Llama.generate(tokens, reset=True)`` samples at once (its
    "full prompt already cached" case). Reuse follows :func:`_cached_prefix`,
    so the reported ``cache_read_input_tokens`` stays exact. Images (``media``)
    are encoded and decoded whole by the ``projector`` at their positions;
    their synthetic ids are written to ``Llama.input_ids`` as text tokens are
    by ``Llama.eval``, so the next prompt's prefix comparison sees them.
    """
    reuse = _cached_prefix(llm, tokens, media)
    if reuse == len(tokens):
        return True
    if reuse > 0 and llm._ctx.kv_cache_seq_rm(-1, reuse, -1):
        llm.n_tokens = reuse
    else:
        llm.reset()
    step = max(1, llm.n_batch)
    spans = media.spans if media is not None else []
    pos = llm.n_tokens
    for span in [*spans, None]:
        end = len(tokens) if span is None else span.start
        if span is not None and span.end <= pos:
            continue  # in the cache already
        for start in range(pos, end, step):
            if cancelled():
                return False
            llm.eval(tokens[start : min(start + step, end)])
        if span is None:
            break
        if cancelled():
            return False
        assert projector is not None
        llm._ctx.kv_cache_seq_rm(-1, span.start, -1)
        after = projector.decode(llm, span)
        if after != span.end:
            raise ApiError(f"llama.cpp placed an image of {span.n_tokens} tokens at {span.start}..{after}, not ..{span.end}")
        llm.input_ids[span.start : span.end] = tokens[span.start : span.end]
        llm.n_tokens = span.end
        llm._requires_eval = True  # the text after the image refreshes the logits
        pos = span.end
    return True


def _cached_prefix(llm: Any, tokens: list[int], media: MediaPrompt | None = None) -> int:
    n = llm.n_tokens
    reuse = reused_prefix(
        llm.input_ids[:n].tolist(),
        tokens,
        requires_eval=bool(getattr(llm, "_requires_eval", True)),
        partial_reuse=not (getattr(llm, "_is_recurrent", False) or getattr(llm, "_is_hybrid", False)),
    )
    # An image is in the cache whole or not at all.
    return media.image_start(reuse) if media is not None else reuse


def _offload(llm: Any, settings: LlamaCppSettings, model_id: str) -> str:
    """Where the layers went, for the load log line: ``offload: 30/30 layers
    to the GPU (n_gpu_layers=-1)``, or ``offload: none, CPU only (...)``.
    Warns when a non-zero ``n_gpu_layers`` meets a build without a GPU backend
    (llama.cpp then ignores it without a word)."""
    layers = int(llama_cpp.llama_model_n_layer(llm.model))
    requested = settings.gpu_layers
    if not llama_cpp.llama_supports_gpu_offload():
        if requested != 0:
            log.warning(
                "model %s: n_gpu_layers=%d ignored: this llama-cpp-python has no GPU backend "
                "(reinstall it with CMAKE_ARGS=\"-DGGML_CUDA=on\" or -DGGML_METAL=on, -DGGML_VULKAN=on)",
                model_id, requested,
            )
        return "offload: none, CPU only (this llama.cpp build has no GPU backend)"
    offloaded = layers if requested < 0 else min(requested, layers)
    return f"offload: {offloaded}/{layers} layers to the GPU (n_gpu_layers={requested})"


def _control_texts(llm: Any) -> tuple[str, ...]:
    """Texts of the tokens llama.cpp's tokenizer makes only when asked to parse
    special tokens: the ``CONTROL`` (and ``UNKNOWN``) ones (``<|im_end|>``,
    ``<|start_header_id|>``...; ``tokenizer_st_partition`` matches
    ``USER_DEFINED`` tokens such as Qwen's ``<think>`` either way). Client text
    holding one is tokenized as plain text (see
    :func:`missive.templating.render_segments`)."""
    vocab = llm._model.vocab
    wanted = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    texts = {
        text
        for token in range(llm.n_vocab())
        if llama_cpp.llama_vocab_get_attr(vocab, token) & wanted and (text := _token_text(llm, token))
    }
    return tuple(sorted(texts))


def _token_text(llm: Any, token: int) -> str:
    """Text of a special token (``<|im_start|>``), "" when the vocabulary has none."""
    if token == -1:
        return ""
    try:
        return str(llm._model.token_get_text(token))
    except UnicodeDecodeError:
        return ""
