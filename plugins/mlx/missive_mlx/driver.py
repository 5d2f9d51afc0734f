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
Forced ``tool_choice`` (``any``, ``tool``) and structured output
(``output_config.format``) are sampled under a grammar: the core's Lark
text (:mod:`missive.tools.lark_grammar`) compiled and applied by llguidance
(:mod:`missive_mlx.constrain`).

Images: a vision model folder of a family :mod:`missive_mlx.vision` places
images for, with mlx-vlm installed, takes the four image types of the API
(``input_media``, declared from ``config.json`` before the model loads); any
other model refuses images (the core's 400 naming the capability).

With ``settings.parallel > 1`` the runner is a
:class:`~missive_mlx.batched.BatchedMlxRunner`: that many sequences decoded
together (mlx-lm's ``BatchGenerator``), each slot keeping its last cache, and
``max_concurrency`` is ``parallel``.

``max_tokens: 0`` (the API's cache warm-up) evaluates the prompt into a cache
that is stored; it finishes with ``max_tokens`` and 0 output tokens.
"""

from __future__ import annotations

from typing import Any

from missive.api import (
    Capabilities,
    GenerationRequest,
    InvalidRequestError,
    LocalDriver,
    ModelEntry,
    json_schema_lark,
    object_schema,
    parser_class,
    parser_for_template,
    tool_call_lark,
)

from .batched import BatchedMlxRunner
from .constrain import Constraint, GuidanceTokenizer, compile_grammar, special_tokens, unenforced_keys
from .plugin import CAPABILITIES
from .runner import MlxRunner
from .settings import MlxSettings, parse_settings
from .vision import VISION_MEDIA_TYPES, vision_capable

__all__ = ["MlxDriver"]


class MlxDriver(LocalDriver):
    """Serves one MLX model folder. Built as ``MlxDriver(model_id, entry)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "mlx"
    constrains_output = True

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        self.settings: MlxSettings = parse_settings(model_id, entry.settings)
        caps = capabilities or CAPABILITIES
        if self.settings.prompt_cache_entries == 0:
            caps = caps.model_copy(update={"prompt_caching": False})
        if vision_capable(self.settings.path):  # known before load: a lazy model takes images too
            caps = caps.model_copy(update={"input_media": VISION_MEDIA_TYPES})
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
        self._guidance = GuidanceTokenizer()

    def unenforced(self, request: GenerationRequest) -> list[str]:
        """The keywords of ``output_config.format`` (or ``output_format``)
        the llguidance grammar of :meth:`constraint` leaves out, or the whole
        schema when it does not compile (any JSON object is enforced then),
        reported by the core as ignored. None when a forced tool call gives
        the grammar instead."""
        schema = request.output_schema
        if schema is None or (request.tools and request.tool_choice.mode in ("any", "tool")):
            return []
        legacy = request.request.output_config is None or request.request.output_config.format is None
        field = "output_format" if legacy else "output_config.format"
        keys, error = unenforced_keys(json_schema_lark(schema), self._guidance.get(self.runner.tokenizer))
        if error:
            return [f"{field} (not enforced by the llguidance grammar, any JSON object instead: {error})"]
        return [f"{field} {key} (not enforced by the llguidance grammar)" for key in keys]

    def constraint(self, request: GenerationRequest) -> Any:
        """The grammar of a forced tool call or of structured output, compiled
        for the model's tokenizer (:mod:`missive_mlx.constrain`), or None for
        free generation. Tokenizing thread.

        A non-strict tool's schema, and an ``output_config.format`` schema,
        is compiled leniently (what llguidance does not implement is not
        enforced); if it still does not compile, any JSON object is enforced
        for it (logged; structured output is checked against the full schema
        afterwards, as with the llama.cpp driver). A strict tool's schema
        that does not compile is a 400.

        Raises:
            InvalidRequestError: a strict schema llguidance cannot enforce, or a
                thinking budget with a constrained output.
        """
        choice = request.tool_choice
        forced = bool(request.tools) and choice.mode in ("any", "tool")
        if not forced and request.output_schema is None:
            return None
        self._refuse_budget_under_constraint(request)
        tokenizer = self.runner.tokenizer
        llt = self._guidance.get(tokenizer)
        specials = special_tokens(tokenizer)
        if forced:
            name = parser_for_template(self._template, self.tool_parser_specs, self.settings.tool_parser)
            cls = parser_class(self.tool_parser_specs, name)
            loose: dict[str, dict[str, Any]] = {}
            for tool in request.tools:
                alone = json_schema_lark(object_schema(tool.input_schema))
                if not tool.strict and compile_grammar(alone, llt)[0] is None:
                    loose[tool.name] = {"type": "object"}
            if loose:
                self.log.info(
                    "%s: the grammar enforces any JSON object for the arguments of %s (llguidance cannot "
                    "compile their input_schema)",
                    request.request_id,
                    ", ".join(sorted(loose)),
                )
            grammar, error = compile_grammar(tool_call_lark(cls, request.tools, choice, specials, loose), llt)
            where = "the strict tool's input_schema"
        else:
            assert request.output_schema is not None
            grammar, error = compile_grammar(json_schema_lark(request.output_schema), llt)
            if grammar is None:  # the reply is checked against the full schema afterwards
                grammar, _ = compile_grammar(json_schema_lark({"type": "object"}), llt)
                self.log.info("%s: the grammar enforces any JSON object (%s)", request.request_id, error)
            where = "output_config.format's schema"
        if grammar is None:
            raise InvalidRequestError(
                f"{where} cannot be enforced by llguidance on model '{self.model_id}' (driver mlx): {error}"
            )
        return Constraint(grammar, llt, tuple(sorted(tokenizer.eos_token_ids)))
