"""The model families of issue 27 as test fixtures: per family, a small chat
template written for these tests in the family's real format, its special
tokens, its tool parser and the llama.cpp architecture of the tiny GGUF the
end-to-end test writes.

Each template renders what the family's published template renders where it
matters here: the role markers, the tool declarations (with the marker that
selects the parser), past calls in the exact syntax the model writes (so a
conversation's history reads back into the same calls), tool results, and
the generation prompt. Sources: the families' chat templates
(llama.cpp ``models/templates/``: ``GLM-4.6.jinja``, ``unsloth-MiniMax-M2.jinja``,
``Kimi-K2-Thinking.jinja``, ``deepseek-ai-DeepSeek-V3.1.jinja``,
``DeepSeek-V3.2.jinja``, ``ByteDance-Seed-OSS.jinja``, ``gemma4.jinja``,
``NVIDIA-Nemotron-Nano-v2.jinja``, ``mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja``),
Qwen3-Coder's and Granite 4.0's model cards, and vLLM's
``examples/tool_chat_template_llama4_pythonic.jinja``. They are not copies:
reasoning, images and each template's other branches are left out.

``arch``: the family's own llama.cpp architecture, which the tiny writer
(:mod:`missive_llamacpp.testing_gguf`, :mod:`missive_llamacpp.testing_archs`)
writes and the installed llama.cpp loads: the weights are random, but the
loader, the graph (mixtures of experts, latent attention, Mamba-2 hybrids,
sliding windows) and its memory are the family's own.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Family", "FAMILIES"]


@dataclass(frozen=True)
class Family:
    name: str
    parser: str
    template: str
    specials: tuple[str, ...]  # control tokens of the vocabulary (the first EOS)
    eos: str
    #: llama.cpp's general.architecture of the family's models; None: the
    #: tiny writer has no writer for it yet (no end-to-end test).
    arch: str | None
    #: The template takes a ``tools`` list; False: it renders past calls
    #: only, and the tools are declared in the system prompt.
    tool_list: bool = True


#: Tools declared the way most templates do (OpenAI functions as JSON).
_TOOLS_JSON = "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"

#: Past calls' arguments: a string as it is, anything else as JSON.
_VALUE = "{{ v if v is string else v | tojson }}"

_QWEN = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' or (loop.first and tools) -%}<|im_start|>system\n"
    "{% if message.role == 'system' %}{{ message.content }}\n{% endif %}"
    "{% if tools %}# Tools\n<tools>\n" + _TOOLS_JSON + "</tools>\n"
    "To call a function reply with:\n<tool_call>\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n</function>\n</tool_call>\n{% endif %}"
    "<|im_end|>\n"
    "{%- endif -%}"
    "{%- if message.role == 'user' -%}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.role == 'assistant' -%}<|im_start|>assistant\n{{ message.content }}"
    "{%- for tc in message.tool_calls or [] -%}\n<tool_call>\n<function={{ tc.function.name }}>\n"
    "{%- for k, v in tc.function.arguments.items() %}\n<parameter={{ k }}>\n"
    + _VALUE
    + "\n</parameter>{% endfor %}\n"
    "</function>\n</tool_call>{%- endfor -%}<|im_end|>\n"
    "{%- elif message.role == 'tool' -%}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)

_QWEN_SPECIALS = ("<|im_end|>", "<|im_start|>", "<tool_call>", "</tool_call>")

_SEED = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' or (loop.first and tools) -%}<seed:bos>system\n"
    "{% if message.role == 'system' %}{{ message.content }}\n{% endif %}"
    "{% if tools %}" + _TOOLS_JSON + "Call tools as:\n<seed:tool_call>\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>value_1</parameter>\n</function>\n</seed:tool_call>\n{% endif %}"
    "<seed:eos>"
    "{%- endif -%}"
    "{%- if message.role == 'user' -%}<seed:bos>user\n{{ message.content }}<seed:eos>"
    "{%- elif message.role == 'assistant' -%}<seed:bos>assistant\n{{ message.content }}"
    "{%- for tc in message.tool_calls or [] -%}\n<seed:tool_call>\n<function={{ tc.function.name }}>\n"
    "{%- for k, v in tc.function.arguments.items() %}<parameter={{ k }}>"
    + _VALUE
    + "</parameter>\n{% endfor -%}"
    "</function>\n</seed:tool_call>{%- endfor -%}<seed:eos>"
    "{%- elif message.role == 'tool' -%}<seed:bos>tool\n{{ message.content }}<seed:eos>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<seed:bos>assistant\n{%- endif -%}"
)

_MINIMAX = (
    "]~!b[]~b]system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}\n\n# Tools\n<tools>\n{% for tool in tools %}<tool>{{ tool.function | tojson }}</tool>\n"
    "{% endfor %}</tools>\n"
    "When making tool calls, use XML format:\n<minimax:tool_call>\n<invoke name=\"tool-name-1\">\n"
    "<parameter name=\"param-key-1\">param-value-1</parameter>\n</invoke>\n</minimax:tool_call>"
    "{% endif %}[e~[\n"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}]~b]user\n{{ message.content }}[e~[\n"
    "{%- elif message.role == 'assistant' -%}]~b]ai\n{{ message.content }}"
    "{%- if message.tool_calls -%}\n<minimax:tool_call>\n"
    "{%- for tc in message.tool_calls -%}<invoke name=\"{{ tc.function.name }}\">\n"
    "{%- for k, v in tc.function.arguments.items() %}<parameter name=\"{{ k }}\">"
    + _VALUE
    + "</parameter>\n{% endfor -%}"
    "</invoke>\n{%- endfor -%}</minimax:tool_call>{%- endif -%}[e~[\n"
    "{%- elif message.role == 'tool' -%}]~b]tool\n<response>{{ message.content }}</response>[e~[\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}]~b]ai\n{%- endif -%}"
)

_GLM = (
    "[gMASK]<sop>{% if tools %}<|system|>\n# Tools\n<tools>\n" + _TOOLS_JSON + "</tools>\n"
    "For each function call, output:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
    "<arg_value>{arg-value-1}</arg_value>\n</tool_call>{% endif %}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}<|system|>\n{{ message.content }}"
    "{%- elif message.role == 'user' -%}<|user|>\n{{ message.content }}"
    "{%- elif message.role == 'assistant' -%}<|assistant|>\n<think></think>\n{{ message.content }}"
    "{%- for tc in message.tool_calls or [] -%}\n<tool_call>{{ tc.function.name }}\n"
    "{%- for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>\n<arg_value>"
    + _VALUE
    + "</arg_value>\n{% endfor -%}"
    "</tool_call>{%- endfor -%}"
    "{%- elif message.role == 'tool' -%}<|observation|>\n<tool_response>\n{{ message.content }}\n"
    "</tool_response>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>\n<think></think>\n{%- endif -%}"
)

_KIMI = (
    "{% if tools %}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{% endif %}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}<|im_system|>system<|im_middle|>{{ message.content }}<|im_end|>"
    "{%- elif message.role == 'user' -%}<|im_user|>user<|im_middle|>{{ message.content }}<|im_end|>"
    "{%- elif message.role == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>{{ message.content }}"
    "{%- if message.tool_calls -%}<|tool_calls_section_begin|>"
    "{%- for tc in message.tool_calls -%}<|tool_call_begin|>functions.{{ tc.function.name }}:"
    "{{ loop.index0 }}"
    "<|tool_call_argument_begin|>{{ tc.function.arguments | tojson }}<|tool_call_end|>{%- endfor -%}"
    "<|tool_calls_section_end|>{%- endif -%}<|im_end|>"
    "{%- elif message.role == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of "
    "{{ message.tool_call_id }}\n{{ message.content }}<|im_end|>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}"
)

_DEEPSEEK_V31 = (
    "{{ bos_token }}{% for message in messages if message.role == 'system' %}{{ message.content }}"
    "{% endfor %}"
    "{% if tools %}\n\n## Tools\n"
    + _TOOLS_JSON
    + "To call a tool: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name"
    "<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜><｜tool▁calls▁end｜>{% endif %}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}<｜User｜>{{ message.content }}"
    "{%- elif message.role == 'assistant' -%}<｜Assistant｜></think>{{ message.content }}"
    "{%- if message.tool_calls -%}<｜tool▁calls▁begin｜>"
    "{%- for tc in message.tool_calls -%}<｜tool▁call▁begin｜>{{ tc.function.name }}<｜tool▁sep｜>"
    "{{ tc.function.arguments | tojson }}<｜tool▁call▁end｜>{%- endfor -%}<｜tool▁calls▁end｜>{%- endif -%}"
    "<｜end▁of▁sentence｜>"
    "{%- elif message.role == 'tool' -%}<｜tool▁output▁begin｜>{{ message.content }}<｜tool▁output▁end｜>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<｜Assistant｜></think>{%- endif -%}"
)

_DEEPSEEK_V32 = (
    "{{ bos_token }}{% for message in messages if message.role == 'system' %}{{ message.content }}"
    "{% endfor %}"
    "{% if tools %}\n\n## Tools\nInvoke functions with a <｜DSML｜function_calls> block:\n"
    "<｜DSML｜function_calls>\n"
    "<｜DSML｜invoke name=\"$FUNCTION_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">"
    "$PARAMETER_VALUE</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>\n<functions>\n"
    + _TOOLS_JSON
    + "</functions>\n{% endif %}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}<｜User｜>{{ message.content }}<｜Assistant｜></think>"
    "{%- elif message.role == 'assistant' -%}{{ message.content }}"
    "{%- if message.tool_calls -%}\n\n<｜DSML｜function_calls>"
    "{%- for tc in message.tool_calls -%}\n<｜DSML｜invoke name=\"{{ tc.function.name }}\">"
    "{%- for k, v in tc.function.arguments.items() %}\n<｜DSML｜parameter name=\"{{ k }}\" string=\""
    "{{ 'true' if v is string else 'false' }}\">"
    + _VALUE
    + "</｜DSML｜parameter>{% endfor %}\n</｜DSML｜invoke>{%- endfor -%}\n</｜DSML｜function_calls>"
    "{%- endif -%}<｜end▁of▁sentence｜>"
    "{%- elif message.role == 'tool' -%}\n\n<function_results>\n<result>{{ message.content }}</result>\n"
    "</function_results>\n\n</think>"
    "{%- endif -%}{%- endfor -%}"
)

_GEMMA4 = (
    "{%- macro arg(v) -%}{%- if v is string -%}<|\"|>{{ v }}<|\"|>{%- elif v is mapping -%}"
    "{ {%- for k, x in v | dictsort -%}{{ k }}:{{ arg(x) }}{{ ',' if not loop.last }}{%- endfor -%} }"
    "{%- elif v is iterable -%}[{%- for x in v -%}{{ arg(x) }}{{ ',' if not loop.last }}{%- endfor -%}]"
    "{%- else -%}{{ v | tojson }}{%- endif -%}{%- endmacro -%}"
    "{{ bos_token }}{% if tools or messages[0].role == 'system' %}<|turn>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% for tool in tools or [] %}<|tool>declaration:{{ tool.function.name }}{{ tool.function | tojson }}"
    "<tool|>{% endfor %}<turn|>\n{% endif %}"
    "{%- for message in messages if message.role != 'system' -%}"
    "<|turn>{{ 'model' if message.role == 'assistant' else message.role }}\n"
    "{%- for tc in message.tool_calls or [] -%}<|tool_call>call:{{ tc.function.name }}"
    "{{ arg(tc.function.arguments) }}<tool_call|>{%- endfor -%}"
    "{%- if message.role == 'tool' -%}<|tool_response>response:{{ message.name }}{value:<|\"|>"
    "{{ message.content }}<|\"|>}<tool_response|>"
    "{%- else -%}{{ message.content }}{%- endif -%}<turn|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|turn>model\n{%- endif -%}"
)

_NEMOTRON = (
    "<SPECIAL_10>System\n{% if messages[0].role == 'system' %}{{ messages[0].content }}{% endif %}"
    "{% if tools %}\n\nYou can use the following tools:\n<AVAILABLE_TOOLS>[{% for tool in tools %}"
    "{{ tool.function | tojson }}"
    "{{ ', ' if not loop.last }}{% endfor %}]</AVAILABLE_TOOLS>\n\nTo call tools use:\n"
    "<TOOLCALL>[{\"name\": \"tool_name1\", \"arguments\": \"tool_args1\"}]</TOOLCALL>{% endif %}\n\n"
    "{%- for message in messages if message.role != 'system' -%}"
    "{%- if message.role == 'user' -%}<SPECIAL_11>User\n{{ message.content }}\n"
    "{%- elif message.role == 'tool' -%}<SPECIAL_11>User\n<TOOL_RESPONSE>[{{ message.content }}]"
    "</TOOL_RESPONSE>\n"
    "{%- elif message.role == 'assistant' -%}<SPECIAL_11>Assistant\n{{ message.content }}"
    "{%- if message.tool_calls -%}<TOOLCALL>["
    "{%- for tc in message.tool_calls -%}{\"name\": \"{{ tc.function.name }}\", \"arguments\": "
    "{{ tc.function.arguments | tojson }}}"
    "{{ ', ' if not loop.last }}{%- endfor -%}]</TOOLCALL>{%- endif -%}\n<SPECIAL_12>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<SPECIAL_11>Assistant\n{%- endif -%}"
)

_LLAMA4_PYTHONIC = (
    "{{ bos_token }}{% if tools or messages[0].role == 'system' %}<|header_start|>system<|header_end|>\n\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n{% endif %}"
    "{% if tools %}Use exact format: [func_name1(param1=value1, param2=value2), func_name2(...)]\n"
    + _TOOLS_JSON
    + "{% endif %}<|eot|>{% endif %}"
    "{%- for message in messages if message.role != 'system' -%}"
    "{%- if message.role == 'assistant' -%}<|header_start|>assistant<|header_end|>\n\n{{ message.content }}"
    "{%- if message.tool_calls -%}["
    "{%- for tc in message.tool_calls -%}{{ tc.function.name }}("
    "{%- for k, v in tc.function.arguments.items() -%}{{ k }}={{ v | tojson }}{{ ', ' if not loop.last }}"
    "{%- endfor -%})"
    "{{ ', ' if not loop.last }}{%- endfor -%}]{%- endif -%}<|eot|>"
    "{%- elif message.role == 'tool' -%}<|header_start|>ipython<|header_end|>\n\n"
    "{{ message.content | tojson }}<|eot|>"
    "{%- else -%}<|header_start|>{{ message.role }}<|header_end|>\n\n{{ message.content }}<|eot|>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|header_start|>assistant<|header_end|>\n\n{%- endif -%}"
)

_MISTRAL = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- if message.role == 'system' -%}[SYSTEM_PROMPT]{{ message.content }}[/SYSTEM_PROMPT]"
    "{%- elif message.role == 'user' -%}{% if loop.last and tools %}[AVAILABLE_TOOLS]"
    "{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "[INST]{{ message.content }}[/INST]"
    "{%- elif message.role == 'assistant' -%}{{ message.content }}"
    "{%- for tc in message.tool_calls or [] -%}[TOOL_CALLS]{{ tc.function.name }}[ARGS]"
    "{{ tc.function.arguments | tojson }}{%- endfor -%}</s>"
    "{%- elif message.role == 'tool' -%}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]"
    "{%- endif -%}{%- endfor -%}"
)

_GRANITE4 = (
    "{%- for message in messages -%}"
    "{%- if message.role == 'system' or (loop.first and tools) -%}<|start_of_role|>system<|end_of_role|>"
    "{% if message.role == 'system' %}{{ message.content }}\n{% endif %}"
    "{% if tools %}You have access to the following tools:\n<tools>\n" + _TOOLS_JSON + "</tools>\n"
    "For each tool call, return a json object with function name and arguments within <tool_call>"
    "</tool_call> XML tags:\n"
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>{% endif %}"
    "<|end_of_text|>\n"
    "{%- endif -%}"
    "{%- if message.role == 'user' -%}<|start_of_role|>user<|end_of_role|>{{ message.content }}"
    "<|end_of_text|>\n"
    "{%- elif message.role == 'assistant' -%}<|start_of_role|>assistant<|end_of_role|>{{ message.content }}"
    "{%- for tc in message.tool_calls or [] -%}<tool_call>\n{\"name\": \"{{ tc.function.name }}\", "
    "\"arguments\": "
    "{{ tc.function.arguments | tojson }}}\n</tool_call>{%- endfor -%}<|end_of_text|>\n"
    "{%- elif message.role == 'tool' -%}<|start_of_role|>tool<|end_of_role|>{{ message.content }}"
    "<|end_of_text|>\n"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start_of_role|>assistant<|end_of_role|>{%- endif -%}"
)

# DeepSeek-V3.1's published template (llama.cpp models/templates/deepseek-ai-DeepSeek-V3.1.jinja):
# past calls are rendered, but the template takes no tool list (the word is absent).
_DEEPSEEK_V31_CARD = (
    "{{ bos_token }}{% for message in messages if message.role == 'system' %}{{ message.content }}"
    "{% endfor %}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}<｜User｜>{{ message.content }}"
    "{%- elif message.role == 'assistant' -%}<｜Assistant｜></think>{{ message.content }}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] is not none -%}<｜tool▁calls▁begin｜>"
    "{%- for tc in message['tool_calls'] -%}<｜tool▁call▁begin｜>{{ tc['function']['name'] }}<｜tool▁sep｜>"
    "{{ tc['function']['arguments'] | tojson }}<｜tool▁call▁end｜>{%- endfor -%}<｜tool▁calls▁end｜>"
    "{%- endif -%}<｜end▁of▁sentence｜>"
    "{%- elif message.role == 'tool' -%}<｜tool▁output▁begin｜>{{ message.content }}<｜tool▁output▁end｜>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<｜Assistant｜></think>{%- endif -%}"
)


def _dsml(block: str, d: str) -> str:
    """DeepSeek-V4 (``tool_calls``) and V4.1 (``calls``, a space after each
    ``｜DSML｜`` token): V3.2's layout with their block names, as their
    Python encoders (encoding_dsv4.py, encoding.py) write it."""
    return _DEEPSEEK_V32.replace("｜DSML｜", d).replace(f"{d}function_calls>", f"{d}{block}>")


# Kimi-K3's XTML (llama.cpp models/templates/Kimi-K3.jinja): elements written
# with the <|open|>, <|close|> and <|sep|> control tokens.
_KIMI_K3 = (
    "{% if tools %}<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\n"
    "{{ tools | tojson }}<|close|>message<|sep|><|end_of_msg|>{% endif %}"
    "{%- for message in messages -%}"
    "{%- if message.role in ('system', 'user') -%}<|open|>message role=\"{{ message.role }}\"<|sep|>"
    "{{ message.content }}"
    "<|close|>message<|sep|><|end_of_msg|>"
    "{%- elif message.role == 'assistant' -%}<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>"
    "{{ message.content }}<|close|>response<|sep|>"
    "{%- if message.tool_calls -%}<|open|>tools<|sep|>"
    "{%- for tc in message.tool_calls -%}<|open|>call tool=\"{{ tc.function.name }}\" index=\""
    "{{ loop.index }}\"<|sep|>"
    "{%- for k, v in tc.function.arguments.items() -%}<|open|>argument key=\"{{ k }}\" type=\""
    "{{ 'string' if v is string else ('boolean' if v is boolean else ('number' if v is number else "
    "'object')) }}\"<|sep|>"
    + _VALUE
    + "<|close|>argument<|sep|>{%- endfor -%}<|close|>call<|sep|>{%- endfor -%}<|close|>tools<|sep|>"
    "{%- endif -%}"
    "<|close|>message<|sep|><|end_of_msg|>"
    "{%- elif message.role == 'tool' -%}<|open|>message role=\"tool\" tool=\"{{ message.name }}\"<|sep|>"
    "{{ message.content }}<|close|>message<|sep|><|end_of_msg|>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|open|>message role=\"assistant\"<|sep|>"
    "{{ '<|open|>think<|sep|>' if thinking else '<|open|>response<|sep|>' }}{%- endif -%}"
)

# Granite 3.1-3.3: <|tool_call|> and a JSON array of calls (the model cards).
_GRANITE3 = _GRANITE4.replace(
    "For each tool call, return a json object with function name and arguments within <tool_call>"
    "</tool_call> XML tags:\n"
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    "To call tools, write <|tool_call|> and a JSON list of {\"name\": ..., \"arguments\": {...}} objects.",
).replace(
    "{%- for tc in message.tool_calls or [] -%}<tool_call>\n{\"name\": \"{{ tc.function.name }}\", "
    "\"arguments\": "
    "{{ tc.function.arguments | tojson }}}\n</tool_call>{%- endfor -%}",
    "{%- if message.tool_calls -%}<|tool_call|>[{%- for tc in message.tool_calls -%}{\"name\": \""
    "{{ tc.function.name }}\", "
    "\"arguments\": {{ tc.function.arguments | tojson }}}{{ ', ' if not loop.last }}{%- endfor -%}]"
    "{%- endif -%}",
)

_DSML_SPECIALS = (
    "<｜end▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "</think>",
)

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen3-coder", "qwen3_xml", _QWEN, _QWEN_SPECIALS, "<|im_end|>", arch="qwen3moe"),
        # The same format on the other architectures that write it.
        Family("qwen3.5", "qwen3_xml", _QWEN, _QWEN_SPECIALS, "<|im_end|>", arch="qwen35"),
        Family("nemotron-3-nano", "qwen3_xml", _QWEN, _QWEN_SPECIALS, "<|im_end|>", arch="nemotron_h_moe"),
        Family(
            "seed-oss",
            "seed_oss",
            _SEED,
            ("<seed:eos>", "<seed:bos>", "<seed:tool_call>", "</seed:tool_call>"),
            "<seed:eos>",
            arch="seed_oss",
        ),
        Family(
            "minimax-m2",
            "minimax_m2",
            _MINIMAX,
            ("[e~[", "]~b]", "]~!b[", "<minimax:tool_call>", "</minimax:tool_call>"),
            "[e~[",
            arch="minimax-m2",
        ),
        Family(
            "glm-4.5",
            "glm45",
            _GLM,
            (
                "<|user|>",
                "<|observation|>",
                "<|assistant|>",
                "<|system|>",
                "[gMASK]",
                "<sop>",
                "<tool_call>",
                "</tool_call>",
                "<arg_key>",
                "</arg_key>",
                "<arg_value>",
                "</arg_value>",
            ),
            "<|user|>",
            arch="glm4moe",
        ),
        Family(
            "kimi-k2",
            "kimi_k2",
            _KIMI,
            (
                "<|im_end|>",
                "<|im_user|>",
                "<|im_assistant|>",
                "<|im_system|>",
                "<|im_middle|>",
                "<|tool_calls_section_begin|>",
                "<|tool_calls_section_end|>",
                "<|tool_call_begin|>",
                "<|tool_call_argument_begin|>",
                "<|tool_call_end|>",
            ),
            "<|im_end|>",
            arch="deepseek2",
        ),  # Kimi-K2 is DeepSeek-V3's architecture
        Family(
            "deepseek-v3.1",
            "deepseek_v31",
            _DEEPSEEK_V31,
            (
                "<｜end▁of▁sentence｜>",
                "<｜begin▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "</think>",
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
                "<｜tool▁call▁begin｜>",
                "<｜tool▁call▁end｜>",
                "<｜tool▁sep｜>",
                "<｜tool▁output▁begin｜>",
                "<｜tool▁output▁end｜>",
            ),
            "<｜end▁of▁sentence｜>",
            arch="deepseek2",
        ),
        Family(
            "deepseek-v3.2",
            "deepseek_v32",
            _DEEPSEEK_V32,
            ("<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "</think>"),
            "<｜end▁of▁sentence｜>",
            arch="deepseek32",
        ),
        Family(
            "gemma-4",
            "gemma4",
            _GEMMA4,
            (
                "<turn|>",
                "<|turn>",
                "<|tool_call>",
                "<tool_call|>",
                '<|"|>',
                "<|tool>",
                "<tool|>",
                "<|tool_response>",
                "<tool_response|>",
            ),
            "<turn|>",
            arch="gemma4",
        ),
        Family(
            "nemotron",
            "nemotron",
            _NEMOTRON,
            ("<SPECIAL_12>", "<SPECIAL_10>", "<SPECIAL_11>", "<TOOLCALL>", "</TOOLCALL>"),
            "<SPECIAL_12>",
            arch="nemotron_h",
        ),  # Nano v2 (Llama-3.3-Nemotron-Super: deci)
        Family(
            "llama-4",
            "llama4_pythonic",
            _LLAMA4_PYTHONIC,
            ("<|eot|>", "<|header_start|>", "<|header_end|>", "<|python_start|>", "<|python_end|>"),
            "<|eot|>",
            arch="llama4",
        ),
        Family(
            "devstral",
            "mistral",
            _MISTRAL,
            (
                "</s>",
                "[INST]",
                "[/INST]",
                "[TOOL_CALLS]",
                "[ARGS]",
                "[AVAILABLE_TOOLS]",
                "[/AVAILABLE_TOOLS]",
                "[TOOL_RESULTS]",
                "[/TOOL_RESULTS]",
                "[SYSTEM_PROMPT]",
                "[/SYSTEM_PROMPT]",
            ),
            "</s>",
            arch="mistral3",
        ),  # Devstral 2, Ministral 3 (Devstral Small 1.x: llama)
        Family(
            "deepseek-v3.1-card",
            "deepseek_v31",
            _DEEPSEEK_V31_CARD,
            (
                "<｜end▁of▁sentence｜>",
                "<｜begin▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "</think>",
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
                "<｜tool▁call▁begin｜>",
                "<｜tool▁call▁end｜>",
                "<｜tool▁sep｜>",
                "<｜tool▁output▁begin｜>",
                "<｜tool▁output▁end｜>",
            ),
            "<｜end▁of▁sentence｜>",
            arch="deepseek2",
            tool_list=False,
        ),
        # DeepSeek-V4's own architecture (llama.cpp's deepseek4: hyper-connections,
        # compressed KV, hash routing) has no tiny writer yet.
        Family(
            "deepseek-v4",
            "deepseek_v4",
            _dsml("tool_calls", "｜DSML｜"),
            _DSML_SPECIALS,
            "<｜end▁of▁sentence｜>",
            arch=None,
        ),
        Family(
            "deepseek-v4.1",
            "deepseek_v41",
            _dsml("calls", "｜DSML｜ "),
            _DSML_SPECIALS,
            "<｜end▁of▁sentence｜>",
            arch=None,
        ),
        Family(
            "kimi-k3",
            "kimi_k3",
            _KIMI_K3,
            ("<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"),
            "<|end_of_msg|>",
            arch=None,
        ),  # K3's llama.cpp architecture is not identified here
        Family(
            "granite-3",
            "granite",
            _GRANITE3,
            ("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>"),
            "<|end_of_text|>",
            arch="granite",
        ),
        Family(
            "granite-4",
            "hermes",
            _GRANITE4,
            ("<|end_of_text|>", "<|start_of_role|>", "<|end_of_role|>", "<tool_call>", "</tool_call>"),
            "<|end_of_text|>",
            arch="granitehybrid",
        ),  # the H models (4.0 Micro: granite)
    )
}
