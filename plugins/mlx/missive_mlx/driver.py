"""The ``mlx`` driver: an MLX model folder in-process through mlx-lm.

One model (``mlx_lm.load``) per configured entry, one generation at a time
(``max_concurrency=1``), queued fairly (FIFO) behind a per-model
``anyio.Semaphore(1)`` (a semaphore, not a lock: an async generator left
unclosed is finalized by asyncio in another task, which could not release a
lock). All MLX work (load, prompt evaluation, sampling, cache copies) runs in
the model's own thread: mlx-lm's ``generation_stream`` is thread-local.

Prompt: ``conversation.chat_messages()`` rendered by
:func:`missive.templating.render_prompt` with the tokenizer's chat template
(``tokenizer_config.json`` / ``chat_template.jinja``, or ``settings.chat_template``):
the same sandbox, prefill rule (a final assistant message is continued) and
error mapping as the llama.cpp driver, so one template gives byte-identical
prompts in both, and a template's ``raise_exception`` is a 400. Then
``tokenizer.encode(text, add_special_tokens=False)``: the template writes the
special tokens itself, as in transformers' ``apply_chat_template(tokenize=True)``.
:meth:`MlxDriver.count_tokens` and :meth:`MlxDriver.generate` share
:meth:`MlxDriver._tokenize`, so the counts are equal by construction.

Generation, in :meth:`MlxDriver.generate`:

1. render + tokenize in a worker thread (not behind the generation queue);
   ``len(prompt) >= context`` raises :class:`~missive.errors.PromptTooLongError`
   (``prompt is too long: N tokens > M maximum``, contract section 5);
2. ``max_tokens`` is clamped to ``context - len(prompt)``; reaching it ends
   with ``max_tokens``;
3. :class:`~missive.events.Started` is yielded at once, before queueing, with
   the prefix the prompt cache (:mod:`missive_mlx.prompt_cache`) would serve
   at that moment as ``cache_read_input_tokens``. As with llama.cpp, a request
   served while this one waits can change the cache, so the reuse obtained may
   differ from the one reported; the total is always exact;
4. under the queue, :class:`_Producer` takes the best cached prefix, runs
   ``mlx_lm.generate_step`` on the rest of the prompt in the model's thread,
   decodes ahead of the event loop and checks a cancel flag before every token
   and between prompt chunks (``prefill_step_size``): closing the iterator
   stops the model within one token or one chunk;
5. a token in ``tokenizer.eos_token_ids`` (the tokenizer's EOS plus
   ``config.json`` ``eos_token_id``, as mlx-lm's ``stream_generate`` stops)
   ends with ``end_turn``; it is neither shown nor counted;
6. text comes from :class:`~missive_mlx.detokenize.IncrementalDetokenizer`
   (a character split across tokens is emitted whole); a token that completes
   no text adds its count to the next delta; ``Finished`` carries the exact
   ``output_tokens``;
7. afterwards the KV cache (prompt + generated tokens, EOS included) is stored
   for the next turn, unless the generation failed.

``max_tokens: 0`` (the API's cache warm-up) evaluates the prompt into a cache
that is stored; it finishes with ``max_tokens`` and 0 output tokens.

Sampling (API defaults when unset): temperature 1.0 (0 = greedy: mlx-lm's
``make_sampler`` takes the argmax), ``top_p`` and ``top_k`` off; no min-p, no
repetition penalty.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from jinja2 import TemplateError

from missive.capabilities import Capabilities
from missive.config import ConfigError, ModelEntry
from missive.driver import Driver, GenerationRequest, clamp_max_tokens
from missive.errors import ApiError, PromptTooLongError
from missive.events import Finished, GenerationEvent, Started, StopReason, TextDelta
from missive.templating import compile_template, render_segments
from missive.tools.parsers.base import ToolParser
from missive.tools.parsers.registry import build_parser
from missive.tools.parsers.selection import parser_for_template
from missive.reasoning.base import ReasoningParser
from missive.reasoning.registry import reasoning_parser_class, reasoning_parser_for_template
from missive.tools.render import template_messages
from missive.worker import ThreadChannel

from .detokenize import IncrementalDetokenizer
from .plugin import CAPABILITIES
from .prompt_cache import PromptCacheStore
from .settings import MlxSettings, parse_settings

__all__ = ["MlxDriver"]

log = logging.getLogger("missive.mlx")


class _Cancelled(Exception):
    """Raised in the model's thread to stop evaluating a prompt."""


