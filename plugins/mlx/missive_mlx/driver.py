"""The ``mlx`` driver: an MLX model folder in-process through mlx-lm.

A :class:`~missive.engine.local.LocalDriver` (the in-process engine: prompt
path, queue, model thread, cancellation, usage, thinking budget; see
:mod:`missive.engine`) on a :class:`~missive_mlx.runner.MlxRunner` (loading,
tokenizing, the multi-entry prompt cache of :mod:`missive_mlx.prompt_cache`,
decoding with ``mlx_lm.generate_step``).

The prompt is rendered by the core's sandboxed jinja2 with the tokenizer's
chat template (not ``tokenizer.apply_chat_template``): the same sandbox,
prefill rule and error mapping as the llama.cpp driver, so one template gives
byte-identical prompts in both, and a template's ``raise_exception`` is a 400.
Nothing constrains decoding here: tools are offered with ``tool_choice``
``auto`` and ``none`` only, and there is no structured output.

With ``settings.parallel > 1`` the runner is a
:class:`~missive_mlx.batched.BatchedMlxRunner`: that many sequences decoded
together (mlx-lm's ``BatchGenerator``), each slot keeping its last cache, and
``max_concurrency`` is ``parallel``.

``max_tokens: 0`` (the API's cache warm-up) evaluates the prompt into a cache
that is stored; it finishes with ``max_tokens`` and 0 output tokens.
"""

from __future__ import annotations

from missive.api import Capabilities, LocalDriver, ModelEntry

from .batched import BatchedMlxRunner
from .plugin import CAPABILITIES
from .runner import MlxRunner
from .settings import MlxSettings, parse_settings

__all__ = ["MlxDriver"]


class MlxDriver(LocalDriver):
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
        parallel = self.settings.parallel
        caps = caps.model_copy(update={"max_concurrency": parallel})
        runner_class = BatchedMlxRunner if parallel > 1 else MlxRunner
        runner = runner_class(model_id, self.settings, entry.context_window)
        super().__init__(
            model_id,
            entry,
            caps,
            runner,
            tool_parser=self.settings.tool_parser,
            reasoning_parser=self.settings.reasoning_parser,
            # The slots' caches go to the runner's own store, not the engine's host-memory cache.
            host_cache_bytes=0,
        )
