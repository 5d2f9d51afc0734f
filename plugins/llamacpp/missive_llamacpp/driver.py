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
"""

from __future__ import annotations

from typing import Any

import llama_cpp

from missive.api import (
    Capabilities,
    GenerationRequest,
    InvalidRequestError,
    LocalDriver,
    MissiveError,
    ModelEntry,
    parser_class,
    parser_for_template,
)

from .grammar import json_schema_grammar, tool_call_grammar
from .plugin import CAPABILITIES
from .runner import LlamaCppRunner
from .settings import LlamaCppSettings, parse_settings

__all__ = ["LlamaCppDriver"]


class LlamaCppDriver(LocalDriver):
    """Serves one GGUF model. Built as ``LlamaCppDriver(model_id, entry)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "llamacpp"
    constrains_output = True

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        self.settings: LlamaCppSettings = parse_settings(model_id, entry.settings)
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

    # -- tools and structured output ---------------------------------------

    def _parser_name(self) -> str:
        """The tool call format: the ``tool_parser`` setting, else the one the
        chat template uses, else Hermes (the fallback rendering's convention)."""
        return parser_for_template(self._template, self.tool_parser_specs, self.settings.tool_parser)

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
        try:
            if request.tools and choice.mode in ("any", "tool"):
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
            raise InvalidRequestError(
                f"the strict tool's input_schema cannot be enforced by a llama.cpp grammar ({detail}); "
                "llama.cpp enforces types, properties, required keys, enum, const, anyOf, local $ref, "
                "anchored patterns, string lengths and item counts, not minimum/maximum, multipleOf, "
                "not, if/then/else, other formats (docs/tools.md); "
                "remove strict: true to have the rest enforced"
            ) from exc
        if relaxed:
            self.log.info(
                "%s: the grammar does not enforce %s (the output is checked against the full schema "
                "afterwards)",
                request.request_id,
                ", ".join(relaxed),
            )
        try:
            return llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise InvalidRequestError(
                f"the schema could not be turned into a llama.cpp grammar: {exc}"
            ) from exc
