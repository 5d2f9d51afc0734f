"""Default ``register_tool_parsers``: the built-in streaming tool call parsers.

Order matters for :func:`missive.tools.parsers.selection.select_parser`: the
first spec with a marker found in a chat template wins. Markers are literal
strings from the published chat templates; formats whose templates also
contain another format's marker come first (Qwen3-Coder's and GLM's
templates contain Hermes' ``<tool_call>``, Seed-OSS's Qwen's ``<function=``):

* seed_oss: ``<seed:tool_call>`` (ByteDance Seed-OSS);
* minimax_m2: ``<minimax:tool_call>`` (MiniMax-M2);
* qwen3_xml: ``<parameter=`` (Qwen3-Coder, Qwen3.5/3.6, Nemotron 3 Nano);
* glm45: ``<arg_key>`` (GLM-4.5, 4.6, 4.7);
* kimi_k2: ``<|tool_calls_section_begin|>`` (Kimi-K2, K2-Thinking);
* kimi_k3: ``open_tag('call'`` or ``<|open|>call tool="`` (Kimi-K3's XTML);
* deepseek_v41: ``<｜DSML｜ calls>`` (DeepSeek-V4.1), deepseek_v4:
  ``<｜DSML｜tool_calls>`` (DeepSeek-V4), deepseek_v32: ``｜DSML｜``
  (DeepSeek-V3.2; each reads the others' calls too), before deepseek_v31:
  ``<｜tool▁calls▁begin｜>`` (DeepSeek-V3.1, V3, R1);
* gemma4: ``<|tool_call>`` (Gemma 4);
* nemotron: ``<TOOLCALL>`` (Nemotron Nano v2, Llama-3.3-Nemotron-Super);
* granite: ``<|tool_call|>`` (Granite 3.x; Granite 4.0 writes Hermes'
  ``<tool_call>``, a different string);
* llama4_pythonic: ``[func_name1(`` (the pythonic Llama 4 template; Llama 4's
  own template asks for Llama 3's JSON and selects llama3);
* hermes: ``<tool_call>`` (Qwen2.5/Qwen3 and Hermes templates);
* llama3: ``<|python_tag|>``, ``Environment: ipython`` and the instruction
  ``"parameters": dictionary of argument name`` (Llama 3.1/3.2/3.3 templates);
* mistral_v3: ``[TOOL_CALLS] [`` (v3 templates render history as a JSON array),
  before mistral: ``[TOOL_CALLS]`` (v11+ templates: ``'[TOOL_CALLS]' + name + '[ARGS]'``);
* harmony: ``<|channel|>`` (gpt-oss template).
"""

from __future__ import annotations

from ..driver.parsing import ToolParserSpec
from ..kernel.hookspecs import hookimpl


