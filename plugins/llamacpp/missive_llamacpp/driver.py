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
4. under the queue, ``Llama.generate(..., reset=True)`` is driven one token per
   worker-thread hop, so closing the iterator (client gone, stop sequence
   matched by the core) stops the model within one token. The prompt decode
   happens in the first hop and is not interruptible;
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

import codecs
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import llama_cpp
from jinja2 import TemplateError

from missive.capabilities import Capabilities
from missive.config import ConfigError, ModelEntry
from missive.conversation import Conversation
from missive.driver import Driver, GenerationRequest, clamp_max_tokens
from missive.errors import ApiError, MissiveError, PromptTooLongError
from missive.events import Finished, GenerationEvent, Started, StopReason, TextDelta
from missive.templating import compile_template, render_prompt

from .plugin import CAPABILITIES
from .prefix import reused_prefix
from .settings import LlamaCppSettings, parse_settings

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
        self._bos_text = ""
        self._eos_text = ""
        self._add_bos = False
        # Created in start(), inside the event loop that will use them.
        self._queue: anyio.Semaphore | None = None
        self._gen_limiter: anyio.CapacityLimiter | None = None
        self._prep_limiter: anyio.CapacityLimiter | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        """Tokens of context of the loaded model (prompt + output); before
        :meth:`start`, the configured value (None: the GGUF's training context)."""
        return self._n_ctx if self._n_ctx is not None else self.entry.context_window

    async def start(self) -> None:
        """Load the model in a worker thread.

        Raises:
            ConfigError: file missing or not loadable, no chat template, or a
                template that does not compile.
        """
        path = self.settings.path
        if not path.is_file():
            raise ConfigError(f"model '{self.model_id}': GGUF file not found: {path} (settings.model_path)")
        self._queue = anyio.Semaphore(1)  # FIFO: waiters are served in arrival order
        self._gen_limiter = anyio.CapacityLimiter(1)
        self._prep_limiter = anyio.CapacityLimiter(TOKENIZE_THREADS)
        await anyio.to_thread.run_sync(self._load, path)

    def _load(self, path: Path) -> None:
        s = self.settings
        try:
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=self.entry.context_window or 0,  # 0: the model's n_ctx_train
                n_threads=s.threads,
                n_threads_batch=s.threads,
                n_batch=s.n_batch,
                verbose=s.verbose,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"model '{self.model_id}': llama.cpp could not load {path}: {exc}") from exc
        try:
            self._configure(llm)
        except BaseException:
            llm.close()
            raise
        self._llm = llm
        log.info(
            "model %s loaded from %s: n_ctx=%d, %d threads, bos=%r add_bos=%s",
            self.model_id,
            path,
            self._n_ctx,
            s.threads,
            self._bos_text,
            self._add_bos,
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
            await anyio.to_thread.run_sync(llm.close)
        finally:
            self._queue.release()

    def _loaded(self) -> Any:
        if self._llm is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self._llm

    # -- prompt ------------------------------------------------------------

    def _tokenize(self, llm: Any, conversation: Conversation) -> list[int]:
        """Render the conversation with the chat template and tokenize it.

        The one prompt path of both :meth:`count_tokens` and :meth:`generate`.

        Raises:
            InvalidRequestError: the template rejected the conversation.
            ApiError: the template failed, or llama.cpp could not tokenize.
        """
        text = render_prompt(
            self._template,
            conversation.chat_messages(),
            prefill=conversation.prefill,
            bos_token=self._bos_text,
            eos_token=self._eos_text,
        )
        add_bos = self._add_bos and not (self._bos_text and text.startswith(self._bos_text))
        try:
            tokens = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        except RuntimeError as exc:
            raise ApiError(f"llama.cpp could not tokenize the prompt: {exc}") from exc
        if not tokens:
            raise ApiError("the chat template rendered an empty prompt")
        return tokens

    def _prepare(self, llm: Any, conversation: Conversation) -> tuple[list[int], int]:
        """Prompt tokens and the KV-cache prefix ``Llama.generate`` would reuse now."""
        tokens = self._tokenize(llm, conversation)
        return tokens, _cached_prefix(llm, tokens)

    async def count_tokens(self, request: GenerationRequest) -> int:
        """Prompt tokens, equal to ``input_tokens + cache_read_input_tokens`` of
        :meth:`generate`'s ``Started``. Never waits behind a generation."""
        llm = self._loaded()
        tokens = await anyio.to_thread.run_sync(
            self._tokenize, llm, request.conversation, limiter=self._prep_limiter
        )
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
        tokens, prefix = await anyio.to_thread.run_sync(
            self._prepare, llm, request.conversation, limiter=self._prep_limiter
        )
        n_ctx = self._n_ctx
        if len(tokens) >= n_ctx:
            raise PromptTooLongError(len(tokens), n_ctx - 1)  # one token must be left to answer
        max_new = clamp_max_tokens(request.max_tokens, len(tokens), n_ctx)
        yield Started(input_tokens=len(tokens) - prefix, cache_read_input_tokens=prefix)

        async with self._queue:
            if log.isEnabledFor(logging.DEBUG):
                actual = _cached_prefix(llm, tokens)
                log.debug(
                    "%s: %d prompt tokens, %d cached (reported %d), max_new=%d/%d",
                    request.request_id,
                    len(tokens),
                    actual,
                    prefix,
                    max_new,
                    request.max_tokens,
                )
            gen = llm.generate(
                tokens,
                temp=1.0 if request.temperature is None else request.temperature,
                top_p=1.0 if request.top_p is None else request.top_p,
                top_k=0 if request.top_k is None else request.top_k,
                min_p=0.0,
                typical_p=1.0,
                repeat_penalty=1.0,
                reset=True,
            )
            try:
                if max_new == 0:
                    await self._in_thread(_warm_up, gen)
                    yield Finished("max_tokens", output_tokens=0)
                    return
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                produced = pending = 0
                stop_reason: StopReason = "max_tokens"
                while produced < max_new:
                    piece = await self._in_thread(_step, llm, gen)
                    if piece is None:
                        stop_reason = "end_turn"
                        break
                    produced += 1
                    pending += 1
                    text = decoder.decode(piece)
                    if text:
                        yield TextDelta(text, tokens=pending)
                        pending = 0
                tail = decoder.decode(b"", final=True)
                if tail:
                    yield TextDelta(tail, tokens=pending)
                yield Finished(stop_reason, output_tokens=produced)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(gen.close, limiter=self._gen_limiter)

    async def _in_thread(self, func: Any, *args: Any) -> Any:
        """Run one generation step in the generation thread slot. Not
        abandoned on cancellation: the step finishes first, so the model is
        never used by two threads and ``gen.close()`` runs after it."""
        try:
            return await anyio.to_thread.run_sync(func, *args, limiter=self._gen_limiter)
        except MissiveError:
            raise
        except (RuntimeError, ValueError, OSError) as exc:
            raise ApiError(f"llama.cpp failed while generating: {exc}") from exc


def _step(llm: Any, gen: Iterator[int]) -> bytes | None:
    """Sample one token: its bytes, or None at end of generation (EOG token,
    or ``Llama.generate`` stopped). Runs in a worker thread."""
    token = next(gen, None)
    if token is None or llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
        return None
    return llm.detokenize([token])


def _warm_up(gen: Iterator[int]) -> None:
    """Decode the prompt into the KV cache; the sampled token is discarded."""
    next(gen, None)


def _cached_prefix(llm: Any, tokens: list[int]) -> int:
    n = llm.n_tokens
    return reused_prefix(
        llm.input_ids[:n].tolist(),
        tokens,
        requires_eval=bool(getattr(llm, "_requires_eval", True)),
        partial_reuse=not (getattr(llm, "_is_recurrent", False) or getattr(llm, "_is_hybrid", False)),
    )


def _token_text(llm: Any, token: int) -> str:
    """Text of a special token (``<|im_start|>``), "" when the vocabulary has none."""
    if token == -1:
        return ""
    try:
        return str(llm._model.token_get_text(token))
    except UnicodeDecodeError:
        return ""
