"""Default ``register_tool_parsers``: the built-in streaming tool call parsers.

Order matters for :func:`missive.tools.parsers.selection.select_parser`: the
first spec with a marker found in a chat template wins. Markers are literal
strings from the published chat templates:

* hermes: ``<tool_call>`` (Qwen2.5/Qwen3 and Hermes templates);
* llama3: ``<|python_tag|>``, ``Environment: ipython`` and the instruction
  ``"parameters": dictionary of argument name`` (Llama 3.1/3.2/3.3 templates);
* mistral_v3: ``[TOOL_CALLS] [`` (v3 templates render history as a JSON array),
  before mistral: ``[TOOL_CALLS]`` (v11+ templates: ``'[TOOL_CALLS]' + name + '[ARGS]'``);
* harmony: ``<|channel|>`` (gpt-oss template).
"""

from __future__ import annotations

from ..hookspecs import hookimpl
from ..specs import ToolParserSpec


@hookimpl
def register_tool_parsers() -> list[ToolParserSpec]:
    return [
        ToolParserSpec(
            name="hermes",
            factory="missive.tools.parsers.hermes:HermesParser",
            description='Hermes / Qwen2.5 / Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
            template_markers=("<tool_call>",),
        ),
        ToolParserSpec(
            name="llama3",
            factory="missive.tools.parsers.llama3:Llama3JsonParser",
            description='Llama 3.1-3.3 JSON: {"name": ..., "parameters": {...}}, optional <|python_tag|>, "; " between calls',
            template_markers=("<|python_tag|>", "Environment: ipython", '"parameters": dictionary of argument name'),
        ),
        ToolParserSpec(
            name="mistral_v3",
            factory="missive.tools.parsers.mistral:MistralV3Parser",
            description="Mistral v3 tokenizers: [TOOL_CALLS] [{...}, ...] (also reads the v11 form)",
            template_markers=("[TOOL_CALLS] [", "[TOOL_CALLS]["),
        ),
        ToolParserSpec(
            name="mistral",
            factory="missive.tools.parsers.mistral:MistralParser",
            description="Mistral v11+ tokenizers: [TOOL_CALLS]name[ARGS]{...} (also reads the v3 array form)",
            template_markers=("[TOOL_CALLS]",),
        ),
        ToolParserSpec(
            name="harmony",
            factory="missive.tools.parsers.harmony:HarmonyParser",
            description="gpt-oss harmony: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>",
            template_markers=("<|channel|>",),
        ),
    ]
