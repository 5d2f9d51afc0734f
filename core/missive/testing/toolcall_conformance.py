"""Missive's tool and reasoning parsers against the public ``canitoolcall``
conformance corpus (recorded raw outputs of open-weight models, each with
the parse a correct engine returns; ``pip install canitoolcall``, a test
dependency).

Each fixture is replayed through the same function the server runs on a
model's text, :func:`missive.messages.stream.parsing.parsed_events` (the
reasoning parser, then the tool parser, then the end-of-generation flush,
with ``stop_reason`` ``max_tokens`` for a fixture cut by ``max_tokens``),
with the parsers chosen two ways:

* ``detected``: as a served model gets them, from its chat template
  (:func:`~missive.tools.parsers.selection.parser_for_template`,
  :func:`~missive.reasoning.registry.reasoning_parser_for_template`); the
  template of each reference model is :data:`TEMPLATES`;
* ``best``: the parser Missive has for the model's format (:data:`BEST`),
  what an operator gets by naming it in ``settings.tool_parser``.

Streams. canitoolcall groups token ids; no tokenizer of these models can be
loaded here, so the text is cut into units the way a tokenizer would keep
it whole: each special token (the family's markers, ``<|...|>``,
``<｜...｜>``, ``[UPPER_CASE]``) is one unit, and ordinary text is cut into
words with their leading space, runs of whitespace and single punctuation
marks. The ``special`` strategy splits at the special units. Missive's
engine hands the core one or several tokens per delta, so every strategy
counts (``tokens_per_step = "many"``); the ``char:<seed>`` strategies, which
also cut special tokens, are run as well.

:mod:`missive.testing.toolcall_report` replays the whole corpus both ways
and writes the table of docs/models.md.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .toolcall_templates import TEMPLATES as _TEMPLATES

__all__ = [
    "BEST",
    "TEMPLATES",
    "MODES",
    "MissiveAdapter",
    "units_of",
    "parse_deltas",
    "parsers_for",
    "STRATEGIES",
]

MODES = ("detected", "best")

#: The strategies replayed: canitoolcall's defaults and two character splits.
STRATEGIES = (
    "one",
    "special",
    "token",
    "rand:1:8",
    "rand:2:8",
    "rand:3:8",
    "rand:4:8",
    "rand:5:8",
    "char:0",
    "char:7",
)

#: Reference model (``fixture.models[0]``) -> (tool parser, reasoning parser):
#: the parsers Missive has for that model's format.
BEST: dict[str, tuple[str, str | None]] = {
    "Qwen/Qwen3-0.6B": ("hermes", "think"),
    "Qwen/Qwen3-4B-Instruct-2507": ("hermes", "think"),
    "Qwen/Qwen3-4B-Thinking-2507": ("hermes", "think"),
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": ("qwen3_xml", "think"),
    "Qwen/Qwen3-Coder-Next": ("qwen3_xml", "think"),
    "Qwen/Qwen3.5-9B": ("qwen3_xml", "think"),
    "Qwen/Qwen3.8-27B": ("qwen3_xml", "think"),
    "zai-org/GLM-4.5": ("glm45", "think"),
    "zai-org/GLM-4.7": ("glm45", "think"),
    "zai-org/GLM-5.3": ("glm45", "think"),
    "openai/gpt-oss-20b": ("harmony", "harmony"),
    "deepseek-ai/DeepSeek-V3-0324": ("deepseek_v31", "think"),
    "deepseek-ai/DeepSeek-V3.1": ("deepseek_v31", "think"),
    "deepseek-ai/DeepSeek-V3.2": ("deepseek_v32", "think"),
    "deepseek-ai/DeepSeek-V4-Flash": ("deepseek_v4", "think"),
    "deepseek-ai/DeepSeek-V4.1-Flash": ("deepseek_v41", "think"),
    "moonshotai/Kimi-K2-Instruct-0905": ("kimi_k2", "think"),
    "moonshotai/Kimi-K2.6": ("kimi_k2", "think"),
    "moonshotai/Kimi-K3": ("kimi_k3", "kimi_k3"),
    "meta-llama/Llama-3.3-70B-Instruct": ("llama3", None),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": ("llama3", None),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistral_v3", None),
    "mistralai/Devstral-Small-2507": ("mistral", None),
    "mistralai/Magistral-Small-2506": ("mistral", "think"),
    "mistralai/Magistral-Small-2509": ("mistral", "mistral_think"),
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": ("mistral", None),
    "mistralai/Ministral-3-14B-Instruct-2512": ("mistral", None),
    "mistralai/Ministral-3-14B-Reasoning-2512": ("mistral", "mistral_think"),
    "google/gemma-4-31B-it": ("gemma4", "gemma4_thought"),
}


#: Reference model -> the chat template a served GGUF of it carries.
TEMPLATES: Mapping[str, str] = _TEMPLATES

# ---------------------------------------------------------------- units

_SPECIAL_PATTERNS = (
    r"<\|[^|<>\s]{1,48}\|>",  # <|im_end|>, <|tool_call_begin|>
    r"<｜[^｜<>]{1,48}｜>",  # <｜tool▁call▁begin｜>
    r"\[[A-Z][A-Z_]{1,24}\]",  # [TOOL_CALLS], [ARGS], [THINK]
)
_ORDINARY = re.compile(r" ?[^\W_]+|\s+|.", re.DOTALL)


def units_of(text: str, markers: Collection[str] = ()) -> tuple[list[str], list[bool]]:
    """``text`` cut into token-like units and which of them are special
    (see module doc); ``"".join(units) == text``."""
    alternatives = sorted({m for m in markers if m}, key=len, reverse=True)
    pattern = re.compile("|".join([*(re.escape(m) for m in alternatives), *_SPECIAL_PATTERNS]))
    units: list[str] = []
    special: list[bool] = []
    at = 0
    for match in pattern.finditer(text):
        if match.start() == match.end():
            continue
        for piece in _ORDINARY.findall(text[at : match.start()]):
            units.append(piece)
            special.append(False)
        units.append(match.group())
        special.append(True)
        at = match.end()
    for piece in _ORDINARY.findall(text[at:]):
        units.append(piece)
        special.append(False)
    assert "".join(units) == text
    return units, special


# ---------------------------------------------------------------- parsing


@dataclass
class _Request:
    """The parts of a :class:`~missive.driver.interface.GenerationRequest`
    the parsing pipeline reads."""

    tools: tuple[Any, ...]
    tool_choice: Any


@dataclass
class _Driver:
    """The parts of a driver the parsing pipeline reads: its parsers."""

    tool_name: str
    reasoning_name: str | None
    opened: str
    model_id: str = "conformance"
    tool_parser_specs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from ..default_plugins.tool_parsers import register_tool_parsers

        self.tool_parser_specs = {s.name: s for s in register_tool_parsers()}

    def tool_parser(self, request: _Request) -> Any:
        from ..tools.parsers.registry import build_parser

        return build_parser(self.tool_parser_specs, self.tool_name, request.tools, constrained=False)

    def reasoning_parser(self, request: _Request) -> Any:
        from ..reasoning.registry import reasoning_parser_class

        if self.reasoning_name is None:
            return None
        return reasoning_parser_class({}, self.reasoning_name)()


def parsers_for(model: str, mode: str, generation_prompt: str | None) -> tuple[str, str | None, str]:
    """(tool parser, reasoning parser, text the prompt left open) for
    ``model`` in ``mode``."""
    from ..reasoning.registry import reasoning_parser_class, reasoning_parser_for_template
    from ..tools.parsers.selection import parser_for_template

    if mode == "best":
        tool, reasoning = BEST[model]
    else:
        from ..default_plugins.tool_parsers import register_tool_parsers

        template = TEMPLATES[model]
        tool = parser_for_template(template, {s.name: s for s in register_tool_parsers()})
        reasoning = reasoning_parser_for_template(template, {})
    opened = ""
    if reasoning is not None and generation_prompt:
        opened = reasoning_parser_class({}, reasoning).prompt_prefix(generation_prompt)
    return tool, reasoning, opened


def _tool_definitions(tools: Sequence[Mapping[str, Any]]) -> tuple[Any, ...]:
    from ..driver.tools import ToolDefinition

    out = []
    for tool in tools:
        fn = tool.get("function", tool)
        out.append(
            ToolDefinition(
                name=fn["name"],
                description=fn.get("description") or "",
                input_schema=dict(fn.get("parameters") or {"type": "object", "properties": {}}),
            )
        )
    return tuple(out)


async def _events(opened: str, deltas: Sequence[str], truncated: bool) -> AsyncIterator[Any]:
    from ..driver.events import Finished, TextDelta

    if opened:
        # What the rendered prompt left open comes first, as the in-process
        # engine sends it (missive.engine.local).
        yield TextDelta(opened, tokens=0)
    for text in deltas:
        yield TextDelta(text, tokens=1)
    yield Finished(stop_reason="max_tokens" if truncated else "end_turn")


@functools.cache
def _loop() -> asyncio.AbstractEventLoop:
    """One event loop for every replay (a new loop per parse, as
    ``asyncio.run`` makes, costs more than the parse; nothing here runs
    beside it)."""
    return asyncio.new_event_loop()


def parse_deltas(
    driver: _Driver, tools: Sequence[Mapping[str, Any]], deltas: Sequence[str], truncated: bool
) -> Any:
    """The text deltas through the server's parsing pipeline, accumulated
    as a canitoolcall ``ParseResult`` (a malformed call: ``exception``)."""
    from canitoolcall.results import StreamAccumulator

    from ..driver.events import TextDelta, ThinkingDelta, ToolCallDelta, ToolCallEnd, ToolCallStart
    from ..driver.thinking import ThinkingPlan
    from ..driver.tools import ToolChoice
    from ..messages.stream.blocks import Blocks
    from ..messages.stream.parsing import parsed_events
    from ..protocol.errors import ApiError
    from ..thinking.signing import Signer

    request = _Request(_tool_definitions(tools), ToolChoice())
    acc = StreamAccumulator()
    # The answer's content blocks as the server builds them (whitespace
    # around tool calls: missive.messages.stream.blocks).
    blocks = Blocks(ThinkingPlan(requested=True), (0, 0), Signer(b"conformance-replay-key"))
    index = -1

    def text(events: list[dict[str, Any]]) -> None:
        for out in events:
            if out.get("type") == "content_block_delta" and out["delta"]["type"] == "text_delta":
                acc.add_content(out["delta"]["text"])

    async def run() -> None:
        nonlocal index
        events = _events(driver.opened, deltas, truncated)
        async for event in parsed_events(driver, request, events, lambda n: None):  # type: ignore[arg-type]
            if isinstance(event, TextDelta):
                text(blocks.text(event.text))
            elif isinstance(event, ThinkingDelta):
                text(blocks.thinking(event.thinking))
                acc.add_reasoning(event.thinking)
            elif isinstance(event, ToolCallStart):
                blocks.drop_held_space()
                text(blocks.open_block("tool_use", {"type": "tool_use"}))
                index += 1
                acc.add_tool_call(index, event.name, "")
            elif isinstance(event, ToolCallDelta):
                acc.add_tool_call(index, None, event.partial_json)
            elif isinstance(event, ToolCallEnd):
                text(blocks.close_block())
        text(blocks.close_block())

    try:
        _loop().run_until_complete(run())
    except ApiError as exc:
        return acc.result(exception=f"{type(exc).__name__}: {exc}")
    return acc.result()


class MissiveAdapter:
    """A canitoolcall adapter (``canitoolcall.adapters.base.Adapter``'s
    methods) for Missive's parsers in one :data:`MODES` mode."""

    name = "missive"
    supports_text_deltas = True
    tokens_per_step = "many"
    pinned_version = "0.1.0"

    def __init__(self, mode: str = "best") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.mode = mode

    def version(self) -> str:
        from importlib.metadata import version

        return version("missive-server")

    def supports(self, family: str, model: str) -> Any:
        from canitoolcall.adapters.base import Support

        table = BEST if self.mode == "best" else TEMPLATES
        if model not in table:
            return Support(False, f"no {self.mode} parser configuration for {model}")
        return Support(True)

    def _driver(self, raw: Any) -> _Driver:
        tool, reasoning, opened = parsers_for(raw.model, self.mode, raw.generation_prompt)
        return _Driver(tool, reasoning, opened)

    def parser_config(self, raw: Any) -> dict[str, Any]:
        driver = self._driver(raw)
        return {
            "mode": self.mode,
            "tool_parser": driver.tool_name,
            "reasoning_parser": driver.reasoning_name,
            "prompt_opened": driver.opened,
        }

    def _units(self, raw: Any) -> tuple[list[str], list[bool]]:
        return units_of(raw.text, _family_markers(raw.family))

    def units(self, raw: Any) -> list[int]:
        return list(range(len(self._units(raw)[0])))

    def special_token_ids(self, raw: Any) -> Collection[int]:
        _, special = self._units(raw)
        return {i for i, s in enumerate(special) if s}

    def parse(self, raw: Any, tools: Sequence[Mapping[str, Any]]) -> Any:
        return parse_deltas(self._driver(raw), tools, [raw.text], raw.truncated)

    def parse_stream(
        self, raw: Any, chunks: Sequence[Sequence[int]], tools: Sequence[Mapping[str, Any]]
    ) -> Any:
        units, _ = self._units(raw)
        deltas = ["".join(units[i] for i in chunk) for chunk in chunks]
        return parse_deltas(self._driver(raw), tools, deltas, raw.truncated)

    def parse_stream_text(self, raw: Any, deltas: Sequence[str], tools: Sequence[Mapping[str, Any]]) -> Any:
        return parse_deltas(self._driver(raw), tools, list(deltas), raw.truncated)


_MARKERS: dict[str, tuple[str, ...]] = {}


def _family_markers(family: str) -> tuple[str, ...]:
    if family not in _MARKERS:
        import json

        path = _fixtures_root() / family / "family.json"
        _MARKERS[family] = (
            tuple(json.loads(path.read_text("utf-8")).get("markers", ())) if path.is_file() else ()
        )
    return _MARKERS[family]


def _fixtures_root() -> Path:
    import canitoolcall

    return Path(canitoolcall.__file__).parent / "_data" / "fixtures"
