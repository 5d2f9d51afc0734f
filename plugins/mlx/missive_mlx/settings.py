"""The ``[models.<id>.settings]`` table of a ``driver = "mlx"`` model.

Example::

    [models.qwen]
    driver = "mlx"
    context_window = 32768          # unset: what fits the free memory, up to max_position_embeddings
    [models.qwen.settings]
    model_path = "~/models/Qwen2.5-7B-Instruct-4bit"   # an MLX model folder
    prompt_cache_entries = 4        # cached prompt prefixes kept (LRU); 0: none
    seed = 42                       # fixed sampling seed (default: random)
    chat_template = "..."           # Jinja override of the tokenizer's chat template
    prefill_step_size = 512         # prompt tokens per forward pass
    kv_bits = 8                     # quantized KV cache (mlx-lm's QuantizedKVCache)
    kv_group_size = 64
    quantized_kv_start = 0          # tokens before the cache is quantized
    parallel = 1                    # slots: sequences decoded together (default 1;
                                    #   above 1 without seed and kv_bits)

Unknown keys are rejected (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from missive.api import ConfigError

__all__ = ["MlxSettings", "parse_settings"]


class MlxSettings(BaseModel):
    """Validated driver settings.

    Attributes:
        model_path: an MLX model folder (``config.json``, ``*.safetensors``,
            tokenizer files), as written by ``mlx_lm.convert`` or downloaded
            from the mlx-community organisation; ``~`` expanded. The core
            resolves an ``hf://OWNER/REPO`` reference to the downloaded
            folder before the driver is built (:mod:`missive.models.sources`).
        prompt_cache_entries: how many prompt prefixes (token list + KV cache)
            are kept for reuse, least recently used evicted first; 0 disables
            reuse. Memory: each entry holds the KV cache of up to
            ``context_window`` tokens.
        seed: sampling seed (``mx.random.seed``), set before every request so
            equal requests sample equally; None: MLX's own random state.
        chat_template: Jinja chat template replacing the tokenizer's.
        tool_parser: tool call format (a registered parser); default: chosen
            from the chat template, Hermes when it has no tool support.
        reasoning_parser: reasoning format (``think``, ``harmony``...) or
            ``"none"``; default: chosen from the chat template. The thinking
            budget is enforced (:mod:`missive.engine.budget`).
        prefill_step_size: prompt tokens evaluated per forward pass
            (mlx-lm's ``generate_step`` default is 2048); lower bounds the
            memory peak of long prompts.
        kv_bits: quantize the KV cache to this many bits (mlx-lm's
            ``QuantizedKVCache``, ``mx.quantize``: 2, 3, 4, 5, 6 or 8);
            None: the model's dtype (bf16/f16). 8 bits take about half the
            memory of bf16 keys and values (plus a scale and a bias per
            group), 4 about a quarter; the cost is some precision of
            attention and a quantized matmul per layer.
        kv_group_size: elements sharing one scale and bias (32, 64 or 128;
            mlx-lm's default 64); it must divide the model's head dimension
            (checked at load).
        quantized_kv_start: the cache is quantized once it holds this many
            tokens (mlx-lm's ``maybe_quantize_kv_cache``; its default 5000):
            short conversations keep full precision.
        parallel: slots, the sequences decoded together (continuous
            batching with mlx-lm's ``BatchGenerator``,
            :mod:`missive_mlx.batched`; the llama.cpp driver's setting of the
            same name). Each slot keeps the KV cache of its last sequence for
            the next prompt it serves. 1 (the default): one sequence at a
            time, as before. Above 1 every layer's cache must be one mlx-lm
            can batch (checked at load), so ``kv_bits`` is refused (a
            ``QuantizedKVCache`` cannot be merged into a batch), and so is
            ``seed`` (the batch shares one random state); mlx-lm's server
            batches neither.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str = Field(min_length=1)
    prompt_cache_entries: int = Field(default=4, ge=0)
    seed: int | None = Field(default=None, ge=0, le=2**64 - 1)
    chat_template: str | None = Field(default=None, min_length=1)
    tool_parser: str | None = Field(default=None, min_length=1)
    reasoning_parser: str | None = Field(default=None, min_length=1)
    prefill_step_size: int = Field(default=2048, ge=1)
    kv_bits: Literal[2, 3, 4, 5, 6, 8] | None = None
    kv_group_size: Literal[32, 64, 128] = 64
    quantized_kv_start: int = Field(default=5000, ge=0)
    parallel: StrictInt = Field(default=1, ge=1, le=64)

    @model_validator(mode="after")
    def _parallel_batchable(self) -> MlxSettings:
        # mlx-lm's server batches neither (server.py, _is_batchable: no seed, no kv_bits).
        if self.parallel > 1 and self.seed is not None:
            raise ValueError(
                f"parallel = {self.parallel} with seed: sequences decoded together share MLX's random "
                "state, so a seed cannot make a request reproducible; set parallel = 1 or leave seed unset"
            )
        if self.parallel > 1 and self.kv_bits is not None:
            raise ValueError(
                f"parallel = {self.parallel} with kv_bits = {self.kv_bits}: mlx-lm cannot batch a quantized "
                "KV cache (QuantizedKVCache has no merge); set parallel = 1 or leave kv_bits unset"
            )
        return self

    @property
    def path(self) -> Path:
        return Path(self.model_path).expanduser()


def parse_settings(model_id: str, settings: dict[str, Any]) -> MlxSettings:
    """Validate a model entry's ``settings``.

    Raises:
        ConfigError: naming the model and each bad key, e.g.
            ``model 'qwen': invalid mlx setting settings.seed: Input should be a valid integer``.
    """
    try:
        return MlxSettings.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            # A check across settings has no field of its own: its message names them.
            (f"settings.{'.'.join(str(p) for p in err['loc'])}: " if err["loc"] else "settings: ")
            + str(err["msg"]).removeprefix("Value error, ")
            for err in exc.errors()
        )
        raise ConfigError(f"model '{model_id}': invalid mlx setting {problems}") from exc
