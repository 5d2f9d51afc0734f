"""The ``[models.<id>.settings]`` table of a ``driver = "llamacpp"`` model.

Example::

    [models.qwen]
    driver = "llamacpp"
    context_window = 32768          # n_ctx; unset: the model's training context
    [models.qwen.settings]
    model_path = "~/models/qwen2.5-7b-instruct-q4_k_m.gguf"
    mmproj_path = "~/models/mmproj-f16.gguf"  # vision projector: the model takes images
    n_threads = 8                   # default: CPUs this process may use
    n_batch = 512                   # prompt tokens per decode call
    n_ubatch = 512                  # tokens per compute pass inside a decode call
    flash_attn = "auto"             # flash attention: "auto" (llama.cpp decides), "on", "off"
    cache_type_k = "q8_0"           # KV cache types: f16 (default), q8_0 (half), q4_0...;
                                    #   quantized V needs flash attention
    cache_type_v = "q8_0"
    n_gpu_layers = -1               # layers offloaded to the GPU (-1: all, the default with a GPU
                                    #   build; 0: CPU)
    extra_buffer_types = "auto"     # weight repacking (AMX, AVX2/AVX-512): "auto" tries it, "on", "off"
    n_cpu_moe = 20                  # routed experts of the first 20 layers in host memory
    cpu_moe = false                 #   (cpu_moe = true: every layer's); llama-server's --n-cpu-moe
    override_tensor = ["blk\\.1[0-9]\\.ffn_.*_exps=CPU"]  # llama-server's -ot PATTERN=BUFFER_TYPE
    split_mode = "layer"            # several GPUs: "layer" (default), "row", "tensor", "none"
    main_gpu = 0                    # the GPU of "none" (all of it) and "row" (small tensors)
    tensor_split = [3, 1]           # the share of each GPU (llama-server's --tensor-split 3,1)
    kv_offload = true               # the KV cache on the GPU with its layers; false: in host memory
    mmap = true                     # map the file (default); false: read it into memory
    mlock = false                   # keep the weights resident (no swapping)
    lora = [{path = "~/adapters/style.gguf", scale = 0.8}]  # LoRA adapters (a path alone: scale 1)
    parallel = 4                    # slots: sequences decoded together; default "auto"
                                    #   (4, fewer if memory is short)
    kv_unified = true               # one KV pool the slots share (default);
                                    #   false: a window of its own per slot
    kv_pool_tokens = 32768          # the pool's size in tokens; default "auto": what fits,
                                    #   at most parallel x window
    swa_full = false                # sliding-window models: keep the whole window
                                    #   (cuts anywhere) instead of checkpoints
    ctx_checkpoints = 16            # context checkpoints per slot (hybrid, recurrent,
                                    #   sliding-window models); 0: off
    checkpoint_interval = 4096      # tokens between checkpoints inside a long prompt
    cache_ram_mib = 4096            # host RAM for prompts that left the context;
                                    #   default: 1/4 of RAM, <= 8192; 0: off
    cache_disk_mib = 8192           # their disk tier in the state directory;
                                    #   default: 1/4 of the free disk, <= 8192; 0: off
    speculative = "ngram"           # speculative decoding: "auto" (default: where a timed
                                    #   step says it pays), "ngram", "draft", "off"
    draft_model = "~/models/qwen2.5-0.5b-instruct-q8_0.gguf"  # a small model of the same
                                    #   vocabulary drafting ("auto" times it; llama-server's -md)
    draft_p_min = 0.75              # the draft model's tokens kept while this probable
    draft_gpu_layers = -1           # its n_gpu_layers (default: the model's)
    draft_max = 16                  # most tokens drafted a step (the length adapts per sequence)
    draft_min = 1                   # fewest tokens a shrinking draft length goes down to
    prompt_lookup_min = 2           # shortest n-gram looked up in the sequence's earlier tokens
    prompt_lookup_max = 4           # longest
    seed = 42                       # fixed sampling seed (default: random per request)
    chat_template = "..."           # Jinja override of the GGUF's tokenizer.chat_template
    tool_parser = "hermes"          # tool call format; default: from the template
    reasoning_parser = "think"      # reasoning format or "none"; default: from the template
    verbose = false                 # llama.cpp's own logging on stderr

    [models.qwen-style]             # the same load through other LoRA adapters, chosen by model id
    driver = "llamacpp"             #   (missive_llamacpp.shared: only base and lora are set)
    settings = {base = "qwen", lora = [{path = "~/adapters/style.gguf", scale = 1.0}]}

Unknown keys are rejected (a typo must not silently fall back to a default).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from missive.api import ConfigError

__all__ = ["CACHE_TYPES", "LlamaCppSettings", "available_cpus", "parse_settings"]

#: Most slots (llama.cpp's LLAMA_MAX_SEQ is 256; beyond a few dozen the
#: per-step Python work of each sequence dominates).
MAX_PARALLEL = 64

#: KV cache types llama.cpp accepts for ``type_k``/``type_v`` (its
#: ``--cache-type-k`` list, ``common/arg.cpp`` ``kv_cache_types``), by name.
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: Most GPUs a ``tensor_split`` shares among (llama.cpp's ``LLAMA_MAX_DEVICES``).
MAX_DEVICES = 16

# llama.cpp reserves 0xFFFFFFFF (LLAMA_DEFAULT_SEED) for "random seed".
_MAX_SEED = 0xFFFFFFFF - 1


def available_cpus() -> int:
    """CPUs this process may run on (affinity-aware, so right in containers);
    falls back to :func:`os.cpu_count`, then 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class LoraAdapter(BaseModel):
    """One entry of ``settings.lora``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    scale: float = Field(default=1.0, allow_inf_nan=False, strict=True)

    @property
    def file(self) -> Path:
        return Path(self.path).expanduser()


class LlamaCppSettings(BaseModel):
    """Validated driver settings.

    Attributes:
        model_path: the GGUF file (``~`` expanded). A reference
            (``hf://...``, an Ollama name) is resolved to the file by the
            core before the driver is built (:mod:`missive.models.sources`).
        mmproj_path: the model's multimodal projector GGUF (``~`` expanded;
            llama-server's ``--mmproj``), loaded with libmtmd: the model then
            takes images (:mod:`missive_llamacpp.vision`). None: text only.
        n_threads: CPU threads for generation and prompt decoding; None:
            :func:`available_cpus`.
        n_batch: maximum prompt tokens per ``llama_decode`` call (llama-cpp-python
            caps it at ``n_ctx``).
        n_ubatch: tokens per compute pass inside one ``llama_decode`` call
            (llama.cpp's ``--ubatch-size``), at most ``n_batch``. Larger
            passes read long prompts faster on GPUs and cost a larger
            compute buffer (and, for sliding-window models, ``n_ubatch``
            more cells of window cache per pool).
        flash_attn: llama.cpp's flash attention (``--flash-attn``):
            ``"auto"`` (the default, llama.cpp's own: on where the backend
            supports it for this model), ``"on"``, ``"off"``. It reads long
            prompts faster on CPU and GPU alike, keeps the compute buffer
            small, and a quantized V cache needs it.
        cache_type_k, cache_type_v: types of the KV cache's keys and values
            (llama.cpp's ``--cache-type-k``/``-v``): ``f16`` (the default),
            ``q8_0`` (half the memory, a negligible loss), ``q4_0`` (a
            quarter, a measurable loss), or another of :data:`CACHE_TYPES`.
            A quantized ``cache_type_v`` needs flash attention (``"off"``
            with one is a configuration error).
        n_gpu_layers: layers llama.cpp offloads to the GPU, -1 for all (its
            ``--n-gpu-layers``), 0 for none. None (the default): all of them
            when this llama-cpp-python was built with a GPU backend (CUDA,
            Metal, Vulkan...: ``llama_supports_gpu_offload``), else 0; see
            :attr:`gpu_layers`. A CPU-only build ignores other values, with a
            warning at load. The vision projector follows: on the GPU when
            any layer is.
        extra_buffer_types: llama.cpp's extra buffer types (``use_extra_bufts``:
            weights repacked for AMX or AVX2/AVX-512/NEON kernels;
            llama-server's ``--repack``/``--no-repack``). ``"auto"`` tries the
            model in a child process at start-up, with them and, if that
            crashes, without (:mod:`missive_llamacpp.trial`); ``"on"`` and
            ``"off"`` choose without a trial. Their kernels crash on some
            CPUs: ggml-org/llama.cpp #20824, ollama/ollama #17006.
        n_cpu_moe: the routed experts (``ffn_*_exps``) of layers 0..N-1 stay
            in host memory while their layers' attention goes where
            ``n_gpu_layers`` puts it (llama-server's ``--n-cpu-moe``): a
            30B-A3B mixture of experts on a 16 GB GPU. 0: off.
        cpu_moe: every layer's routed experts in host memory
            (``--cpu-moe``); set this or ``n_cpu_moe``, not both.
        override_tensor: tensor buffer overrides, ``PATTERN=BUFFER_TYPE``
            each (llama-server's ``-ot``; a string is split at commas): the
            tensors whose name the regex finds go to that buffer type
            (``CPU``, ``CUDA0``...). Tried before the expert settings; the
            first match wins. Checked at load (:mod:`missive_llamacpp.placement`):
            a pattern finding no tensor, a buffer type no device has, is a
            start-up error.
        split_mode: how several GPUs share the model (``--split-mode``):
            ``"layer"`` (the default: whole layers per GPU), ``"row"``
            (tensors split by rows), ``"tensor"``, ``"none"`` (one GPU,
            ``main_gpu``).
        main_gpu: the GPU ``"none"`` puts everything on, and ``"row"`` its
            small tensors and intermediate results on (``--main-gpu``).
        tensor_split: each GPU's share of the model, in proportion
            (``--tensor-split 3,1``: three quarters on the first). None: by
            free memory, llama.cpp's default.
        kv_offload: the KV cache of offloaded layers on the GPU (the
            default); false keeps it in host memory (``--no-kv-offload``),
            for a long context on a small GPU.
        mmap: map the GGUF file instead of reading it into memory (the
            default; ``--no-mmap``: false).
        mlock: lock the weights in memory so the system never swaps them
            out (``--mlock``); needs the memlock limit to allow it.
        lora: LoRA adapters applied to every request of this model
            (llama-server's ``--lora`` / ``--lora-scaled``), each a GGUF
            adapter of this model's architecture and a scale
            (:mod:`missive_llamacpp.lora`); a path alone means scale 1.
        parallel: slots, the sequences decoded together (continuous batching;
            llama-server's ``--parallel``, Ollama's ``OLLAMA_NUM_PARALLEL``).
            ``"auto"`` (the default): 4, fewer when the memory cannot hold
            them (:mod:`missive_llamacpp.memory`).
        kv_unified: one KV pool of ``kv_pool_tokens`` cells that the slots
            share (llama.cpp's ``kv_unified``; llama-server's default when
            ``--parallel`` is not given, its server.cpp): a
            conversation takes the cells it uses, up to ``context_window``.
            When a step needs more cells than are free, idle slots are
            saved to the host-memory cache and emptied, then the newest
            running sequences are paused the same way and resumed when
            cells are free again; a decode never fails for lack of room.
            False: every slot has a KV cache of a whole ``context_window``
            (``parallel x context_window`` cells, as Ollama sizes them).
        kv_pool_tokens: the unified pool's size in tokens (cells), at least
            ``context_window``. ``"auto"`` (the default): ``parallel x
            context_window``, less when the free memory cannot hold it
            (:mod:`missive_llamacpp.memory` logs the arithmetic).
        swa_full: for sliding-window models (Gemma 3, gpt-oss): keep every
            position in the window layers' cache too (llama.cpp's
            ``--swa-full``), so a cached prompt can be cut anywhere, at the
            cost of a full-size cache for those layers (6x the KV memory
            for Gemma 3). False (the default): the window layers keep their
            window only, and context checkpoints restore earlier states.
        ctx_checkpoints: context checkpoints kept per slot for models whose
            cache cannot be cut at any position (recurrent and hybrid models,
            sliding-window ones without ``swa_full``; llama-server's
            ``--ctx-checkpoints``): copies of the part of the state that
            cannot be cut (recurrent state, window cache), taken while a
            prompt is read (every ``checkpoint_interval`` tokens, and
            ``n_ubatch + 4`` and 4 tokens before the prompt's end), so a
            later prompt that parts from the cached one restores the nearest
            earlier checkpoint instead of reading everything again. 0: off.
            They live in host memory and take at most a quarter of
            ``cache_ram_mib``, shared by the slots, oldest dropped first
            (:mod:`missive_llamacpp.checkpoints`).
        checkpoint_interval: tokens between checkpoints inside a long prompt.
        cache_ram_mib: MiB of host memory for prompts that left the context
            (llama-server's ``--cache-ram``): a conversation's KV state is
            kept there when another request takes the context, and restored
            on its next turn (:mod:`missive.engine.host_cache`). None: a
            quarter of the machine's memory, at most 8192; 0: off.
        cache_disk_mib: MiB of disk for the same states, kept as files in
            ``<state directory>/prompt-cache`` (``$MISSIVE_PROMPT_CACHE_DIR``)
            and found again after a restart or an idle unload
            (:mod:`missive.engine.disk_cache`). None: a quarter of the free
            disk, at most 8192; 0: off (also off when ``cache_ram_mib`` is 0).
        speculative: speculative decoding (:mod:`missive_llamacpp.speculative`):
            ``"ngram"`` drafts tokens by prompt lookup (the
            tokens that followed the last few tokens' most recent earlier
            occurrence in the prompt or output: code edits and tool inputs
            repeat text the prompt holds) and verifies them in the step's
            one ``llama_decode``; greedy output is the same as without it,
            sampled output keeps its distribution. ``"off"``: one token
            a step. ``"auto"`` (the default): ``"ngram"`` where it can pay,
            else ``"off"``, decided at load by timing a 9-token
            ``llama_decode`` against a 1-token one (drafting pays where
            decode is memory-bound: a GPU, a large model; on the embedded
            SmolLM2 on 2 CPU cores a 9-token step costs ~7 one-token steps,
            so it stays off there: benchmarks/README.md); the load line
            gives the figures and the choice. Only for models whose KV cache can be cut anywhere (plain
            attention; a sliding-window model with ``swa_full``): recurrent,
            hybrid and sliding-window models cannot drop a rejected draft,
            and decode one token a step (the load line says which). Not for
            a request with a thinking budget (its close is written between
            steps).
        draft_model: a small GGUF model of the same vocabulary that drafts
            instead of prompt lookup (llama-server's ``--model-draft``;
            :mod:`missive_llamacpp.draft`): ``speculative = "draft"`` uses
            it, ``"auto"`` times its token against the model's and drafts
            with it where that pays. A vocabulary that differs, or a
            recurrent, hybrid or sliding-window draft model, is a start-up
            error.
        draft_p_min: the draft model's tokens are drafted while the most
            probable one is at least this probable (llama.cpp's
            ``--draft-p-min``, 0.75).
        draft_gpu_layers: the draft model's ``n_gpu_layers`` (``-ngld``);
            None: the model's.
        draft_max: most tokens drafted for a sequence in one step (1..64;
            llama-server's ``--draft-max``); each sequence's length adapts
            between ``draft_min`` and this to how much of its drafts is
            accepted.
        draft_min: the shortest a sequence's draft length shrinks to.
        prompt_lookup_min, prompt_lookup_max: the n-gram sizes looked up,
            longest first (vLLM's settings of the same names).
        seed: sampling seed, 0..4294967294, reused for every request so equal
            requests sample equally; None: a fresh random seed per request.
        chat_template: Jinja chat template replacing the GGUF's.
        tool_parser: tool call format (a registered parser: ``hermes``,
            ``llama3``, ``mistral``, ``harmony``); default: chosen from the chat
            template, Hermes when the template has no tool support.
        reasoning_parser: reasoning format (a registered reasoning parser:
            ``think``, ``harmony``, ``mistral_think``, ``seed_think``, ``gemma4_thought``) or
            ``"none"``; default: chosen from the chat template (none when the
            template shows no reasoning format: the model cannot think).
        verbose: let llama.cpp log to stderr.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str = Field(min_length=1)
    mmproj_path: str | None = Field(default=None, min_length=1)
    n_threads: int | None = Field(default=None, ge=1)
    n_batch: int = Field(default=512, ge=1)
    n_ubatch: int = Field(default=512, ge=1)
    flash_attn: Literal["auto", "on", "off"] = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_gpu_layers: int | None = Field(default=None, ge=-1)
    extra_buffer_types: Literal["auto", "on", "off"] = "auto"
    n_cpu_moe: StrictInt = Field(default=0, ge=0)
    cpu_moe: StrictBool = False
    override_tensor: list[str] = Field(default_factory=list)
    split_mode: Literal["none", "layer", "row", "tensor"] = "layer"
    main_gpu: StrictInt = Field(default=0, ge=0)
    tensor_split: list[Annotated[float, Field(allow_inf_nan=False)]] | None = None
    kv_offload: StrictBool = True
    mmap: StrictBool = True
    mlock: StrictBool = False
    lora: list[LoraAdapter] = Field(default_factory=list)
    parallel: int | Literal["auto"] = "auto"
    kv_unified: bool = True
    kv_pool_tokens: int | Literal["auto"] = "auto"
    swa_full: bool = False
    ctx_checkpoints: int = Field(default=16, ge=0, le=256)
    checkpoint_interval: int = Field(default=4096, ge=64)
    cache_ram_mib: int | None = Field(default=None, ge=0)
    cache_disk_mib: int | None = Field(default=None, ge=0)
    speculative: Literal["auto", "ngram", "draft", "off"] = "auto"
    draft_model: str | None = Field(default=None, min_length=1)
    draft_p_min: float = Field(default=0.75, ge=0.0, le=1.0, allow_inf_nan=False, strict=True)
    draft_gpu_layers: StrictInt | None = Field(default=None, ge=-1)
    draft_max: int = Field(default=16, ge=1, le=64)
    draft_min: int = Field(default=1, ge=1, le=64)
    prompt_lookup_min: int = Field(default=2, ge=1, le=16)
    prompt_lookup_max: int = Field(default=4, ge=1, le=16)
    seed: int | None = Field(default=None, ge=0, le=_MAX_SEED)
    chat_template: str | None = Field(default=None, min_length=1)
    tool_parser: str | None = Field(default=None, min_length=1)
    reasoning_parser: str | None = Field(default=None, min_length=1)
    verbose: bool = False

    @field_validator("parallel", mode="before")
    @classmethod
    def _parallel(cls, value: Any) -> Any:
        if value == "auto" or (
            isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_PARALLEL
        ):
            return value
        raise ValueError(f'must be "auto" or a whole number from 1 to {MAX_PARALLEL}, got {value!r}')

    @field_validator("kv_pool_tokens", mode="before")
    @classmethod
    def _pool(cls, value: Any) -> Any:
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 256):
            return value
        raise ValueError(f'must be "auto" or a number of tokens of at least 256, got {value!r}')

    @field_validator("cache_type_k", "cache_type_v")
    @classmethod
    def _cache_type(cls, value: str) -> str:
        if value.lower() not in CACHE_TYPES:
            raise ValueError(f"must be one of {', '.join(CACHE_TYPES)}, got {value!r}")
        return value.lower()

    @field_validator("override_tensor", mode="before")
    @classmethod
    def _overrides(cls, value: Any) -> Any:
        if isinstance(value, str):  # llama-server's -ot value: pairs separated by commas
            value = [part for part in value.split(",") if part.strip()]
        if isinstance(value, list) and all(isinstance(v, str) and "=" in v for v in value):
            return [v.strip() for v in value]
        raise ValueError(
            "must be PATTERN=BUFFER_TYPE strings (a list, or one string of them separated by commas), "
            f"got {value!r}"
        )

    @field_validator("lora", mode="before")
    @classmethod
    def _lora(cls, value: Any) -> Any:
        if isinstance(value, (str, dict)):
            value = [value]
        if isinstance(value, list):
            return [{"path": item} if isinstance(item, str) else item for item in value]
        return value

    @field_validator("tensor_split")
    @classmethod
    def _split(cls, value: list[float] | None) -> list[float] | None:
        if value is None:
            return None
        if not value or len(value) > MAX_DEVICES or any(share < 0 for share in value) or sum(value) <= 0:
            raise ValueError(
                f"must be 1 to {MAX_DEVICES} shares of at least 0, not all 0 (one per GPU, in proportion: "
                f"[3, 1]), got {value!r}"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> LlamaCppSettings:
        if self.speculative == "draft" and self.draft_model is None:
            raise ValueError(
                'speculative = "draft" needs a draft_model (a small model of the same vocabulary)'
            )
        if self.cpu_moe and self.n_cpu_moe:
            raise ValueError(
                "cpu_moe keeps every layer's experts in host memory, n_cpu_moe the first N layers': set one"
            )
        # llama.cpp refuses a quantized V cache without flash attention
        # ("quantized V cache requires flash_attn to be enabled", llama_init_from_model).
        if self.flash_attn == "off" and self.cache_type_v not in ("f32", "f16", "bf16"):
            raise ValueError(
                f"cache_type_v = {self.cache_type_v!r} needs flash attention: set flash_attn to \"auto\" or "
                "\"on\", or cache_type_v to \"f16\""
            )
        if self.draft_min > self.draft_max:
            raise ValueError(f"draft_min ({self.draft_min}) cannot exceed draft_max ({self.draft_max})")
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"prompt_lookup_min ({self.prompt_lookup_min}) cannot exceed "
                f"prompt_lookup_max ({self.prompt_lookup_max})"
            )
        if self.n_ubatch > self.n_batch:
            raise ValueError(f"n_ubatch ({self.n_ubatch}) cannot exceed n_batch ({self.n_batch})")
        return self

    @property
    def path(self) -> Path:
        return Path(self.model_path).expanduser()

    @property
    def draft_path(self) -> Path | None:
        return Path(self.draft_model).expanduser() if self.draft_model is not None else None

    @property
    def mmproj(self) -> Path | None:
        return Path(self.mmproj_path).expanduser() if self.mmproj_path is not None else None

    @property
    def gpu_layers(self) -> int:
        """The ``n_gpu_layers`` llama.cpp is given: the setting, or when unset
        -1 (all) if this build can offload to a GPU, else 0."""
        if self.n_gpu_layers is not None:
            return self.n_gpu_layers
        import llama_cpp

        return -1 if llama_cpp.llama_supports_gpu_offload() else 0

    @property
    def threads(self) -> int:
        return self.n_threads if self.n_threads is not None else available_cpus()


def parse_settings(model_id: str, settings: dict[str, Any]) -> LlamaCppSettings:
    """Validate a model entry's ``settings``.

    Raises:
        ConfigError: naming the model and each bad key, e.g.
            ``model 'qwen': invalid llamacpp setting settings.n_batch: Input should be a valid integer``.
    """
    try:
        return LlamaCppSettings.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            # A check across settings has no field of its own: its message names them.
            (f"settings.{'.'.join(str(p) for p in err['loc'])}: " if err["loc"] else "settings: ")
            + str(err["msg"]).removeprefix("Value error, ")
            for err in exc.errors()
        )
        raise ConfigError(f"model '{model_id}': invalid llamacpp setting {problems}") from exc
