"""The ``llamacpp`` driver: a GGUF model in-process through llama-cpp-python.

A :class:`~missive.engine.local.LocalDriver` (the in-process engine: prompt
path, queue, model thread, cancellation, usage, thinking budget; see
:mod:`missive.engine`) on a :class:`~missive_llamacpp.runner.LlamaCppRunner`
(loading, tokenizing, prefix reuse, decoding with llama.cpp). What is
llama.cpp's own here: grammars (:mod:`missive_llamacpp.grammar`) that make
forced tool calls and structured output exact, sampled under the constraint.

``max_tokens: 0`` (the API's cache warm-up) decodes the prompt into the KV
cache without emitting anything, so the next request with that prefix reads it
from the cache; it finishes with ``max_tokens`` and 0 output tokens.

An entry with ``settings.base`` serves another llamacpp entry's load
through its own LoRA adapters (:mod:`missive_llamacpp.shared`): the core
loads the base first and binds it (:meth:`LlamaCppDriver.bind_base`);
:meth:`LlamaCppDriver.start` then loads the adapters against the base's
model and shares its engine (:meth:`missive.api.LocalDriver.share_engine`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import llama_cpp

from missive.api import (
    Capabilities,
    ConfigError,
    Driver,
    GenerationRequest,
    InvalidRequestError,
    LocalDriver,
    MissiveError,
    ModelEntry,
    parser_class,
    parser_for_template,
)

from .grammar import json_schema_grammar, output_relaxations, tool_call_grammar
from .grammar_check import grammar_refused
from .grammar_size import MAX_NESTING, nesting
from .plugin import CAPABILITIES
from .runner import LlamaCppRunner
from .settings import LlamaCppSettings, parse_settings
from .shared import SharedEntry, parse_shared, variant_key

log = logging.getLogger("missive.llamacpp")

__all__ = ["LlamaCppDriver"]


class LlamaCppDriver(LocalDriver):
    """Serves one GGUF model. Built as ``LlamaCppDriver(model_id, entry)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "llamacpp"
    constrains_output = True

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        self.shared: SharedEntry | None = parse_shared(model_id, entry)
        self._base_driver: LlamaCppDriver | None = None
        if self.shared is not None:  # settings.base: the runner and caches are the base's, once bound
            self.base = self.shared.base
            self.settings: LlamaCppSettings = self.shared.settings
            super().__init__(
                model_id,
                entry,
                capabilities or CAPABILITIES,
                LlamaCppRunner(model_id, self.settings, None),  # never loaded
                host_cache_bytes=0,
                disk_cache_bytes=0,
            )
            return
        self.settings = parse_settings(model_id, entry.settings)
        super().__init__(
            model_id,
            entry,
            capabilities or CAPABILITIES,
            LlamaCppRunner(model_id, self.settings, entry.context_window),
            tool_parser=self.settings.tool_parser,
            reasoning_parser=self.settings.reasoning_parser,
            host_cache_bytes=None
            if self.settings.cache_ram_mib is None
            else self.settings.cache_ram_mib * 2**20,
            disk_cache_bytes=None
            if self.settings.cache_disk_mib is None
            else self.settings.cache_disk_mib * 2**20,
        )

    # -- an entry sharing another's load (settings.base) --------------------

    def bind_base(self, base: Driver) -> None:
        """Take the loaded driver of ``settings.base`` (the core, before :meth:`start`).

        Raises:
            ConfigError: it is not a llamacpp model.
        """
        if not isinstance(base, LlamaCppDriver):
            raise ConfigError(
                f"model '{self.model_id}': settings.base = {self.base!r}: not a llamacpp model "
                f"(driver {base.name})"
            )
        self._base_driver = base

    async def start(self) -> None:
        """Load the model; with ``settings.base``, this entry's adapters
        against the base's loaded model instead, then serve through its engine.

        Raises:
            ConfigError: as :meth:`missive.api.LocalDriver.start`; with
                ``settings.base``: the base not loaded, an adapter file
                missing or refused by llama.cpp.
        """
        if self.shared is None:
            await super().start()
            return
        base = self._base_driver
        if base is None or base._info is None:
            raise ConfigError(
                f"model '{self.model_id}': settings.base = {self.base!r}: that model is not loaded"
            )
        lora = self.shared.lora
        key = variant_key(lora, self.model_id)
        runner = base.runner
        assert isinstance(runner, LlamaCppRunner)
        loop = asyncio.get_running_loop()
        adapters = await loop.run_in_executor(base._executor, runner.add_variant, key, lora, self.model_id)
        self.variant = key
        self.share_engine(base)
        self.settings = base.settings
        log.info(
            "model %s loaded: shares the weights and context of model %s (settings.base: one load, its "
            "%d slots), %s",
            self.model_id,
            self.base,
            self.capabilities.max_concurrency,
            adapters.describe(),
        )

    async def status(self) -> dict[str, Any]:
        """The engine's status, and how often the context's LoRA adapters
        were switched (``lora_switches``) and a step left sequences of
        another adapter set waiting (``lora_split_steps``:
        :mod:`missive_llamacpp.variants`), once loaded."""
        out = await super().status()
        runner = self.runner
        if out.get("loaded") and isinstance(runner, LlamaCppRunner):
            out.update(runner.variant_counts())
        return out

    def choices(self) -> dict[str, Any]:
        """The loaded model's choices; with ``settings.base``, which model's load it shares."""
        choices = super().choices()
        if self.base is not None and choices:
            choices["shares_weights_with"] = self.base
        return choices

    # -- tools and structured output ---------------------------------------

    def _parser_name(self) -> str:
        """The tool call format: the ``tool_parser`` setting, else the one the
        chat template uses, else Hermes (the fallback rendering's convention)."""
        return parser_for_template(self._template, self.tool_parser_specs, self.settings.tool_parser)

    def unenforced(self, request: GenerationRequest) -> list[str]:
        """The parts of ``output_config.format`` (or ``output_format``) the
        grammar of :meth:`constraint` leaves out (llama.cpp's converter
        ignores them: :mod:`missive_llamacpp.enforced`), reported by the core
        as ignored. None when a forced tool call gives the grammar instead."""
        schema = request.output_schema
        if schema is None or (request.tools and request.tool_choice.mode in ("any", "tool")):
            return []
        legacy = request.request.output_config is None or request.request.output_config.format is None
        field = "output_format" if legacy else "output_config.format"
        return [
            f"{field}{note.removeprefix('output_config.format')} (not enforced by the llama.cpp grammar)"
            for note in output_relaxations(schema)
        ]

    def constraint(self, request: GenerationRequest) -> Any:
        """A compiled llama.cpp grammar for forced tool choice or structured
        output, or None for free generation. Runs in a worker thread.

        Raises:
            InvalidRequestError: the schema cannot be enforced, or a thinking
                budget comes with a constrained output.
        """
        choice = request.tool_choice
        self._refuse_budget_under_constraint(request)
        relaxed: list[str] = []
        forced = bool(request.tools) and choice.mode in ("any", "tool")
        try:
            if forced:
                cls = parser_class(self.tool_parser_specs, self._parser_name())
                text = tool_call_grammar(cls, request.tools, choice, relaxed)
            elif (schema := request.output_schema) is not None:
                text = json_schema_grammar(schema, relaxed)
            else:
                return None
        except MissiveError:
            raise
        except Exception as exc:  # llama-cpp-python's converter asserts on schemas it cannot handle
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            what, remedy = (
                ("the strict tool's input_schema", "remove strict: true to have the rest enforced")
                if forced
                else ("the output_config.format schema", "simplify the schema")
            )
            raise InvalidRequestError(
                f"{what} cannot be enforced by a llama.cpp grammar ({detail}); "
                "llama.cpp enforces types, properties, required keys, enum, const, anyOf, local $ref, "
                "anchored patterns, string lengths and item counts, not minimum/maximum, multipleOf, "
                f"not, if/then/else, other formats (docs/tools.md); {remedy}"
            ) from exc
        if relaxed:
            self.log.info(
                "%s: the grammar does not enforce %s (the output is checked against the full schema "
                "afterwards)",
                request.request_id,
                ", ".join(relaxed),
            )
        if (depth := nesting(text)) > MAX_NESTING:  # llama.cpp's parser would overflow its stack
            raise InvalidRequestError(
                f"the schema makes a llama.cpp grammar nested {depth} groups deep, more than the "
                f"{MAX_NESTING} its parser takes; use fewer nested groups in patterns"
            )
        if (refused := grammar_refused(self.runner, text)) is not None:
            raise InvalidRequestError(refused)
        try:
            return llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise InvalidRequestError(
                f"the schema could not be turned into a llama.cpp grammar: {exc}"
            ) from exc