class MlxDriver(Driver):
    """Serves one MLX model folder. Built as ``MlxDriver(model_id, entry)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "mlx"

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        self.settings: MlxSettings = parse_settings(model_id, entry.settings)
        caps = capabilities or CAPABILITIES
        if self.settings.prompt_cache_entries == 0:
            caps = caps.model_copy(update={"prompt_caching": False})
        super().__init__(model_id, entry, caps)
        self._model: Any = None
        self._tokenizer: Any = None
        self._context: int | None = None
        self._template = ""
        self._reasoning: str | None = None  # reasoning parser name, from the template
        self._store: PromptCacheStore | None = None
        self._queue: anyio.Semaphore | None = None
        # One thread per model runs everything MLX: streams are thread-local.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mlx-{model_id}")
        # Tokenizing (count_tokens, preparing queued requests) runs beside it,
        # one at a time: Hugging Face fast tokenizers are not meant for
        # concurrent calls on one instance.
        self._tokenize_limiter: anyio.CapacityLimiter | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        """Tokens of context (prompt + output): ``context_window`` of the entry,
        else the model's ``max_position_embeddings`` once loaded."""
        return self._context if self._context is not None else self.entry.context_window

    async def start(self) -> None:
        """Load the model in the model's thread.

        Raises:
            ConfigError: folder missing or not loadable, no context length, no
                chat template, or a template that does not compile.
        """
        path = self.settings.path
        if not (path / "config.json").is_file():
            # Checked here: mlx_lm.load would take a missing path for a hub
            # repository and try to download it.
            raise ConfigError(
                f"model '{self.model_id}': not an MLX model folder (no config.json): {path} (settings.model_path)"
            )
        self._queue = anyio.Semaphore(1)  # FIFO: waiters are served in arrival order
        self._tokenize_limiter = anyio.CapacityLimiter(1)
        await asyncio.get_running_loop().run_in_executor(self._executor, self._load, path)

    def _load(self, path: Path) -> None:
        import mlx_lm
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        try:
            model, tokenizer = mlx_lm.load(str(path))
        except (ValueError, OSError, KeyError, json.JSONDecodeError) as exc:
            raise ConfigError(f"model '{self.model_id}': mlx-lm could not load {path}: {exc}") from exc
        self._context = self.entry.context_window or _config_context(path)
        if not self._context:
            raise ConfigError(
                f"model '{self.model_id}': config.json gives no max_position_embeddings; set context_window"
            )
        template = self.settings.chat_template or _template_of(tokenizer)
        if not template:
            raise ConfigError(
                f"model '{self.model_id}': the tokenizer has no chat template; set settings.chat_template"
            )
        try:
            compile_template(template)
        except TemplateError as exc:
            raise ConfigError(f"model '{self.model_id}': the chat template does not compile: {exc}") from exc
        self._template = template
        self._reasoning = reasoning_parser_for_template(
            template, self.reasoning_parser_specs, self.settings.reasoning_parser
        )
        self.capabilities = self.capabilities.model_copy(update={"thinking": self._reasoning is not None})
        self._store = PromptCacheStore(
            self.settings.prompt_cache_entries, can_trim=can_trim_prompt_cache, trim=trim_prompt_cache
        )
        self._model, self._tokenizer = model, tokenizer
        log.info(
            "model %s loaded from %s: context %d, eos %s, %d cached prefixes",
            self.model_id,
            path,
            self._context,
            sorted(tokenizer.eos_token_ids),
            self.settings.prompt_cache_entries,
        )

    async def aclose(self) -> None:
        """Free the model once the running generation (if any) has stopped
        (waits at most 30 s, else leaves it to the garbage collector)."""
        if self._model is None or self._queue is None:
            return
        with anyio.move_on_after(30) as scope:
            await self._queue.acquire()
        if scope.cancelled_caught:
            log.warning("model %s still generating at shutdown; not freed explicitly", self.model_id)
            return
        try:
            self._model = self._tokenizer = None
            if self._store is not None:
                self._store.clear()
            await asyncio.get_running_loop().run_in_executor(self._executor, _clear_mlx_cache)
        finally:
            self._queue.release()
            self._executor.shutdown(wait=False)

    def _loaded(self) -> tuple[Any, Any]:
        if self._model is None or self._tokenizer is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self._model, self._tokenizer

    # -- prompt ------------------------------------------------------------

    def tool_parser(self, request: GenerationRequest) -> ToolParser | None:
        """The parser of the model's tool call format (``auto`` only: nothing
        here constrains decoding, so ``any``/``tool`` are not declared)."""
        name = parser_for_template(self._template, self.tool_parser_specs, self.settings.tool_parser)
        return build_parser(self.tool_parser_specs, name, request.tools, constrained=False)

    def reasoning_parser(self, request: GenerationRequest) -> ReasoningParser | None:
        """The model's reasoning parser (``reasoning_parser`` setting, else chosen
        from the chat template), or None for a model that does not reason."""
        if self._reasoning is None:
            return None
        return reasoning_parser_class(self.reasoning_parser_specs, self._reasoning)()

    def _render(self, tokenizer: Any, request: GenerationRequest) -> list[tuple[str, bool]]:
        """The prompt as ``(text, is_client_control_text)`` pieces
        (:func:`missive.templating.render_segments`), with the template's
        reasoning switches set from the request
        (:meth:`missive.thinking.plan.ThinkingPlan.template_kwargs`)."""
        messages, extra = template_messages(request, self._template)
        return render_segments(
            self._template,
            messages,
            control_texts=_control_texts(tokenizer),
            prefill=request.conversation.prefill,
            bos_token=tokenizer.bos_token or "",
            eos_token=tokenizer.eos_token or "",
            **{**request.thinking.template_kwargs(), **extra},
        )

    def _tokenize(
        self, tokenizer: Any, request: GenerationRequest, pieces: list[tuple[str, bool]] | None = None
    ) -> list[int]:
        """Render the request with the chat template and tokenize it.

        The one prompt path of both :meth:`count_tokens` and :meth:`generate`.

        Raises:
            InvalidRequestError: the template rejected the conversation.
            ApiError: the template failed, or rendered nothing.
        """
        pieces = self._render(tokenizer, request) if pieces is None else pieces
        tokens: list[int] = []
        for text, client in pieces:
            # A control token's text a client sent is text: split_special_tokens
            # keeps the tokenizer from matching it as the special token.
            extra = {"split_special_tokens": True} if client else {}
            tokens += tokenizer.encode(text, add_special_tokens=False, **extra)
        if not tokens:
            raise ApiError("the chat template rendered an empty prompt")
        return tokens

    def _prepare(self, tokenizer: Any, request: GenerationRequest) -> tuple[list[int], int, str]:
        """Prompt tokens, the prefix the prompt cache would serve now, and the
        reasoning tag the prompt leaves open (``<think>``, or "")."""
        pieces = self._render(tokenizer, request)
        tokens = self._tokenize(tokenizer, request, pieces)
        text = "".join(piece for piece, _ in pieces)
        assert self._store is not None
        opened = ""
        if self._reasoning is not None:
            opened = reasoning_parser_class(self.reasoning_parser_specs, self._reasoning).prompt_prefix(text)
        return tokens, self._store.reusable(tokens), opened

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Prompt tokens, equal to ``input_tokens + cache_read_input_tokens`` of
        :meth:`generate`'s ``Started``. Never waits behind a generation."""
        _, tokenizer = self._loaded()
        tokens = await anyio.to_thread.run_sync(
            self._tokenize, tokenizer, request, limiter=self._tokenize_limiter
        )
        return len(tokens)

    # -- generation --------------------------------------------------------

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Events of one answer (see the module documentation for the rules).

        Raises:
            PromptTooLongError: before ``Started``.
            ApiError: MLX failed (before or after ``Started``).
        """
        model, tokenizer = self._loaded()
        assert self._queue is not None and self._context is not None and self._store is not None
        tokens, reusable, opened = await anyio.to_thread.run_sync(
            self._prepare, tokenizer, request, limiter=self._tokenize_limiter
        )
        context = self._context
        if len(tokens) >= context:
            raise PromptTooLongError(len(tokens), context - 1)  # one token must be left to answer
        max_new = clamp_max_tokens(request.max_tokens, len(tokens), context)
        yield Started(input_tokens=len(tokens) - reusable, cache_read_input_tokens=reusable)
        if opened:
            yield TextDelta(opened, tokens=0)  # the template opened the reasoning tag

        async with self._queue:
            producer = _Producer(
                model,
                tokenizer,
                self._store,
                tokens,
                max_new,
                sampler=_sampler(request),
                seed=self.settings.seed,
                prefill_step_size=self.settings.prefill_step_size,
            )
            future = asyncio.get_running_loop().run_in_executor(self._executor, producer.run)
            try:
                if max_new == 0:
                    await producer.next_batch()  # the prompt is evaluated into a stored cache
                    yield Finished("max_tokens", output_tokens=0)
                    return
                produced = pending = 0
                while True:
                    pieces, ended = await producer.next_batch()
                    produced += len(pieces)
                    pending += len(pieces)
                    text = "".join(pieces)
                    if text:
                        yield TextDelta(text, tokens=pending)
                        pending = 0
                    if ended:
                        break
                if producer.tail:
                    yield TextDelta(producer.tail, tokens=pending)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "%s: %d prompt tokens, %d reused (reported %d), %d generated, max_new=%d",
                        request.request_id,
                        len(tokens),
                        producer.reused,
                        reusable,
                        produced,
                        max_new,
                    )
                stop_reason: StopReason = "end_turn" if producer.reached_eos else "max_tokens"
                yield Finished(stop_reason, output_tokens=produced)
            finally:
                producer.cancel()
                with anyio.CancelScope(shield=True):
                    await future  # the model is never used by two requests at once


class _Producer:
    """Runs ``mlx_lm.generate_step`` in the model's thread, ahead of the event loop.

    Each token's text (possibly "") is handed over with
    ``call_soon_threadsafe``; pieces arriving while the loop is busy are taken
    together. :meth:`cancel` makes the thread stop before its next token or
    prompt chunk. When the thread ends without error, the KV cache is stored
    with the tokens it holds: ``generate_step`` evaluates each token before
    yielding it (one-token look-ahead), so after ``k`` tokens were received
    the cache holds the prompt plus those ``k`` tokens.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        store: PromptCacheStore,
        prompt: list[int],
        max_new: int,
        *,
        sampler: Callable[[Any], Any],
        seed: int | None,
        prefill_step_size: int,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.store = store
        self.prompt = prompt
        self.max_new = max_new
        self.sampler = sampler
        self.seed = seed
        self.prefill_step_size = prefill_step_size
        self.reached_eos = False
        self.reused = 0
        self.tail = ""
        self.channel: ThreadChannel[str] = ThreadChannel("mlx failed while generating")
        self.cancel = self.channel.cancel
        self.next_batch = self.channel.next_batch

    def _check_cancelled(self, *_: int) -> None:
        if self.channel.cancelled():
            raise _Cancelled

    def run(self) -> None:
        """The thread's body; always signals the end."""
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.models.cache import make_prompt_cache

        cache: list[Any] | None = None
        held: list[int] = []  # tokens the cache holds
        gen: Iterator[tuple[int, Any]] | None = None
        failed = False
        try:
            if self.seed is not None:
                mx.random.seed(self.seed)
            cache, self.reused = self.store.take(self.prompt, lambda: make_prompt_cache(self.model))
            held = self.prompt[: self.reused]
            gen = generate_step(
                mx.array(self.prompt[self.reused :]),
                self.model,
                max_tokens=self.max_new,
                sampler=self.sampler,
                prompt_cache=cache,
                prefill_step_size=self.prefill_step_size,
                prompt_progress_callback=self._check_cancelled,
            )
            if self.max_new == 0:
                next(gen, None)  # evaluate the prompt only (cache warm-up)
                held = list(self.prompt)
                return
            eos = self.tokenizer.eos_token_ids
            detok = IncrementalDetokenizer(self._decode, self.prompt)
            for _ in range(self.max_new):
                if self.channel.cancelled():
                    return
                step = next(gen, None)
                if step is None:
                    break
                token = int(step[0])
                if len(held) < len(self.prompt):
                    held = list(self.prompt)  # the prompt is in the cache once a token came out
                held.append(token)
                if token in eos:
                    self.reached_eos = True
                    break
                self.channel.send(detok.add(token))
            self.tail = detok.flush()
        except _Cancelled:
            failed = True  # stopped inside the prompt: the cache is incomplete
        except Exception as exc:  # noqa: BLE001 - handed to the event loop, raised there as ApiError
            failed = True
            self.channel.fail(exc)
        finally:
            if gen is not None:
                gen.close()
            if cache is not None and not failed:
                self._store(cache, held)
            self.channel.close()

    def _decode(self, ids: Any) -> str:
        return str(
            self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)
        )

    def _store(self, cache: list[Any], held: list[int]) -> None:
        import mlx.core as mx

        offset = getattr(cache[0], "offset", len(held)) if cache else 0
        if offset != len(held):  # never store a cache whose content is unknown
            log.warning("prompt cache holds %d tokens, expected %d: not kept", offset, len(held))
            return
        try:
            mx.eval([c.state for c in cache])
        except Exception:  # a cache that cannot be evaluated is dropped (logged)
            log.exception("prompt cache could not be evaluated: not kept")
            return
        self.store.put(held, cache)


def _sampler(request: GenerationRequest) -> Callable[[Any], Any]:
    """mlx-lm sampler for the request's parameters (API defaults when unset)."""
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(
        temp=1.0 if request.temperature is None else request.temperature,
        top_p=0.0 if request.top_p is None else request.top_p,  # 0 and 1: no nucleus cut
        top_k=0 if request.top_k is None else request.top_k,  # 0: no top-k cut
    )


def _config_context(path: Path) -> int | None:
    """``max_position_embeddings`` of ``config.json`` (or of its ``text_config``)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for table in (config, config.get("text_config") or {}):
        value = table.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return None


def _template_of(tokenizer: Any) -> str | None:
    """The tokenizer's Jinja chat template; of a named set, ``default`` (as transformers)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template else None


def _clear_mlx_cache() -> None:
    import mlx.core as mx

    mx.clear_cache()


def _control_texts(tokenizer: Any) -> tuple[str, ...]:
    """Texts of the tokenizer's special added tokens (``<|im_end|>``...): the
    ones ``encode`` matches in text unless ``split_special_tokens``."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return tuple(sorted({t.content for t in decoder.values() if getattr(t, "special", False) and t.content}))
