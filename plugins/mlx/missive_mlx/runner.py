"""The MLX runner: one MLX model folder through mlx-lm, one sequence at a time.

Implements :class:`missive.engine.runner.Runner` (the engine does the rest,
see :mod:`missive.engine.local`). All MLX work (load, prompt evaluation,
sampling, cache copies) runs in the model's thread: mlx-lm's
``generation_stream`` is thread-local.

* **load**: ``mlx_lm.load`` of a folder holding ``config.json`` (checked
  first: ``mlx_lm.load`` would take a missing path for a hub repository and
  try to download it); one token through a fresh cache measures what a
  token costs (and, with ``kv_bits``, checks that mlx-lm can quantize it);
  the context is the entry's ``context_window``, else the largest up to
  ``max_position_embeddings`` that fits the free memory
  (:mod:`missive_mlx.memory`, the arithmetic logged); the chat template is
  ``settings.chat_template`` or the tokenizer's (``tokenizer_config.json`` /
  ``chat_template.jinja``);
* **vision models** (``config.json`` with a ``vision_config``): loaded by
  mlx-vlm, images placed in the prompt, embedded and given to
  ``generate_step`` as input embeddings (:mod:`missive_mlx.vision`);
* **tokenize**: ``tokenizer.encode(text, add_special_tokens=False)`` per
  rendered piece (the template writes the special tokens itself, as
  transformers' ``apply_chat_template(tokenize=True)``), client text with
  ``split_special_tokens=True`` so a typed special token stays text;
* **reusable**: the prefix the prompt cache would serve now
  (:mod:`missive_mlx.prompt_cache`);
* **begin**: takes the best cached prefix and creates ``mlx_lm.generate_step``
  on the rest of the prompt, which evaluates it lazily at the first
  :meth:`MlxRunner.step`, checking the cancel flag between chunks of
  ``prefill_step_size`` tokens; the KV cache settings (``kv_bits``...) are
  ``generate_step``'s own arguments. For a model whose cache cannot always
  be trimmed (recurrent or sliding-window layers), a copy of the cache at the
  prompt's last token but one is kept as a checkpoint
  (:meth:`MlxRunner._checkpoint`);
* **step**: one token of ``generate_step``; a token in
  ``tokenizer.eos_token_ids`` (the tokenizer's EOS plus ``config.json``
  ``eos_token_id``, as mlx-lm's ``stream_generate`` stops) ends the sequence;
* **detokenizer**: :class:`~missive_mlx.detokenize.IncrementalDetokenizer`;
* **append**: ``generate_step`` restarted on the appended tokens with the same
  cache (the thinking budget's close);
* **end**: the KV cache (prompt + generated tokens, EOS included) is stored
  for the next turn, unless the sequence failed or was stopped inside a prompt.

Sampling: the request's values, else the model's defaults (the family table
of :mod:`missive.sampling` by the folder's name, else its
``generation_config.json``), else the API's: mlx-lm's ``make_sampler``,
temperature 1.0 (0 = greedy: argmax), ``top_p``, ``top_k`` and min-p off; no repetition
penalty; ``settings.seed`` set (``mx.random.seed``) before every sequence.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from missive.api import (
    ApiError,
    Cancelled,
    ConfigError,
    ImageMarks,
    ModelInfo,
    Prompt,
    Sampling,
    Sequence,
    folder_sampling,
)

from .constrain import logits_processor
from .detokenize import IncrementalDetokenizer
from .memory import always_trimmable, fit, free_memory, probe
from .prompt_cache import PromptCacheStore
from .settings import MlxSettings
from .vision import VISION_MEDIA_TYPES, Vision, load_vision, vision_model_type

__all__ = ["MlxRunner"]

log = logging.getLogger("missive.mlx")


@dataclass
class _State:
    """A running sequence.

    Attributes:
        cache: mlx-lm per-layer KV caches.
        held: the tokens ``cache`` holds, in order.
        pending: tokens given to ``gen`` that it evaluates into ``cache``
            before its first token (``generate_step`` evaluates each token
            before yielding it: after ``k`` tokens were received the cache
            holds what it held, ``pending`` and those ``k`` tokens).
        gen: the running ``generate_step``.
    """

    cache: list[Any] | None = None
    held: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    gen: Iterator[tuple[int, Any]] | None = None
    sampler: Callable[[Any], Any] | None = None
    processors: list[Callable[[Any, Any], Any]] | None = None  # the grammar's, for a constrained sequence


class MlxRunner:
    """One MLX model folder (see the module documentation).

    Args:
        model_id: for messages.
        settings: the validated settings.
        context_window: the entry's (None: ``max_position_embeddings``).
    """

    backend = "mlx"
    # Hugging Face fast tokenizers are not meant for concurrent calls on one instance.
    tokenize_threads = 1

    def __init__(self, model_id: str, settings: MlxSettings, context_window: int | None) -> None:
        self.model_id = model_id
        self.settings = settings
        self.requested_context = context_window
        self.model: Any = None
        self.tokenizer: Any = None
        self.store: PromptCacheStore | None = None
        self.checkpoints = False  # set at load: the model's cache cannot always be trimmed
        self.vision: Vision | None = None  # set at load for a vision model (images)
        self.image_marker: Callable[[int, str], str] | None = None

    # -- load and close ----------------------------------------------------

    def load(self) -> ModelInfo:
        """Load the model folder.

        Raises:
            ConfigError: folder missing or not loadable, no context length, no
                chat template.
        """
        path = self.settings.path
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model '{self.model_id}': not an MLX model folder (no config.json): {path} "
                "(settings.model_path)"
            )
        import mlx_lm
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

        model_type = vision_model_type(path)
        loaded = load_vision(self.model_id, path, model_type) if model_type is not None else None
        vision: Vision | None = None
        if loaded is not None:
            model, tokenizer, vision = loaded
        else:
            try:
                model, tokenizer = mlx_lm.load(str(path))
            except (ValueError, OSError, KeyError, json.JSONDecodeError) as exc:
                raise ConfigError(f"model '{self.model_id}': mlx-lm could not load {path}: {exc}") from exc
        settings = self.settings
        costs, quantized = probe(self.model_id, model, settings.kv_bits, settings.kv_group_size)
        self.checkpoints = settings.prompt_cache_entries > 0 and not always_trimmable(
            make_prompt_cache(model)
        )
        sized = fit(
            self.model_id,
            costs,
            free_memory(),
            trained=_config_context(path),
            window=self.requested_context,
            # besides the one in use: the store's entries (and checkpoints), the other slots'
            entries=settings.prompt_cache_entries * (2 if self.checkpoints else 1) + settings.parallel - 1,
            quantized=quantized,
            quantized_start=settings.quantized_kv_start,
        )
        context = sized.window
        template = self.settings.chat_template or _template_of(tokenizer)
        if not template:
            raise ConfigError(
                f"model '{self.model_id}': the tokenizer has no chat template; set settings.chat_template"
            )
        self.store = PromptCacheStore(
            self.settings.prompt_cache_entries,
            can_trim=can_trim_prompt_cache,
            trim=trim_prompt_cache,
            whole_images=vision is not None and vision.family.bidirectional,
        )
        self.model, self.tokenizer = model, tokenizer
        self.vision = vision
        self.image_marker = vision.marker if vision is not None else None
        kv = (
            "model dtype"
            if settings.kv_bits is None
            else (
                f"{settings.kv_bits}-bit (group {settings.kv_group_size}) from {settings.quantized_kv_start} "
                "tokens"
            )
        )
        log.info(
            "model %s loaded from %s: context %d, eos %s, %d cached prefixes, checkpoints %s, "
            "KV cache %s, prefill_step_size %d",
            self.model_id,
            path,
            context,
            sorted(tokenizer.eos_token_ids),
            settings.prompt_cache_entries,
            "on" if self.checkpoints else "off",
            kv,
            settings.prefill_step_size,
        )
        log.info("model %s memory: %s", self.model_id, sized.arithmetic)
        return ModelInfo(
            context_window=context,
            chat_template=template,
            bos_text=tokenizer.bos_token or "",
            eos_text=tokenizer.eos_token or "",
            control_texts=_control_texts(tokenizer),
            sampling=folder_sampling(path),
            input_media=VISION_MEDIA_TYPES if vision is not None else frozenset(),
        )

    def close(self) -> None:
        import mlx.core as mx

        self.model = self.tokenizer = self.vision = None
        if self.store is not None:
            self.store.clear()
        mx.clear_cache()

    # -- prompt (tokenizing thread) ----------------------------------------

    def tokenize(self, pieces: list[tuple[str, bool]], marks: ImageMarks | None) -> Prompt:
        """Token ids of the rendered pieces.

        Raises:
            ApiError: the template rendered nothing.
        """
        tokenizer = self._tokenizer()

        def encode(text: str, client: bool) -> list[int]:
            # A control token's text a client sent is text: split_special_tokens
            # keeps the tokenizer from matching it as the special token.
            extra = {"split_special_tokens": True} if client else {}
            return list(tokenizer.encode(text, add_special_tokens=False, **extra))

        if marks is not None and self.vision is not None:
            return self.vision.tokenize(encode, pieces, marks)
        tokens: list[int] = []
        for text, client in pieces:
            tokens += encode(text, client)
        if not tokens:
            raise ApiError("the chat template rendered an empty prompt")
        return Prompt(tokens)

    def encode_special(self, text: str) -> list[int]:
        return list(self._tokenizer().encode(text, add_special_tokens=False))

    def reusable(self, prompt: Prompt) -> int:
        assert self.store is not None
        return self.store.reusable(prompt.tokens, prompt.cache_scope)

    def _tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise ApiError(f"model '{self.model_id}' is not loaded")
        return self.tokenizer

    # -- sequences (the model's thread) ------------------------------------

    def begin(self, seq: Sequence) -> None:
        import mlx.core as mx
        from mlx_lm.models.cache import make_prompt_cache

        assert self.store is not None
        grammar = logits_processor(seq.sampling)
        state = seq.state = _State(sampler=_sampler(seq.sampling), processors=[grammar] if grammar else None)
        if self.settings.seed is not None:
            mx.random.seed(self.settings.seed)
        prompt = seq.prompt.tokens
        state.cache, seq.reused = self.store.take(
            prompt, lambda: make_prompt_cache(self.model), seq.prompt.cache_scope
        )
        state.held = prompt[: seq.reused]
        self._start(seq, prompt[seq.reused :], seq.max_new, checkpoint=self.checkpoints)
        if seq.max_new == 0:
            assert state.gen is not None
            next(state.gen, None)  # evaluate the prompt only (cache warm-up)
            state.held, state.pending = list(prompt), []

    def _start(self, seq: Sequence, tokens: list[int], max_tokens: int, checkpoint: bool = False) -> None:
        import mlx.core as mx
        from mlx_lm.generate import generate_step

        state: _State = seq.state
        settings = self.settings

        def check_cancelled(processed: int, total: int) -> None:
            if seq.cancelled():
                raise Cancelled
            # generate_step calls this after each evaluated chunk of all but the
            # prompt's last token, and first with 0: at total - 1 the cache holds
            # everything but the last token (evaluated with the first sample).
            # At 0 nothing was evaluated: the cache holds an entry's tokens (kept).
            if checkpoint and 0 < processed == total - 1:
                self._checkpoint(state.cache, state.held + state.pending[:processed], seq.prompt.cache_scope)

        state.pending = list(tokens)
        inputs, embeddings = (
            self.vision.inputs(seq.prompt, len(state.held), tokens)
            if self.vision is not None
            else (mx.array(tokens), None)
        )
        state.gen = generate_step(
            inputs,
            self.model,
            max_tokens=max_tokens,
            sampler=state.sampler,
            logits_processors=state.processors,
            prompt_cache=state.cache,
            prefill_step_size=settings.prefill_step_size,
            kv_bits=settings.kv_bits,
            kv_group_size=settings.kv_group_size,
            quantized_kv_start=settings.quantized_kv_start,
            prompt_progress_callback=check_cancelled,
            input_embeddings=embeddings,
        )

    def step(self, seq: Sequence) -> int | None:
        state: _State = seq.state
        assert state.gen is not None
        step = next(state.gen, None)
        if step is None:
            return None
        token = int(step[0])
        if state.pending:  # the tokens given to the generator are in the cache once a token came out
            state.held += state.pending
            state.pending = []
        state.held.append(token)
        if token in self.tokenizer.eos_token_ids:
            return None
        return token

    def append(self, seq: Sequence, tokens: list[int]) -> None:
        state: _State = seq.state
        if state.gen is not None:
            state.gen.close()
        self._start(seq, tokens, seq.max_new - len(seq.output))

    def detokenizer(self, seq: Sequence) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self._decode, seq.prompt.tokens)

    def _decode(self, ids: Any) -> str:
        return str(
            # An image's positions (negative synthetic ids) are no text.
            self.tokenizer.decode(
                [i for i in ids if i >= 0], skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        )

    def end(self, seq: Sequence, ok: bool) -> None:
        state: _State | None = seq.state
        if state is None:
            return
        if state.gen is not None:
            state.gen.close()
            state.gen = None
        if state.cache is not None and ok:
            self._keep(state.cache, state.held, seq.prompt.cache_scope)

    def _checkpoint(self, cache: list[Any] | None, held: list[int], scope: Hashable | None = None) -> None:
        """Keep a copy of ``cache`` (holding ``held``) as an entry of its own.

        For caches that cannot be cut back, the entry kept after a request
        (prompt and answer) serves only prompts it is a prefix of; a copy
        taken at the end of the prompt also serves the same prompt sent again
        (a retry, a regenerated answer) and a next turn that renders the
        answer differently (thinking dropped by the template, a tool call
        re-rendered). mlx-lm's own server keeps such copies (its
        ``LRUPromptCache`` entries at the ends of the system prompt and the
        prompt, ``copy.deepcopy`` on every fetch): a copy of every layer's
        arrays, in memory and time the size of the cache.
        """
        import copy

        assert self.store is not None
        if cache is None or not held:
            return
        self.store.put(held, copy.deepcopy(cache), checkpoint=True, scope=scope)

    def _keep(self, cache: list[Any], held: list[int], scope: Hashable | None = None) -> None:
        import mlx.core as mx

        assert self.store is not None
        # A recurrent layer's ArraysCache has no offset: read an attention layer's.
        offset = next((c.offset for c in cache if hasattr(c, "offset")), len(held))
        if offset != len(held):  # never store a cache whose content is unknown
            log.warning("prompt cache holds %d tokens, expected %d: not kept", offset, len(held))
            return
        try:
            mx.eval([c.state for c in cache])
        except Exception:  # a cache that cannot be evaluated is dropped (logged)
            log.exception("prompt cache could not be evaluated: not kept")
            return
        self.store.put(held, cache, scope=scope)


def _sampler(sampling: Sampling) -> Callable[[Any], Any]:
    """mlx-lm sampler for the request's parameters (API defaults when unset)."""
    from mlx_lm.sample_utils import make_sampler

    return make_sampler(
        temp=1.0 if sampling.temperature is None else sampling.temperature,
        top_p=0.0 if sampling.top_p is None else sampling.top_p,  # 0 and 1: no nucleus cut
        min_p=0.0 if sampling.min_p is None else sampling.min_p,  # 0: no min-p cut
        top_k=0 if sampling.top_k is None else sampling.top_k,  # 0: no top-k cut
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


def _control_texts(tokenizer: Any) -> tuple[str, ...]:
    """Texts of the tokenizer's special added tokens (``<|im_end|>``...): the
    ones ``encode`` matches in text unless ``split_special_tokens``."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return tuple(sorted({t.content for t in decoder.values() if getattr(t, "special", False) and t.content}))
