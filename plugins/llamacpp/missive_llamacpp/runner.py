"""The llama.cpp runner: one GGUF model through llama-cpp-python, one sequence at a time.

Implements :class:`missive.engine.runner.Runner` (the engine does the rest,
see :mod:`missive.engine.local`):

* **load**: the start-up trial in a child process (``settings.extra_buffer_types``,
  :mod:`missive_llamacpp.trial`), then ``llama_cpp.Llama``; the context is the
  smaller of ``n_ctx()`` and ``len(input_ids)`` (llama.cpp may round ``n_ctx``
  up, llama-cpp-python sizes its token buffer with the requested value); the
  grammar machinery is warmed up; with ``settings.mmproj_path`` the vision
  projector is loaded (:mod:`missive_llamacpp.vision`);
* **tokenize**: each rendered piece with ``Llama.tokenize`` (client text with
  ``special=False``, the template's with ``special=True``); BOS is added when
  the vocabulary asks for it (``llama_vocab_get_add_bos``) unless the rendered
  text already starts with the BOS text, as llama.cpp's
  ``common_chat_templates_apply`` does: never two BOS, never none; images by
  the projector at their markers;
* **reusable**: the KV-cache prefix ``Llama.generate`` would reuse now
  (:func:`_cached_prefix`, :mod:`missive_llamacpp.prefix`);
* **begin**: :func:`_prefill` decodes the uncached part of the prompt one
  ``n_batch`` at a time (cancellable between batches; images decoded whole),
  then ``Llama.generate(..., reset=True)`` samples from the full cached prompt;
* **step**: one token of that generator; an end-of-generation token
  (``llama_vocab_is_eog``, the test ``Llama.create_completion`` uses) ends the
  sequence (neither shown nor counted, as ``create_completion``'s
  ``completion_tokens``; llama-server's ``n_decoded`` does count it);
* **detokenizer**: token bytes through an incremental UTF-8 decoder (a
  character split across tokens is emitted whole, invalid bytes become
  U+FFFD); bytes of a character cut off by ``max_tokens`` are dropped, not
  shown as U+FFFD: the API never returns half a character;
* **append**: the tokens are decoded after the output and ``Llama.generate``
  restarts from there, reusing the KV cache (the thinking budget's close).

Sampling (API defaults when unset): temperature 1.0 (0 = greedy,
llama-cpp-python adds a greedy sampler for ``temp == 0``), ``top_p`` 1.0 and
``top_k`` 0 (both disable their cut in llama.cpp's samplers), ``min_p`` 0
(llama-cpp-python's 0.05 default is not part of the API), no repetition
penalty; the grammar of ``Sampling.constraint``.
"""

from __future__ import annotations

import codecs
import ctypes
import dataclasses
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import llama_cpp

from missive.config import ConfigError
from missive.engine.runner import Cancelled, ImageMarks, ModelInfo, Prompt, SavedContext, Sequence
from missive.errors import ApiError, InvalidRequestError

from .grammar import warm_up as warm_up_grammar
from .prefix import reused_prefix
from .settings import LlamaCppSettings
from .trial import choose_extra_buffer_types, crash_point, model_params
from .vision import VISION_MEDIA_TYPES, MediaPrompt, Projector, load_projector

__all__ = ["LlamaCppRunner"]

log = logging.getLogger("missive.llamacpp")

#: Threads per model that render and tokenize prompts at once
#: (count_tokens and the preparation of queued generations).
TOKENIZE_THREADS = 4


@dataclass
class _State:
    """A running sequence: ``Llama.generate``'s iterator."""

    gen: Iterator[int] | None = None


class _Utf8Text:
    """Token bytes to text through an incremental UTF-8 decoder."""

    def __init__(self, llm: Any) -> None:
        self._detokenize = llm.detokenize
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode

    def add(self, token: int) -> str:
        return self._decode(self._detokenize([token]))

    def flush(self) -> str:
        return ""  # a character cut off by max_tokens is dropped