@hookimpl
def register_tool_parsers() -> list[ToolParserSpec]:
    return [
        ToolParserSpec(
            name="seed_oss",
            factory="missive.tools.parsers.xml:SeedOssParser",
            description=(
                "Seed-OSS: <seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function>"
                "</seed:tool_call>"
            ),
            template_markers=("<seed:tool_call>",),
        ),
        ToolParserSpec(
            name="minimax_m2",
            factory="missive.tools.parsers.xml:MiniMaxM2Parser",
            description=(
                'MiniMax-M2: <minimax:tool_call><invoke name="NAME"><parameter name="KEY">VALUE</parameter>'
                '</invoke>'
            ),
            template_markers=("<minimax:tool_call>",),
        ),
        ToolParserSpec(
            name="qwen3_xml",
            factory="missive.tools.parsers.xml:QwenXmlParser",
            description=(
                "Qwen3-Coder, Qwen3.5/3.6, Nemotron 3: <tool_call><function=NAME><parameter=KEY>VALUE"
                "</parameter></function></tool_call>"
            ),
            template_markers=("<parameter=",),
        ),
        ToolParserSpec(
            name="glm45",
            factory="missive.tools.parsers.xml:Glm45Parser",
            description=(
                "GLM-4.5/4.6/4.7: <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>"
                "</tool_call>"
            ),
            template_markers=("<arg_key>",),
        ),
        ToolParserSpec(
            name="kimi_k2",
            factory="missive.tools.parsers.sections:KimiK2Parser",
            description=(
                "Kimi-K2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0"
                "<|tool_call_argument_begin|>{...}<|tool_call_end|>"
            ),
            template_markers=("<|tool_calls_section_begin|>",),
        ),
        ToolParserSpec(
            name="kimi_k3",
            factory="missive.tools.parsers.xtml:KimiK3Parser",
            description=(
                'Kimi-K3 XTML: <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|><|open|>argument '
                'key="KEY" type="string"<|sep|>VALUE<|close|>argument<|sep|>...'
            ),
            template_markers=("open_tag('call'", '<|open|>call tool="'),
        ),
        ToolParserSpec(
            name="deepseek_v41",
            factory="missive.tools.parsers.xml:DeepSeekV41Parser",
            description=(
                'DeepSeek-V4.1 DSML: <｜DSML｜ calls><｜DSML｜ invoke name="NAME"><｜DSML｜ parameter '
                'name="KEY" string="true">VALUE</｜DSML｜ parameter>'
            ),
            template_markers=("<｜DSML｜ calls>", "dsml_token }} calls>", "dsml_token + ' calls>"),
        ),
        ToolParserSpec(
            name="deepseek_v4",
            factory="missive.tools.parsers.xml:DeepSeekV4Parser",
            description=(
                'DeepSeek-V4 DSML: <｜DSML｜tool_calls><｜DSML｜invoke name="NAME"><｜DSML｜parameter '
                'name="KEY" string="true">VALUE</｜DSML｜parameter>'
            ),
            template_markers=(
                "<｜DSML｜tool_calls>",
                "dsml_token }}tool_calls>",
                "dsml_token + 'tool_calls>",
            ),
        ),
        ToolParserSpec(
            name="deepseek_v32",
            factory="missive.tools.parsers.xml:DeepSeekV32Parser",
            description=(
                'DeepSeek-V3.2 DSML: <｜DSML｜invoke name="NAME"><｜DSML｜parameter name="KEY" '
                'string="true">VALUE</｜DSML｜parameter>'
            ),
            template_markers=("｜DSML｜",),
        ),
        ToolParserSpec(
            name="deepseek_v31",
            factory="missive.tools.parsers.sections:DeepSeekV31Parser",
            description=(
                "DeepSeek-V3.1 (and V3/R1): <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>"
            ),
            template_markers=("<｜tool▁calls▁begin｜>",),
        ),
        ToolParserSpec(
            name="gemma4",
            factory="missive.tools.parsers.gemma4:Gemma4Parser",
            description='Gemma 4: <|tool_call>call:NAME{key:<|"|>value<|"|>,n:1}<tool_call|>',
            template_markers=("<|tool_call>",),
        ),
        ToolParserSpec(
            name="nemotron",
            factory="missive.tools.parsers.sections:NemotronParser",
            description='Nemotron: <TOOLCALL>[{"name": ..., "arguments": {...}}]</TOOLCALL>',
            template_markers=("<TOOLCALL>",),
        ),
        ToolParserSpec(
            name="granite",
            factory="missive.tools.parsers.sections:GraniteParser",
            description='Granite 3.x: <|tool_call|>[{"name": ..., "arguments": {...}}]',
            template_markers=("<|tool_call|>",),
        ),
        ToolParserSpec(
            name="llama4_pythonic",
            factory="missive.tools.parsers.pythonic:Llama4PythonicParser",
            description=(
                "Llama 4 pythonic: [NAME(key=value, ...)], optionally in <|python_start|>...<|python_end|>"
            ),
            template_markers=("[func_name1(",),
        ),
        ToolParserSpec(
            name="hermes",
            factory="missive.tools.parsers.hermes:HermesParser",
            description='Hermes / Qwen2.5 / Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
            template_markers=("<tool_call>",),
        ),
        ToolParserSpec(
            name="llama3",
            factory="missive.tools.parsers.llama3:Llama3JsonParser",
            description=(
                'Llama 3.1-3.3 JSON: {"name": ..., "parameters": {...}}, optional <|python_tag|>, "; " '
                'between calls'
            ),
            template_markers=(
                "<|python_tag|>",
                "Environment: ipython",
                '"parameters": dictionary of argument name',
            ),
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
            description=(
                "gpt-oss harmony: <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}"
                "<|call|>"
            ),
            template_markers=("<|channel|>",),
        ),
    ]
