"""Chat templates of the reasoning model families, reduced to what their
reasoning depends on, written for the tests from each family's published
template (sources below; the facts, not the text):

* how the generation prompt opens (or closes) the reasoning, and which
  switch variable decides it;
* which past assistant turns get their reasoning rendered, and how
  (``reasoning_content``, in the family's tags);
* enough tool-call and tool-result rendering (in a simplified form of the
  family's syntax) for a tool loop: tool call parsing and grammars are
  tested by the tool parser tests.

Each :class:`Family` also holds an output recorded in the family's format
(reasoning, answer text, the start of a tool call) and what it must parse to.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One family.

    Attributes:
        name: the family.
        template: its reduced chat template.
        parser: the reasoning parser chosen from it.
        output: what the model writes after the prompt rendered with thinking on.
        reasoning, answer: what ``output`` parses to.
        opens: the generation prompt with thinking on opens the reasoning.
        replayed: how kept reasoning ``R`` of the current tool loop appears in
            the prompt (``{R}`` stands for it); None: never rendered.
        earlier_dropped: reasoning of a turn before the last user message is
            not rendered (the template's default, unless a switch keeps it).
    """

    name: str
    template: str
    parser: str
    output: str
    reasoning: str
    answer: str
    opens: bool
    replayed: str | None
    earlier_dropped: bool = True


# Qwen3 (Qwen/Qwen3-8B tokenizer_config.json chat_template): ChatML;
# enable_thinking false renders an empty "<think>\n\n</think>\n\n" after the
# generation prompt, true leaves the model to open <think> itself; reasoning
# of assistant turns after the last real user query is rendered from
# reasoning_content as "<think>\nR\n</think>\n\n"; tool results are user
# turns of <tool_response> blocks (and do not count as a query).
QWEN3 = """\
{%- if messages[0].role == 'system' or tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}{% if tools %}# Tools
<tools>{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>{% endif %}<|im_end|>
{% endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}
{%- if message.role == 'user' and not message.content.startswith('<tool_response>') and ns.last_query_index == messages|length - 1 %}{% set ns.last_query_index = index %}{% endif %}
{%- endfor %}
{%- for message in messages %}
{%- if message.role == 'user' %}<|im_start|>user
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if loop.index0 > ns.last_query_index %}{% if message.reasoning_content %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{% endif %}{{ message.content }}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# Qwen3.5 / Qwen3.6 (Qwen/Qwen3.6 chat_template.jinja): as Qwen3, but the
# generation prompt opens "<think>\n" itself with thinking on, and
# preserve_thinking true renders every past turn's reasoning.
QWEN35 = QWEN3.replace(
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}",
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}",
).replace(
    "{% if loop.index0 > ns.last_query_index %}",
    "{% if (preserve_thinking is defined and preserve_thinking is true) "
    "or loop.index0 > ns.last_query_index %}",
)

# MiniMax-M2 (MiniMaxAI/MiniMax-M2 chat_template.jinja; llama.cpp
# models/templates/unsloth-MiniMax-M2.jinja): "]~b]ai\n" turns; the generation
# prompt always opens "<think>\n"; reasoning of assistant turns after the
# last user message is rendered as "<think>\nR\n</think>\n\n" (interleaved
# thinking), earlier turns lose it.
MINIMAX_M2 = """\
]~!b[]~b]system
{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are a helpful assistant.{% endif %}
{%- if tools %}

# Tools
<tools>
{% for tool in tools %}<tool>{{ tool.function | tojson }}</tool>
{% endfor %}</tools>{% endif %}[e~[
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user_index = loop.index0 %}{% endif %}{% endfor %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}]~b]ai
{% if message.reasoning_content and loop.index0 > ns.last_user_index %}<think>
{{ message.reasoning_content }}
</think>