class LlamaCppRunner:
    """One GGUF model (see the module documentation).

    Args:
        model_id: for messages.
        settings: the validated settings.
        n_ctx: the entry's ``context_window`` (None: the GGUF's training context).
    """

    backend = "llama.cpp"
    tokenize_threads = TOKENIZE_THREADS

    def __init__(self, model_id: str, settings: LlamaCppSettings, n_ctx: int | None) -> None:
        self.model_id = model_id
        self.settings = settings
        self.requested_ctx = n_ctx
        self.llm: Any = None
        self.projector: Projector | None = None
        self.image_marker: Callable[[int, str], str] | None = None
        self._bos_text = ""
        self._add_bos = False

    # -- load and close ----------------------------------------------------

    def load(self) -> ModelInfo:
        """Try the model in a child process, then load it.

        Raises:
            ConfigError: file missing or not loadable, llama.cpp crashes with
                it in every configuration, no chat template, a bad projector.
        """
        s = self.settings
        path = s.path
        if not path.is_file():
            raise ConfigError(f"model '{self.model_id}': GGUF file not found: {path} (settings.model_path)")
        # A native crash with this model on this CPU is found here, in a
        # child process, not at a user's first request (missive_llamacpp.trial).
        buffers = choose_extra_buffer_types(s, self.model_id)
        try:
            with model_params(use_extra_bufts=buffers.use_extra_bufts):
                llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=self.requested_ctx or 0,  # 0: the model's n_ctx_train
                    n_threads=s.threads,
                    n_threads_batch=s.threads,
                    n_batch=s.n_batch,
                    n_gpu_layers=s.gpu_layers,
                    verbose=s.verbose,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(f"model '{self.model_id}': llama.cpp could not load {path}: {exc}") from exc
        try:
            info = self._configure(llm)
            warm_up_grammar(llm)
            if s.mmproj is not None:
                self.projector = load_projector(
                    llm,
                    path,
                    s.mmproj,
                    model_id=self.model_id,
                    threads=s.threads,
                    use_gpu=s.gpu_layers != 0,
                    verbose=s.verbose,
                )
                self.image_marker = Projector.marker
                # Images: every type of the API (Pillow decodes them for libmtmd).
                info = dataclasses.replace(info, input_media=VISION_MEDIA_TYPES)
        except BaseException:
            llm.close()
            raise
        self.llm = llm
        log.info(
            "model %s loaded from %s: n_ctx=%d, %d threads, %s, %s, bos=%r add_bos=%s, projector=%s",
            self.model_id,
            path,
            info.context_window,
            s.threads,
            _offload(llm, s, self.model_id),
            buffers.describe(),
            self._bos_text,
            self._add_bos,
            s.mmproj,
        )
        return info

    def _configure(self, llm: Any) -> ModelInfo:
        # llama.cpp may round n_ctx up (to a multiple of 256), but
        # llama-cpp-python sizes its token buffer (input_ids) with the requested
        # value, so the smaller of the two is the real limit.
        n_ctx = min(llm.n_ctx(), len(llm.input_ids))
        if self.settings.seed is not None:
            # Llama(seed=0) would mean "random" (``seed or LLAMA_DEFAULT_SEED``); set_seed keeps 0.
            llm.set_seed(self.settings.seed)
        template = self.settings.chat_template or llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(
                f"model '{self.model_id}': the GGUF has no tokenizer.chat_template; "
                "set settings.chat_template"
            )
        self._bos_text = _token_text(llm, llm.token_bos())
        self._add_bos = llm.token_bos() != -1 and bool(llm._model.add_bos_token())
        return ModelInfo(
            context_window=n_ctx,
            chat_template=template,
            bos_text=self._bos_text,
            eos_text=_token_text(llm, llm.token_eos()),
            control_texts=_control_texts(llm),
        )

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if self.projector is not None:
            self.projector.close()
        if llm is not None:
            llm.close()

    # -- prompt (tokenizing threads) ---------------------------------------

    def tokenize(self, pieces: list[tuple[str, bool]], marks: ImageMarks | None) -> Prompt:
        """Token ids of the rendered pieces (an image's positions hold its
        synthetic id, see :mod:`missive_llamacpp.vision`) and the image
        chunks (a :class:`~missive_llamacpp.vision.MediaPrompt`, None without
        images).

        Raises:
            InvalidRequestError: an image cannot be used, or the template left
                one out.
            ApiError: llama.cpp could not tokenize, or the prompt is empty or
                ends with an image.
        """
        llm = self._loaded()
        images = marks.images if marks is not None else []
        # The template's own BOS text: a client's typed one (a True piece) is text.
        first, client_first = pieces[0] if pieces else ("", False)
        starts_with_bos = not client_first and bool(self._bos_text) and first.startswith(self._bos_text)
        add_bos = self._add_bos and not starts_with_bos
        tokens: list[int] = []
        media = MediaPrompt() if images else None
        rendered: set[int] = set()
        try:
            for text, client in pieces:
                parts = Projector.split(text, marks.nonce) if media is not None and marks is not None and not client else (text,)
                for part in parts:
                    if isinstance(part, int):  # an image's marker
                        assert media is not None and self.projector is not None
                        if part >= len(images):
                            raise ApiError(f"the rendered prompt names image {part}; the request has {len(images)}")
                        rendered.add(part)
                        self.projector.append_image(images[part], tokens, media)
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
        return Prompt(tokens, media)

    def encode_special(self, text: str) -> list[int]:
        return list(self._loaded().tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def reusable(self, prompt: Prompt) -> int:
        return _cached_prefix(self._loaded(), prompt.tokens, prompt.media)

    def _loaded(self) -> Any:
        if self.llm is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self.llm

    # -- sequences (the model's thread) ------------------------------------

    def _start(self, seq: Sequence, tokens: list[int]) -> Iterator[int]:
        s = seq.sampling
        return self.llm.generate(  # type: ignore[no-any-return]
            tokens,
            temp=1.0 if s.temperature is None else s.temperature,
            top_p=1.0 if s.top_p is None else s.top_p,
            top_k=0 if s.top_k is None else s.top_k,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            reset=True,
            grammar=s.constraint,
        )

    def begin(self, seq: Sequence) -> None:
        llm = self._loaded()
        seq.state = _State()
        crash_point("decode")  # tests only: a native crash mid-request
        tokens = seq.prompt.tokens
        seq.reused = _cached_prefix(llm, tokens, seq.prompt.media)
        if not _prefill(llm, tokens, seq.cancelled, seq.prompt.media, self.projector):
            raise Cancelled  # the client went away while the prompt was decoded
        if seq.max_new > 0:
            seq.state.gen = self._start(seq, tokens)

    def step(self, seq: Sequence) -> int | None:
        token = next(seq.state.gen, None)
        if token is None or llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token):
            return None
        return token  # type: ignore[no-any-return]

    def append(self, seq: Sequence, tokens: list[int]) -> None:
        state: _State = seq.state
        if state.gen is not None:
            state.gen.close()
            state.gen = None
        prompt = seq.prompt.tokens + seq.output
        if not _prefill(self.llm, prompt, seq.cancelled, seq.prompt.media, self.projector):
            raise Cancelled
        state.gen = self._start(seq, prompt)

    def detokenizer(self, seq: Sequence) -> _Utf8Text:
        return _Utf8Text(self.llm)

    def end(self, seq: Sequence, ok: bool) -> None:
        state: _State | None = seq.state
        if state is not None and state.gen is not None:
            state.gen.close()
            state.gen = None

    # -- context states (the engine's host-memory prompt cache) -----------

    def context_tokens(self) -> list[int]:
        llm = self._loaded()
        return list(llm.input_ids[: llm.n_tokens].tolist())

    def reusable_from(self, prompt: Prompt, tokens: list[int]) -> int:
        """Reuse from a restored state holding ``tokens``: its logits are
        stale, so a prompt wholly inside it gives its last token back to be
        decoded (:func:`~missive_llamacpp.prefix.reused_prefix`); an image is
        reused whole or not at all."""
        llm = self._loaded()
        reuse = reused_prefix(
            tokens,
            prompt.tokens,
            requires_eval=True,
            partial_reuse=not (getattr(llm, "_is_recurrent", False) or getattr(llm, "_is_hybrid", False)),
        )
        return prompt.media.image_start(reuse) if prompt.media is not None else reuse

    def save_context(self) -> SavedContext | None:
        """The KV cache of sequence 0 (``llama_state_seq_get_data``: the
        tokens' keys and values, about 23 KB a token for SmolLM2-135M) and its
        token ids, or None for an empty context."""
        llm = self._loaded()
        n = int(llm.n_tokens)
        if n == 0:
            return None
        ctx = llm._ctx.ctx
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        buffer = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0))
        if written == 0:
            return None
        return SavedContext(list(llm.input_ids[:n].tolist()), (buffer, written), size)

    def restore_context(self, saved: SavedContext) -> None:
        """Put ``saved`` back as the whole context; its logits are not saved,
        so ``_requires_eval`` makes the next prompt decode its last token again.

        Raises:
            ApiError: llama.cpp refused the state (the context is then empty).
        """
        llm = self._loaded()
        buffer, size = saved.state
        llm._ctx.kv_cache_clear()
        llm.n_tokens = 0
        if int(llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buffer, size, 0)) == 0:
            llm.reset()
            raise ApiError("llama.cpp could not restore a saved prompt state")
        n = len(saved.tokens)
        llm.input_ids[:n] = saved.tokens
        llm.n_tokens = n
        llm._requires_eval = True


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
