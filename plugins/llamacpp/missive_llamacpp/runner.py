"""The llama.cpp runner: one GGUF model through llama-cpp-python, several sequences decoded together.

Implements :class:`missive.engine.runner.Runner`, :class:`~missive.engine.runner.Batched`
and :class:`~missive.engine.runner.ContextStates` (the engine does the rest,
see :mod:`missive.engine.local` and :mod:`missive.engine.batcher`):

* **load**: the start-up trial in a child process (``settings.extra_buffer_types``,
  :mod:`missive_llamacpp.trial`), then ``llama_cpp.Llama`` (model, vocabulary,
  metadata); an empty run warms the context up (:func:`missive_llamacpp.context.warm_up`)
  and the grammar machinery is warmed up; with
  ``settings.mmproj_path`` the vision projector is loaded
  (:mod:`missive_llamacpp.vision`);
* **context** (:mod:`missive_llamacpp.context`): a probe measures the KV
  bytes a token and a sequence take, :mod:`missive_llamacpp.memory` fits
  ``context_window``, slots (``settings.parallel``) and the KV pool to the
  free memory, then one llama.cpp context with ``n_seq_max = slots``: by
  default one pool of cells the slots share (``kv_unified``, llama-server's
  default), else a KV stream of a whole window per slot. A slot is a
  ``seq_id``; it keeps its tokens after its sequence ends, for the next
  prompt that shares them;
* **tokenize**: each rendered piece with ``Llama.tokenize`` (client text with
  ``special=False``, the template's with ``special=True``); BOS is added when
  the vocabulary asks for it (``llama_vocab_get_add_bos``) unless the rendered
  text already starts with the BOS text, as llama.cpp's
  ``common_chat_templates_apply`` does: never two BOS, never none; images by
  the projector at their markers;
* **reuse** (:mod:`missive_llamacpp.slots`): a slot's common prefix with
  the prompt, always leaving the prompt's last token to decode (fresh
  logits), an image whole or not at all; for recurrent, hybrid and
  sliding-window models, only where their state can be cut, else from the
  nearest context checkpoint (:mod:`missive_llamacpp.checkpoints`);
* **begin**: cuts the slot's KV cache after the reused prefix
  (``llama_memory_seq_rm``, after restoring the checkpoint it needs) and
  queues the rest of the prompt;
* **step_many**: one ``llama_decode`` per step for every running sequence,
  built as llama-server's ``update_slots`` builds its batch: one token per
  generating sequence first, then prompt chunks while the batch has room
  (``n_batch`` tokens), each part in slot order (with a KV stream per slot
  llama.cpp puts only consecutive sequence ids in one micro-batch,
  ``split_equal`` in src/llama-batch.cpp), logits only where a sequence samples next; an image
  is encoded and decoded by libmtmd by itself at its position; a prompt
  chunk stops at each checkpoint position, and the checkpoint is taken
  before the chunk that starts there is decoded. Sequences of one LoRA
  adapter set per step (``Prompt.variant``: entries sharing this load with
  ``settings.base``; :mod:`missive_llamacpp.variants`), the sets taking
  turns. Each sequence
  then samples from its own logits (``llama_sampler_sample`` at its batch
  index) with its own sampler chain; an end-of-generation token
  (``llama_vocab_is_eog``) ends it, neither shown nor counted (as
  ``create_completion``'s ``completion_tokens``; llama-server's
  ``n_decoded`` does count it);
* **speculative decoding** (``settings.speculative``,
  :mod:`missive_llamacpp.speculative`): a generating sequence's token is
  followed in the same batch by a draft (prompt lookup over its prompt and
  output, at most ``max_new`` left - 1 tokens, its adaptive length, the
  batch's room), logits at each; its sampler chain samples at each position
  and keeps the run while it matches the draft, the first differing sample
  emitted too; the rejected positions leave the KV cache
  (``llama_memory_seq_rm``) and the slot's tokens. The step then gives that
  sequence a list of tokens. Only where the KV cache can be cut anywhere,
  and never for a sequence with ``Sequence.draft`` False;
* **detokenizer**: token bytes through an incremental UTF-8 decoder (a
  character split across tokens is emitted whole, invalid bytes become
  U+FFFD), special tokens as their text (tool call and reasoning
  markers); bytes of a character cut off by ``max_tokens`` are dropped, not
  shown as U+FFFD: the API never returns half a character;
* **append**: the tokens are queued after the last sampled one and decoded
  by the next step (the thinking budget's close);
* **context states** and the **shared pool** (:mod:`missive_llamacpp.slots`):
  a slot's state saved to and restored from host memory, the cells each
  slot holds.

Sampling, the chain ``Llama._init_sampler`` builds: what the request sets,
else the model's defaults (``ModelInfo.sampling``: the GGUF's
``general.sampling.*`` keys, else the family table of
:mod:`missive.sampling`), else the API's: temperature 1.0 (0 = greedy),
``top_p`` 1.0 and ``top_k`` 0 (both disable their cut in llama.cpp's
samplers), no ``min_p`` (llama-cpp-python's 0.05 default is not part of the
API); no repetition penalty; the grammar of ``Sampling.constraint`` first.
The seed is ``settings.seed`` for every sequence, else a random one per
sequence.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import _internals as internals

from missive.api import (
    PENDING,
    ApiError,
    Cancelled,
    ConfigError,
    ImageMarks,
    InvalidRequestError,
    ModelInfo,
    Pending,
    Prompt,
    Sampling,
    Sequence,
    StepResult,
    default_cache_bytes,
    gguf_names,
    model_sampling,
)

from . import checkpoints
from .context import Layout, make_context, warm_up
from .draft import DraftModel, ModelDrafter, load_draft
from .grammar import warm_up as warm_up_grammar
from .grammar_check import add_grammar
from .lora import AdapterBank, Adapters, load_adapters
from .placement import SPLIT_MODES, GpuLayout, Placement, devices, gpu_layout, plan, tensor_sizes
from .portable import PortableSlots
from .settings import LlamaCppSettings, LoraAdapter
from .slots import Slot
from .speculative import (
    AUTO_ACCEPTANCE,
    AUTO_MIN_SPEEDUP,
    AUTO_STEP,
    DraftLength,
    NgramDrafter,
    auto_decision,
    verify,
)
from .step_cost import step_costs
from .trial import choose_extra_buffer_types, crash_point, model_params
from .variants import Variants
from .vision import VISION_MEDIA_TYPES, MediaPrompt, Projector, load_projector

__all__ = ["LlamaCppRunner"]

log = logging.getLogger("missive.llamacpp")

#: Threads per model that render and tokenize prompts at once
#: (count_tokens and the preparation of queued generations).
TOKENIZE_THREADS = 4
#: Tokens of the context ``llama_cpp.Llama`` makes at load, replaced at once
#: by the fitted one (:mod:`missive_llamacpp.context`); small, so that it
#: and Llama's logits buffer (``n_batch x n_vocab`` floats) cost nothing.
STUB_CTX = 64


@dataclass
class _SeqState:
    """A running sequence: the tokens to decode before it samples again
    (the rest of its prompt, then its last sampled token and any appended
    ones) and its sampler chain (None for ``max_new == 0``)."""

    pending: list[int]
    sampler: Any = None
    marks: list[int] = field(default_factory=list)  # checkpoint positions still ahead
    drafter: NgramDrafter | ModelDrafter | None = (
        None  # speculative decoding (prompt lookup or a draft model)
    )
    length: DraftLength | None = None


class _Utf8Text:
    """Token bytes to text through an incremental UTF-8 decoder.

    Special tokens are written as their text (``special=True``): many
    formats mark tool calls and reasoning with them (GLM's ``<arg_key>``,
    Kimi's ``<|tool_call_begin|>``, MiniMax's ``<minimax:tool_call>``,
    gpt-oss's ``<|channel|>``), and the parsers read text. llama.cpp's own
    server keeps such tokens in its output for its parsers too
    (``preserved_tokens`` in ``common/chat.cpp``). End-of-generation tokens
    never reach this: they end the sequence.
    """

    def __init__(self, llm: Any) -> None:
        self._detokenize = llm.detokenize
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode

    def add(self, token: int) -> str:
        return self._decode(self._detokenize([token], special=True))

    def flush(self) -> str:
        return ""  # a character cut off by max_tokens is dropped


class LlamaCppRunner(PortableSlots):
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
        self._slots: list[Slot] = []
        self._ctx: Any = None  # llama_cpp._internals.LlamaContext
        self._memory: Any = None
        self._batch: Any = None  # llama_batch of n_batch tokens
        self._n_batch = 0
        self._layout: Layout | None = None
        self._checkpoint_bytes = 0  # per slot
        self._speculate = False  # settings.speculative, where the KV cache can drop a rejected draft
        self._speculation = "speculative=off"  # what the load line says of it
        self._host_weight_bytes = 0  # weights the tensor overrides keep in host memory
        self._adapters = Adapters()  # settings.lora, loaded with the model
        self._variants = Variants()  # and the sets of the entries sharing its load (settings.base)
        self._draft: DraftModel | None = None  # settings.draft_model, loaded with the model
        self._drafted = 0  # draft tokens verified since this runner was made (it outlives reloads)
        self._accepted = 0

    # -- load and close ----------------------------------------------------

    def load(self) -> ModelInfo:
        """Try the model in a child process, then load it.

        Raises:
            ConfigError: file missing or not loadable, llama.cpp crashes with
                it in every configuration, no chat template, a bad projector.
        """
        s = self.settings
        path = s.path
        if path.is_dir():
            ggufs = sorted(p.name for p in path.glob("*.gguf"))[:3]
            hint = f"; it holds {', '.join(ggufs)}: name one of them" if ggufs else ""
            raise ConfigError(
                f"model '{self.model_id}': {path} is a folder, not a GGUF file (settings.model_path){hint}; "
                "a folder is a model only for the mlx driver, with its config.json"
            )
        if not path.is_file():
            raise ConfigError(f"model '{self.model_id}': GGUF file not found: {path} (settings.model_path)")
        # A native crash with this model on this CPU is found here, in a
        # child process, not at a user's first request (missive_llamacpp.trial).
        buffers = choose_extra_buffer_types(s, self.model_id)
        placement, gpus = self._placement()
        params: dict[str, Any] = {"use_extra_bufts": buffers.use_extra_bufts}
        if placement.rules:
            params["tensor_buft_overrides"] = placement.overrides(gpus.known)
        try:
            with model_params(**params):
                # A small context: make_context measures, fits and replaces it.
                llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=STUB_CTX,
                    n_threads=s.threads,
                    n_threads_batch=s.threads,
                    n_batch=STUB_CTX,
                    swa_full=False,  # llama.cpp's default is a full-size window cache
                    n_gpu_layers=s.gpu_layers,
                    split_mode=SPLIT_MODES[gpus.split_mode],
                    main_gpu=s.main_gpu,
                    tensor_split=gpus.tensor_split,
                    use_mmap=s.mmap,
                    use_mlock=s.mlock,
                    offload_kqv=s.kv_offload,
                    verbose=s.verbose,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ConfigError(
                f"model '{self.model_id}': llama.cpp could not load {path}: {exc}{_placed(s)}"
            ) from exc
        if s.mlock:
            _check_locked(self.model_id)
        if s.draft_model is not None and s.speculative not in ("auto", "draft"):
            log.warning(
                "model %s: settings.draft_model is not used: speculative = %r (\"draft\" or \"auto\" use it)",
                self.model_id,
                s.speculative,
            )
        try:
            info = self._configure(llm)
            info = self._make_slots(llm, info)
            bank = AdapterBank()
            self._adapters = load_adapters(llm, s.lora, self.model_id, verbose=s.verbose, bank=bank)
            if s.lora:
                self._adapters.apply(self._ctx.ctx)
            self._variants = Variants(self._adapters, bank)
            if s.draft_model is not None and s.speculative in ("auto", "draft"):
                assert self._layout is not None
                self._draft = load_draft(llm, s, self.model_id, self._layout.n_ctx, len(self._slots))
            warm_up(llm, self._ctx.ctx)
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
            if self._draft is not None:
                self._draft.close()
                self._draft = None
            llm.close()
            raise
        self.llm = llm
        assert self._layout is not None
        self._speculate, self._speculation = self._choose_speculation(llm)
        if not self._speculate and self._draft is not None:  # not used: its memory is given back
            self._draft.close()
            self._draft = None
        log.info(
            "model %s loaded from %s: context_window=%d, %d slots (parallel=%s), %s, %d threads, %s, %s, "
            "%s, %s, %s, %s, bos=%r add_bos=%s, projector=%s, %s",
            self.model_id,
            path,
            info.context_window,
            info.slots,
            s.parallel,
            self._layout.describe(s),
            s.threads,
            _residency(s),
            _offload(llm, s, self.model_id),
            placement.describe(),
            gpus.describe(s),
            self._adapters.describe(),
            buffers.describe(),
            self._bos_text,
            self._add_bos,
            s.mmproj,
            self._speculation,
        )
        log.info("model %s memory: %s", self.model_id, self._layout.fit.arithmetic)
        return info

    def _placement(self) -> tuple[Placement, GpuLayout]:
        """The checked tensor overrides and GPU split (:mod:`missive_llamacpp.placement`);
        the GGUF header is read only when an override is set."""
        s = self.settings
        known = devices()
        gpus = gpu_layout(s, known, self.model_id)
        if not (s.override_tensor or s.cpu_moe or s.n_cpu_moe):
            return Placement(), gpus
        placement = plan(
            override_tensor=s.override_tensor,
            cpu_moe=s.cpu_moe,
            n_cpu_moe=s.n_cpu_moe,
            sizes=tensor_sizes(s.path),
            known=known,
            model=self.model_id,
        )
        self._host_weight_bytes = placement.host_bytes
        return placement, gpus

    def _choose_speculation(self, llm: Any) -> tuple[bool, str]:
        """Whether sequences draft (``settings.speculative``; ``"auto"``
        times a verifying step here first: :mod:`missive_llamacpp.speculative`),
        and what the load line says of it."""
        s = self.settings
        drafts = f"draft {s.draft_min}..{s.draft_max}, n-grams {s.prompt_lookup_min}..{s.prompt_lookup_max}"
        if s.speculative == "off":
            return False, "speculative=off"
        if self._cut != "any":
            return False, (
                f"speculative=off (settings: {s.speculative}; this model's KV cache cannot drop a "
                "rejected draft: recurrent, hybrid or sliding-window)"
            )
        if s.speculative == "ngram":
            return True, f"speculative=ngram ({drafts})"
        draft = self._draft
        if draft is not None:
            drafts = f"draft model {draft.name}, p_min {s.draft_p_min}, draft {s.draft_min}..{s.draft_max}"
        if s.speculative == "draft":
            return True, f"speculative=draft ({drafts})"
        try:
            one, step = step_costs(self._ctx.ctx, self._batch, llm.n_vocab(), AUTO_STEP)
            draft_cost = draft.token_cost() if draft is not None else 0.0
        except RuntimeError as exc:
            return False, f"speculative=auto: off (timing a verifying step failed: {exc})"
        on, expected = auto_decision(one, step, draft_cost=draft_cost)
        kind = "ngram" if draft is None else "draft"
        priced = "" if draft is None else f", a draft token {draft_cost / one:.2f}x"
        return on, (
            f"speculative=auto: {kind if on else 'off'} (a {AUTO_STEP}-token step costs "
            f"{step / one:.1f}x one token, {one * 1000:.1f} ms{priced}: drafting would give "
            f"~{expected:.2f}x at {AUTO_ACCEPTANCE:.0%} acceptance, on from {AUTO_MIN_SPEEDUP}x"
            f"{'; ' + drafts if on else ''})"
        )

    def add_variant(self, key: Hashable, lora: list[LoraAdapter], model_id: str) -> Adapters:
        """Load the adapters of ``model_id``, an entry sharing this model's
        load (``settings.base``), as the set of prompts whose ``variant`` is
        ``key`` (model thread; each file loaded once per model).

        Raises:
            ConfigError: a file missing or refused by llama.cpp (naming ``model_id``'s ``settings.lora``).
        """
        adapters = load_adapters(
            self._loaded(), lora, model_id, verbose=self.settings.verbose, bank=self._variants.bank
        )
        self._variants.add(key, adapters)
        return adapters

    def variant_counts(self) -> dict[str, int]:
        """``lora_switches`` and ``lora_split_steps`` (:class:`~missive_llamacpp.variants.Variants`)."""
        return {"lora_switches": self._variants.switches, "lora_split_steps": self._variants.split_steps}

    def draft_counts(self) -> tuple[int, int]:
        """Draft tokens verified and accepted since this runner was made
        (:class:`~missive.api.Speculative`)."""
        return self._drafted, self._accepted

    def _make_slots(self, llm: Any, info: ModelInfo) -> ModelInfo:
        """Give ``llm`` the context of :mod:`missive_llamacpp.context` and
        the batch :meth:`step_many` fills; ``info`` with the window, slots
        and pool it got.

        Raises:
            ConfigError: it does not fit the memory, or llama.cpp could not make it.
        """
        s = self.settings
        host_cache = default_cache_bytes() if s.cache_ram_mib is None else s.cache_ram_mib * 2**20
        layout = make_context(
            llm,
            s,
            self.model_id,
            window=self.requested_ctx,
            host_cache_bytes=host_cache,
            model_bytes=s.path.stat().st_size,
            host_weight_bytes=self._host_weight_bytes,
        )
        slots = layout.fit.slots
        self._layout = layout
        self._ctx = layout.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx.ctx)
        self._n_batch = int(llama_cpp.llama_n_batch(self._ctx.ctx))
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._slots = [Slot() for _ in range(slots)]
        # Checkpoints take at most a quarter of the host cache's budget, shared by the slots.
        self._checkpoint_bytes = host_cache // 4 // slots
        window = layout.fit.window
        pool = layout.n_ctx if layout.unified and layout.n_ctx < slots * window else 0
        return dataclasses.replace(info, context_window=window, slots=slots, pool_tokens=pool)

    def _configure(self, llm: Any) -> ModelInfo:
        template = self.settings.chat_template or llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ConfigError(
                f"model '{self.model_id}': the GGUF has no tokenizer.chat_template; "
                "set settings.chat_template"
            )
        self._bos_text = _token_text(llm, llm.token_bos())
        self._add_bos = llm.token_bos() != -1 and bool(llm._model.add_bos_token())
        return ModelInfo(
            context_window=STUB_CTX,  # until _make_slots fits it
            chat_template=template,
            bos_text=self._bos_text,
            eos_text=_token_text(llm, llm.token_eos()),
            control_texts=_control_texts(llm),
            # The GGUF's general.sampling.* keys, else the family table by its names.
            sampling=model_sampling(llm.metadata, gguf_names(llm.metadata, self.settings.path.name)),
        )

    def close(self) -> None:
        draft, self._draft = self._draft, None
        if draft is not None:
            draft.close()
        llm, self.llm = self.llm, None
        if self.projector is not None:
            self.projector.close()
        batch, self._batch = self._batch, None
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        self._ctx = self._memory = self._layout = None
        self._variants = Variants()  # the adapters are freed with the model
        if llm is not None:
            llm.close()  # frees the context (registered with its model) before the model

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
                parts = (
                    Projector.split(text, marks.nonce)
                    if media is not None and marks is not None and not client
                    else (text,)
                )
                for part in parts:
                    if isinstance(part, int):  # an image's marker
                        assert media is not None and self.projector is not None
                        if part >= len(images):
                            raise ApiError(
                                f"the rendered prompt names image {part}; the request has {len(images)}"
                            )
                        rendered.add(part)
                        self.projector.append_image(images[part], tokens, media)
                    elif part:
                        # Client text is plain text: a typed "<|im_end|>" stays characters.
                        tokens += llm.tokenize(
                            part.encode("utf-8"), add_bos=add_bos and not tokens, special=not client
                        )
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
            raise ApiError(
                "the chat template rendered a prompt ending with an image; nothing would sample after it"
            )
        return Prompt(tokens, media)

    def encode_special(self, text: str) -> list[int]:
        return list(self._loaded().tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _loaded(self) -> Any:
        if self.llm is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self.llm

    # -- sequences (the model's thread) ------------------------------------

    def _sampler(self, sampling: Sampling) -> Any:
        """The sampler chain of one sequence, as ``Llama._init_sampler``
        builds it for the API's parameters (no penalty): the grammar, then
        greedy for temperature 0, else top-k, top-p, min-p (when the
        model's defaults set it), temperature and a seeded draw."""
        chain = internals.LlamaSampler()
        if sampling.constraint is not None:
            add_grammar(chain, self.llm._model, sampling.constraint._grammar)  # never a NULL sampler
        temp = 1.0 if sampling.temperature is None else sampling.temperature
        if temp == 0.0:
            chain.add_greedy()
        else:
            chain.add_top_k(0 if sampling.top_k is None else sampling.top_k)
            chain.add_top_p(1.0 if sampling.top_p is None else sampling.top_p, 1)
            if sampling.min_p:  # a model's default only (llama.cpp's order: top-k, top-p, min-p, temperature)
                chain.add_min_p(sampling.min_p, 1)
            chain.add_temp(temp)
            chain.add_dist(llama_cpp.LLAMA_DEFAULT_SEED if self.settings.seed is None else self.settings.seed)
        return chain

    def begin(self, seq: Sequence) -> None:
        """Plan ``seq`` in its slot: keep the slot's reusable prefix (cut
        the rest, restoring a checkpoint first where the model needs one:
        :mod:`missive_llamacpp.slots`), queue the remaining prompt tokens for
        :meth:`step_many` with the positions to take checkpoints at, build
        the sampler."""
        self._loaded()
        crash_point("decode")  # tests only: a native crash mid-request
        reuse = self.cut(seq)
        seq.reused = reuse
        seq.state = _SeqState(pending=seq.prompt.tokens[reuse:], marks=self._marks(seq.prompt, reuse))
        if seq.max_new > 0:
            seq.state.sampler = self._sampler(seq.sampling)
        s = self.settings
        if self._speculate and seq.draft and seq.max_new > 1:
            state = seq.state
            slot = self._slots[seq.slot]
            drafter: NgramDrafter | ModelDrafter
            if self._draft is not None:
                drafter = ModelDrafter(
                    self._draft, seq.slot, lambda: slot.tokens + state.pending[:1], seq.prompt.cache_scope
                )
            else:
                drafter = NgramDrafter(s.prompt_lookup_min, s.prompt_lookup_max)
                drafter.extend(seq.prompt.tokens)
            state.drafter = drafter
            state.length = DraftLength(s.draft_min, s.draft_max)

    def _draft_cap(self, seq: Sequence) -> int:
        """The most tokens ``seq`` may draft in its next step: its adaptive
        length, never past ``max_new`` (the verified run emits one more),
        0 while it still reads its prompt or appended tokens."""
        state: _SeqState | None = seq.state
        if state is None or state.drafter is None or state.length is None or len(state.pending) != 1:
            return 0
        return max(0, min(state.length.n, seq.max_new - len(seq.output) - 1))

    def _marks(self, prompt: Prompt, start: int) -> list[int]:
        """Checkpoint positions of ``prompt`` read from ``start`` (none for a
        model whose state can be cut anywhere)."""
        s = self.settings
        if self._cut == "any" or s.ctx_checkpoints == 0:
            return []
        spans = [(span.start, span.end) for span in prompt.media.spans] if prompt.media is not None else []
        return checkpoints.positions(
            len(prompt.tokens), start, interval=s.checkpoint_interval, n_ubatch=s.n_ubatch, avoid=spans
        )

    def _checkpoint(self, seq: Sequence) -> None:
        """Take the checkpoint due at ``seq``'s position (before the chunk
        that starts there is decoded), as llama-server does."""
        marks: list[int] = seq.state.marks
        slot = self._slots[seq.slot]
        pos = len(slot.tokens)
        while marks and marks[0] < pos:
            marks.pop(0)
        if not marks or marks[0] != pos:
            return
        marks.pop(0)
        taken = checkpoints.take(self._ctx.ctx, seq.slot, pos)
        if taken is not None:
            slot.checkpoints = checkpoints.keep(
                slot.checkpoints, taken, count=self.settings.ctx_checkpoints, nbytes=self._checkpoint_bytes
            )

    def step_many(self, seqs: list[Sequence]) -> list[StepResult]:
        """One ``llama_decode`` for all ``seqs`` (module documentation):
        first one token for each generating sequence, then prompt chunks in
        order while the batch has room (``n_batch`` tokens); an image next in
        a prompt is encoded and decoded by itself first. Each sequence whose
        input is all decoded samples from its own logits. Sequences of one
        adapter set only (:mod:`missive_llamacpp.variants`): the others
        wait this step (``PENDING``)."""
        ctx, batch, room = self._ctx.ctx, self._batch, self._n_batch
        everyone = seqs
        group = self._variants.choose([seq.prompt.variant for seq in seqs])
        self._variants.switch(ctx, group)
        seqs = [seq for seq in seqs if seq.prompt.variant == group]
        n = 0
        plans: list[
            tuple[Sequence, int, int, list[int]]
        ] = []  # (sequence, tokens added, logits index or -1, draft)
        for seq in sorted(seqs, key=lambda q: (len(q.state.pending) > 1, q.slot)):  # generating ones first
            state: _SeqState = seq.state
            slot = self._slots[seq.slot]
            take = 0
            if room > 0:
                self._decode_image(seq)
                if state.marks:
                    self._checkpoint(seq)
                pos = len(slot.tokens)
                limit = len(state.pending)
                if state.marks:
                    limit = min(limit, state.marks[0] - pos)  # the chunk stops at the next checkpoint
                media = seq.prompt.media
                if media is not None:
                    for span in media.spans:
                        if span.start >= pos:
                            limit = min(limit, span.start - pos)
                            break
                take = min(room, limit)
                seq_id = seq.slot
                for i in range(take):
                    batch.token[n + i] = state.pending[i]
                    batch.pos[n + i] = pos + i
                    batch.n_seq_id[n + i] = 1
                    batch.seq_id[n + i][0] = seq_id
                    batch.logits[n + i] = 0
                n += take
                room -= take
            index = -1
            draft: list[int] = []
            if take and take == len(state.pending) and seq.max_new > 0:
                index = n - 1
                batch.logits[index] = 1
                if take == 1 and state.drafter is not None and room > 0:
                    draft = state.drafter.propose(min(self._draft_cap(seq), room))
                    n = self._add_draft(batch, n, draft, pos + 1, seq.slot)
                    room -= len(draft)
            plans.append((seq, take, index, draft))
        if n:
            batch.n_tokens = n
            rc = llama_cpp.llama_decode(ctx, batch)
            if rc != 0:
                raise ApiError(
                    f"llama.cpp could not decode a batch of {n} tokens for {len(seqs)} sequences "
                    f"(llama_decode returned {rc})"
                )
        results: dict[int, StepResult] = {}
        vocab = self.llm._model.vocab
        for seq, take, index, draft in plans:
            state = seq.state
            if take:
                self._slots[seq.slot].tokens.extend(state.pending[:take])
                del state.pending[:take]
                self._note_pos_min(seq.slot)
            if state.pending:
                results[id(seq)] = PENDING
            elif seq.max_new == 0:
                results[id(seq)] = None  # the prompt is in the cache (warm-up)
            elif draft:
                results[id(seq)] = self._verify(seq, index, draft)
            else:
                token = int(llama_cpp.llama_sampler_sample(state.sampler.sampler, ctx, index))
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    results[id(seq)] = None  # neither shown nor counted
                else:
                    state.pending.append(token)
                    if state.drafter is not None:
                        state.drafter.extend([token])
                    results[id(seq)] = token
        return [results.get(id(seq), PENDING) for seq in everyone]

    @staticmethod
    def _add_draft(batch: Any, n: int, draft: list[int], pos: int, seq_id: int) -> int:
        """Put ``draft`` in ``batch`` from index ``n`` at positions ``pos..``,
        logits at each (each is verified); the batch's new length."""
        for i, token in enumerate(draft):
            batch.token[n + i] = token
            batch.pos[n + i] = pos + i
            batch.n_seq_id[n + i] = 1
            batch.seq_id[n + i][0] = seq_id
            batch.logits[n + i] = 1
        return n + len(draft)

    def _verify(self, seq: Sequence, index: int, draft: list[int]) -> list[int | None]:
        """Sample at ``index`` and after each drafted token
        (:func:`~missive_llamacpp.speculative.verify`); drop the rejected
        positions from the KV cache and the slot; the emitted tokens."""
        state: _SeqState = seq.state
        assert state.drafter is not None and state.length is not None
        ctx, chain, vocab = self._ctx.ctx, state.sampler.sampler, self.llm._model.vocab
        emitted, accepted = verify(
            lambda i: int(llama_cpp.llama_sampler_sample(chain, ctx, index + i)),
            draft,
            lambda token: bool(llama_cpp.llama_vocab_is_eog(vocab, token)),
        )
        slot = self._slots[seq.slot]
        slot.tokens.extend(draft)
        keep = len(slot.tokens) - len(draft) + accepted  # the last input token and the accepted draft
        if keep < len(slot.tokens):
            if not llama_cpp.llama_memory_seq_rm(self._memory, seq.slot, keep, -1):
                raise ApiError(f"llama.cpp could not drop a rejected draft at position {keep}")
            del slot.tokens[keep:]
        self._drafted += len(draft)
        self._accepted += accepted
        state.length.update(len(draft), accepted)
        tokens = [t for t in emitted if t is not None]
        state.drafter.extend(tokens)
        if emitted[-1] is not None:
            state.pending.append(emitted[-1])
        return emitted

    def _decode_image(self, seq: Sequence) -> None:
        """If the next position of ``seq``'s prompt starts an image, encode
        and decode the image there (libmtmd decodes it by itself)."""
        media = seq.prompt.media
        if media is None:
            return
        slot = self._slots[seq.slot]
        state: _SeqState = seq.state
        pos = len(slot.tokens)
        span = media.span_at(pos)
        if span is None or span.start != pos:
            return
        assert self.projector is not None
        llama_cpp.llama_memory_seq_rm(self._memory, seq.slot, pos, -1)
        after = self.projector.decode(self.llm, span, seq.slot, self._n_batch)
        if after != span.end:
            raise ApiError(
                f"llama.cpp placed an image of {span.n_tokens} tokens at {span.start}..{after}, not "
                f"..{span.end}"
            )
        slot.tokens.extend(state.pending[: span.n_tokens])
        del state.pending[: span.n_tokens]

    def step(self, seq: Sequence) -> int | None:
        """:meth:`step_many` of ``seq`` alone until it samples (the engine
        calls ``step_many``; this serves the :class:`Runner` protocol: one
        token a step, so it never drafts)."""
        if seq.state is not None:
            seq.state.drafter = None
        while (result := self.step_many([seq])[0]) is PENDING:
            if seq.cancelled():
                raise Cancelled
        assert not isinstance(result, (Pending, list))
        return result

    def append(self, seq: Sequence, tokens: list[int]) -> None:
        """Queue ``tokens`` after the last sampled one: the next step decodes
        them and samples after them (the thinking budget's close)."""
        seq.state.pending.extend(tokens)
        if seq.state.drafter is not None:
            seq.state.drafter.extend(tokens)

    def detokenizer(self, seq: Sequence) -> _Utf8Text:
        return _Utf8Text(self.llm)

    def end(self, seq: Sequence, ok: bool) -> None:
        """Free the sampler; a failed sequence's slot is emptied (its KV
        cache may hold part of a step)."""
        state: _SeqState | None = seq.state
        if state is not None and state.sampler is not None:
            state.sampler.close()
            state.sampler = None
        if not ok and self.llm is not None:
            self.clear_slot(seq.slot)


def _placed(settings: LlamaCppSettings) -> str:
    """The placement settings in force, for a load failure's message (a
    setting llama.cpp refuses may make it fail with no reason of its own)."""
    fields = (
        "split_mode",
        "main_gpu",
        "tensor_split",
        "override_tensor",
        "cpu_moe",
        "n_cpu_moe",
        "mmap",
        "mlock",
    )
    chosen = [f"{name} = {getattr(settings, name)!r}" for name in fields if name in settings.model_fields_set]
    return f" (with settings {', '.join(chosen)})" if chosen else ""


def _residency(settings: LlamaCppSettings) -> str:
    """How the weights are held, for the load line: ``weights: mapped
    (mmap)`` or ``weights: read into memory (mmap=false)``, then ``, locked
    (mlock)`` when asked (:func:`_check_locked` warns if the limit refused it)."""
    held = "weights: mapped (mmap)" if settings.mmap else "weights: read into memory (mmap=false)"
    return held + (", locked (mlock)" if settings.mlock else "")


def _check_locked(model_id: str) -> None:
    """Warn when ``mlock`` locked nothing (``VmLck`` of ``/proc/self/status``
    is 0: the memlock limit refused it; llama.cpp goes on without it)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return  # not Linux: nothing to read
    locked = next((line.split()[1] for line in status.splitlines() if line.startswith("VmLck:")), None)
    if locked == "0":
        log.warning(
            "model %s: settings.mlock is set but no memory is locked: the memlock limit refused it "
            "(raise `ulimit -l`, or LimitMEMLOCK=infinity in a systemd unit); the weights may be paged out",
            model_id,
        )


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
                model_id,
                requested,
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
    :func:`missive.messages.templating.render_segments`)."""
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