{% endif %}{{ message.content }}
{%- if message.tool_calls %}
<minimax:tool_call>
{% for call in message.tool_calls %}<invoke name="{{ call.function.name }}">
{% for k, v in call.function.arguments | items %}<parameter name="{{ k }}">{{ v if v is string else v | tojson }}</parameter>
{% endfor %}</invoke>
{% endfor %}</minimax:tool_call>{% endif %}[e~[
{% elif message.role == 'tool' %}]~b]tool
<response>{{ message.content }}</response>[e~[
{% elif message.role == 'user' %}]~b]user
{{ message.content }}[e~[
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}]~b]ai
<think>
{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# Kimi-K2-Thinking (moonshotai/Kimi-K2-Thinking chat_template.jinja; llama.cpp
# models/templates/Kimi-K2-Thinking.jinja): messages after the last assistant
# message without tool calls (the current tool loop) keep their reasoning as
# "<think>R</think>"; earlier assistant turns get an empty "<think></think>";
# the generation prompt does not open the reasoning (the model writes <think>).
KIMI_K2_THINKING = """\
{%- if tools %}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{% endif %}
{%- set ns = namespace(last=-1) %}
{%- for idx in range(messages|length - 1, -1, -1) %}
{%- if messages[idx].role == 'assistant' and not messages[idx].get('tool_calls') and ns.last == -1 %}{% set ns.last = idx %}{% endif %}
{%- endfor %}
{%- for message in messages %}
{%- if message.role == 'user' %}<|im_user|>user<|im_middle|>{{ message.content }}<|im_end|>
{%- elif message.role == 'system' %}<|im_system|>system<|im_middle|>{{ message.content }}<|im_end|>
{%- elif message.role == 'tool' %}<|im_system|>tool<|im_middle|>## Return of {{ message.tool_call_id }}
{{ message.content }}<|im_end|>
{%- elif message.role == 'assistant' %}<|im_assistant|>assistant<|im_middle|>
{%- if loop.index0 > ns.last %}<think>{{ message.get('reasoning_content', '') }}</think>{% else %}<think></think>{% endif %}
{{- message.content }}
{%- if message.get('tool_calls') %}<|tool_calls_section_begin|>
{%- for call in message.tool_calls %}<|tool_call_begin|>functions.{{ call.function.name }}:{{ loop.index0 }}<|tool_call_argument_begin|>{{ call.function.arguments | tojson }}<|tool_call_end|>{% endfor %}
{{- '<|tool_calls_section_end|>' }}{% endif %}<|im_end|>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_assistant|>assistant<|im_middle|>{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# GLM-4.5 / GLM-4.6 (zai-org/GLM-4.6 chat_template.jinja; llama.cpp
# models/templates/GLM-4.6.jinja): enable_thinking false adds "/nothink" to
# user turns and an empty "\n<think></think>" after the generation prompt;
# true leaves the model to write "\n<think>"; reasoning of assistant turns
# after the last user message is rendered as "\n<think>R</think>", earlier
# ones as "\n<think></think>".
GLM45 = """\
[gMASK]<sop>
{%- if tools %}<|system|>
# Tools
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>{% endif %}
{%- set ns = namespace(last_user_index=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set ns.last_user_index = loop.index0 %}{% endif %}{% endfor %}
{%- for m in messages %}
{%- if m.role == 'user' %}<|user|>
{{ m.content }}{{ '/nothink' if (enable_thinking is defined and not enable_thinking) else '' }}
{%- elif m.role == 'assistant' %}<|assistant|>
{%- if loop.index0 > ns.last_user_index and m.reasoning_content %}{{ '\\n<think>' + m.reasoning_content + '</think>' }}{% else %}{{ '\\n<think></think>' }}{% endif %}
{%- if m.content %}{{ '\\n' + m.content }}{% endif %}
{%- for tc in m.tool_calls or [] %}{{ '\\n<tool_call>' + tc.function.name }}
{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v if v is string else v | tojson }}</arg_value>
{% endfor %}</tool_call>{% endfor %}
{%- elif m.role == 'tool' %}<|observation|>
<tool_response>
{{ m.content }}
</tool_response>
{%- elif m.role == 'system' %}<|system|>
{{ m.content }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{{ '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' }}{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# GLM-4.7 (zai-org/GLM-4.7 chat_template.jinja): as GLM-4.6, but the
# generation prompt opens "<think>" itself with thinking on (closed
# "</think>" with it off), and clear_thinking false keeps every past turn's
# reasoning (the same gate as above).
GLM47 = GLM45.replace(
    "{%- if loop.index0 > ns.last_user_index and m.reasoning_content %}",
    "{%- if ((clear_thinking is defined and not clear_thinking) or loop.index0 > ns.last_user_index)"
    " and m.reasoning_content %}",
).replace(
    "{%- if add_generation_prompt %}<|assistant|>"
    "{{ '\\n<think></think>' if (enable_thinking is defined and not enable_thinking) else '' }}{% endif %}",
    "{%- if add_generation_prompt %}<|assistant|>"
    "{{ '</think>' if (enable_thinking is defined and not enable_thinking) else '<think>' }}{% endif %}",
)

# DeepSeek-V3.1 (deepseek-ai/DeepSeek-V3.1 tokenizer_config.json; llama.cpp
# models/templates/deepseek-ai-DeepSeek-V3.1.jinja): the variable is
# `thinking`; the generation prompt is "<｜Assistant｜><think>" with it on,
# "<｜Assistant｜></think>" with it off; past reasoning is never rendered
# (content after "</think>" only).
DEEPSEEK_V31 = """\
{{ bos_token }}{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}
{%- if tools %}## Tools{% for tool in tools %}
{{ tool | tojson }}{% endfor %}{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' %}<｜User｜>{{ message.content }}
{%- elif message.role == 'assistant' %}<｜Assistant｜></think>{{ message.content }}
{%- if message.tool_calls %}<｜tool▁calls▁begin｜>{% for call in message.tool_calls %}<｜tool▁call▁begin｜>{{ call.function.name }}<｜tool▁sep｜>{{ call.function.arguments | tojson }}<｜tool▁call▁end｜>{% endfor %}<｜tool▁calls▁end｜>{% endif %}<｜end▁of▁sentence｜>
{%- elif message.role == 'tool' %}<｜tool▁output▁begin｜>{{ message.content }}<｜tool▁output▁end｜>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<｜Assistant｜>{{ '<think>' if thinking else '</think>' }}{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# DeepSeek-V3.2 (llama.cpp models/templates/DeepSeek-V3.2.jinja): the
# variable is enable_thinking (default true); every user turn and the end of
# a batch of tool results open "<think>" (thinking on, in the current loop)
# or write "</think>"; an assistant turn after the last user message renders
# its reasoning then "</think>" (interleaved thinking across tool calls).
DEEPSEEK_V32 = """\
{%- set enable_thinking = enable_thinking | default(true) %}{{ bos_token }}
{%- if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}
{%- if tools %}## Tools{% for tool in tools %}
{{ tool | tojson }}{% endfor %}{% endif %}
{%- set last = namespace(value=-1) %}
{%- for m in messages %}{% if m.role == 'user' %}{% set last.value = loop.index0 %}{% endif %}{% endfor %}
{%- for message in messages %}
{%- if message.role == 'user' %}<｜User｜>{{ message.content }}<｜Assistant｜>{{ '<think>' if (loop.index0 == last.value and enable_thinking) else '</think>' }}
{%- elif message.role == 'tool' %}

<function_results>
<result>{{ message.content }}</result>
</function_results>

{{ '<think>' if (loop.index0 >= last.value and enable_thinking) else '</think>' }}
{%- elif message.role == 'assistant' %}
{%- if enable_thinking and loop.index0 > last.value %}{{ message.get('reasoning_content', '') }}</think>{% endif %}
{{- message.content }}
{%- if message.get('tool_calls') %}

<｜DSML｜function_calls>{% for call in message.tool_calls %}
<｜DSML｜invoke name="{{ call.function.name }}">{% for k, v in call.function.arguments.items() %}
<｜DSML｜parameter name="{{ k }}" string="{{ 'true' if v is string else 'false' }}">{{ v if v is string else v | tojson }}</｜DSML｜parameter>{% endfor %}
</｜DSML｜invoke>{% endfor %}
</｜DSML｜function_calls>{% endif %}<｜end▁of▁sentence｜>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt and messages[-1].role != 'tool' and messages[-1].role != 'user' %}<｜User｜>
<｜Assistant｜>{{ '<think>' if enable_thinking else '</think>' }}{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# Seed-OSS (ByteDance-Seed/Seed-OSS-36B-Instruct chat_template.jinja; llama.cpp
# models/templates/ByteDance-Seed-OSS.jinja): thinking_budget (-1 default:
# unlimited) is announced in a system turn; 0 makes the generation prompt
# open "<seed:think><seed:cot_budget_reflect>"; every assistant turn with
# reasoning_content renders "<seed:think>R</seed:think>".
SEED_OSS = """\
{%- if not thinking_budget is defined %}{% set thinking_budget = -1 %}{% endif %}
{%- if messages[0].role == 'system' %}<seed:bos>system
{{ messages[0].content }}<seed:eos>{% endif %}
{%- if tools %}<seed:bos>system
{% for tool in tools %}Function: {{ tool.function.name }}
{% endfor %}<seed:eos>{% endif %}
{%- if thinking_budget == 0 %}<seed:bos>system
You are an intelligent assistant that can answer questions in one step without the need for reasoning and thinking.<seed:eos>
{%- elif thinking_budget != -1 %}<seed:bos>system
Your thinking budget is {{ thinking_budget }} tokens.<seed:eos>{% endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' %}<seed:bos>assistant
{%- if message.reasoning_content %}
<seed:think>{{ message.reasoning_content | trim }}</seed:think>{% endif %}
{%- if message.content %}
{{ message.content | trim }}{% endif %}
{%- for call in message.tool_calls or [] %}
<seed:tool_call>
<function={{ call.function.name }}>
{% for k, v in call.function.arguments | items %}<parameter={{ k }}>{{ v if v is string else v | string }}</parameter>
{% endfor %}</function>
</seed:tool_call>{% endfor %}<seed:eos>
{%- elif message.role != 'system' or not loop.first %}<seed:bos>{{ message.role }}
{{ message.content }}<seed:eos>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<seed:bos>assistant
{% if thinking_budget == 0 %}<seed:think><seed:cot_budget_reflect>{% endif %}{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# Gemma 4 (google/gemma-4 chat_template.jinja; llama.cpp
# models/templates/gemma4.jinja): enable_thinking puts <|think|> at the top of
# the system turn and the model writes "<|channel>thought\n...<channel|>";
# without it the generation prompt ends with an empty thought channel; past
# reasoning is stripped from model turns (never replayed).
GEMMA4 = """\
{{ bos_token }}
{%- if enable_thinking or tools or messages[0].role == 'system' %}<|turn>system
{% if enable_thinking %}<|think|>{% endif %}{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}
{%- for tool in tools or [] %}<|tool>declaration:{{ tool.function.name }}<tool|>{% endfor %}<turn|>
{% endif %}
{%- for message in messages %}
{%- if message.role != 'system' %}<|turn>{{ 'model' if message.role == 'assistant' else message.role }}
{% for call in message.tool_calls or [] %}<|tool_call>call:{{ call.function.name }}{{ call.function.arguments | tojson }}<tool_call|>{% endfor %}
{{- message.content }}<turn|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|turn>model
{% if not enable_thinking %}<|channel>thought
<channel|>{% endif %}{% endif %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

# Magistral (mistralai/Magistral-Small-2509 chat template): without a system
# message, a default one asks for the reasoning between [THINK] and [/THINK]
# before the answer; no switch in the template.
MAGISTRAL = """\
{{ bos_token }}
{%- if messages[0].role != 'system' %}[SYSTEM_PROMPT]First draft your thinking process (inner monologue) until you \
arrive at a response. Write it as [THINK]your thoughts[/THINK] followed by your answer.[/SYSTEM_PROMPT]{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}[SYSTEM_PROMPT]{{ message.content }}[/SYSTEM_PROMPT]
{%- elif message.role == 'user' %}{% if tools and loop.last %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[INST]{{ message.content }}[/INST]
{%- elif message.role == 'assistant' %}{{ message.content }}
{%- for call in message.tool_calls or [] %}[TOOL_CALLS]{{ call.function.name }}[ARGS]{{ call.function.arguments | tojson }}{% endfor %}{{ eos_token }}
{%- elif message.role == 'tool' %}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]
{%- endif %}
{%- endfor %}"""  # noqa: E501 - template lines kept whole: a line break would be rendered

R = "The user wants the weather; call get_weather for Paris."

FAMILIES: tuple[Family, ...] = (
    Family(
        "qwen3",
        QWEN3,
        "think",
        "<think>\nThe user wants it.\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\"",
        "The user wants it.",
        "Checking.\n<tool_call>\n{\"name\": \"get_weather\"",
        False,
        "<think>\n{R}\n</think>\n\n",
    ),
    Family(
        "qwen3.5",
        QWEN35,
        "think",
        "\nThe user wants it.\n</think>\n\nChecking.\n<tool_call>\n<function=get_weather>",
        "The user wants it.",
        "Checking.\n<tool_call>\n<function=get_weather>",
        True,
        "<think>\n{R}\n</think>\n\n",
        earlier_dropped=False,
    ),
    Family(
        "minimax-m2",
        MINIMAX_M2,
        "think",
        "The user wants it.\n</think>\n\nChecking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">",
        "The user wants it.",
        "Checking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">",
        True,
        "<think>\n{R}\n</think>\n\n",
    ),
    Family(
        "kimi-k2-thinking",
        KIMI_K2_THINKING,
        "think",
        "<think>The user wants it.</think>Checking.<|tool_calls_section_begin|><|tool_call_begin|>",
        "The user wants it.",
        "Checking.<|tool_calls_section_begin|><|tool_call_begin|>",
        False,
        "<think>{R}</think>",
    ),
    Family(
        "glm-4.5",
        GLM45,
        "think",
        "\n<think>The user wants it.</think>\nChecking.\n<tool_call>get_weather\n<arg_key>city</arg_key>",
        "The user wants it.",
        "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>",
        False,
        "\n<think>{R}</think>",
    ),
    Family(
        "glm-4.7",
        GLM47,
        "think",
        "The user wants it.</think>\nChecking.\n<tool_call>get_weather\n<arg_key>city</arg_key>",
        "The user wants it.",
        "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>",
        True,
        "\n<think>{R}</think>",
        earlier_dropped=False,
    ),
    Family(
        "deepseek-v3.1",
        DEEPSEEK_V31,
        "think",
        "The user wants it.</think>It is sunny.",
        "The user wants it.",
        "It is sunny.",
        True,
        None,
    ),
    Family(
        "deepseek-v3.2",
        DEEPSEEK_V32,
        "think",
        "The user wants it.</think>Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke "
        "name=\"get_weather\">",
        "The user wants it.",
        "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">",
        True,
        "<think>{R}</think>",
    ),
    Family(
        "seed-oss",
        SEED_OSS,
        "seed_think",
        "<seed:think>The user wants it.<seed:cot_budget_reflect>I have used 5 tokens."
        "</seed:cot_budget_reflect>"
        "</seed:think>Checking.\n<seed:tool_call>\n<function=get_weather>",
        "The user wants it.<seed:cot_budget_reflect>I have used 5 tokens.</seed:cot_budget_reflect>",
        "Checking.\n<seed:tool_call>\n<function=get_weather>",
        False,
        "<seed:think>{R}</seed:think>",
        earlier_dropped=False,
    ),
    Family(
        "gemma-4",
        GEMMA4,
        "gemma4_thought",
        "<|channel>thought\nThe user wants it.<channel|>Checking.<|tool_call>call:get_weather{",
        "The user wants it.",
        "Checking.<|tool_call>call:get_weather{",
        False,
        None,
    ),
    Family(
        "magistral",
        MAGISTRAL,
        "mistral_think",
        "[THINK]The user wants it.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]{",
        "The user wants it.",
        "Checking.[TOOL_CALLS]get_weather[ARGS]{",
        False,
        None,
    ),
)
