"""What each reference model of the canitoolcall corpus carries as its chat
template, for the ``detected`` replay of
:mod:`missive.testing.toolcall_conformance`: the parsers a served GGUF of the
model gets are chosen from these (:func:`missive.tools.parsers.selection.parser_for_template`,
:func:`missive.reasoning.registry.reasoning_parser_for_template`).

Each entry holds the lines of the model's published template that decide the
choice, quoted from it with the rest left out: the lines rendering past tool
calls, the tool list when the template takes one (``tools``), the reasoning
tags. Selection reads only literal markers and the words ``tools`` and
``tool_calls``, so an excerpt that keeps every line holding them selects as
the whole template does; an excerpt leaves out no line with a marker of
another format. Sources: the templates at the revisions the corpus pins
(``provenance.source_url``), and llama.cpp's ``models/templates/`` copies
(``deepseek-ai-DeepSeek-V3.1.jinja``, ``DeepSeek-V3.2.jinja``,
``Kimi-K3.jinja``, ``moonshotai-Kimi-K2.jinja``, ``Kimi-K2-Thinking.jinja``,
``glm_4_5.jinja``, ``GLM-4.6.jinja``, ``gemma4.jinja``,
``mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja``).

DeepSeek-V3.2, V4 and V4.1 publish no Jinja template (a Python encoder);
their entries are what a GGUF conversion carries: llama.cpp's V3.2 template
and, for V4 and V4.1, the same with their block names.
"""

from __future__ import annotations

__all__ = ["TEMPLATES"]

_QWEN3_TOOLS = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {{- tool_call.arguments | tojson }}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
"""  # noqa: E501 - lines quoted whole from the published template

_QWEN3_THINK = """\
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
"""  # noqa: E501 - lines quoted whole from the published template

_QWEN_XML_TOOLS = """\
{%- if tools and tools is iterable and tools is not mapping %}
    {{- "\\n\\n# Tools\\n\\nYou have access to the following functions:\\n\\n" }}
    {{- "<tools>" }}
    {%- for tool in tools %}
        {{- "\\n<function>\\n<name>" ~ tool.name ~ "</name>" }}
    {%- endfor %}
    {{- "\\n</tools>" }}
    {{- '\\n\\nIf you choose to call a function ONLY reply in the following format with NO suffix:\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n</parameter>\\n</function>\\n</tool_call>' }}
{%- endif %}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
            {%- for tool_call in message.tool_calls %}
                {{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
                {%- for args_name, args_value in tool_call.arguments|items %}
                    {{- '<parameter=' + args_name + '>\\n' }}
                    {{- args_value }}
                    {{- '\\n</parameter>\\n' }}
                {%- endfor %}
                {{- '</function>\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
"""  # noqa: E501 - lines quoted whole from the published template

_GLM_TOOLS = """\
{%- if tools -%}
<|system|>
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{% for tool in tools %}
{{ tool | tojson(ensure_ascii=False) }}
{% endfor %}
</tools>

For each function call, output the function name and arguments within the following XML format:
<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>...</tool_call>{%- endif -%}
{%- if m.tool_calls -%}
{% for tc in m.tool_calls %}
<tool_call>{{ tc.name }}
{% for k, v in tc.arguments.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>
{% endfor %}
</tool_call>{% endfor %}
{% endif %}
{{ '<think>' + reasoning_content.strip() +  '</think>'}}
{{'/nothink' if (enable_thinking is defined and not enable_thinking and not content.endswith("/nothink")) else ''}}
"""  # noqa: E501 - lines quoted whole from the published template

_GPT_OSS = """\
{%- if tools -%}
    {{- "<|start|>developer<|message|>" }}
    {{- render_tool_namespace("functions", tools) }}
{%- endif -%}
            {{- "<|start|>assistant to=" }}
            {{- "functions." + tool_call.name + "<|channel|>commentary " }}
            {{- (tool_call.content_type if tool_call.content_type is defined else "json") + "<|message|>" }}
            {{- tool_call.arguments|tojson }}
            {{- "<|call|>" }}
{%- if message.tool_calls -%}
            {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}
"""

# DeepSeek-V3-0324 and V3.1: past calls rendered, no tool list (the word is absent).
_DEEPSEEK_V3 = """\
  {%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] is not none -%}
    {%- for tool in message['tool_calls'] -%}
      {%- if not ns.is_first -%}
        {{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}
      {%- endif -%}
    {%- endfor -%}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}
  {%- endif -%}
  {%- if message['role'] == 'tool' -%}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}
  {%- endif -%}
"""  # noqa: E501 - lines quoted whole from the published template

_DEEPSEEK_V31 = """\
  {%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] is not none -%}
    {%- if ns.is_last_user -%}{{'<｜Assistant｜></think>'}}
    {%- endif -%}
    {%- for tool in message['tool_calls'] -%}
      {%- if not ns.is_first -%}
        {%- if message['content'] is none -%}{{'<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] + '<｜tool▁call▁end｜>'}}
        {%- endif -%}
      {%- endif -%}
    {%- endfor -%}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}
  {%- endif -%}
  {%- if message['role'] == 'tool' -%}{{'<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}
  {%- endif -%}
{%- if add_generation_prompt and ns.is_last_user and not ns.is_tool -%}{{'<｜Assistant｜>'}}
  {%- if not thinking -%}{{'</think>'}}
    {%- else -%}{{'<think>'}}
  {%- endif -%}
{%- endif %}
"""  # noqa: E501 - lines quoted whole from the published template


def _dsml(block: str, space: str) -> str:
    return f"""\
{{%- set dsml_token = "｜DSML｜" -%}}
{{%- set thinking_start_token = "<think>" -%}}
{{%- if tools -%}}
You can invoke functions by writing a "<{{{{ dsml_token }}}}{space}{block}>" block like the following as part of your reply to the user:
<{{{{ dsml_token }}}}{space}{block}>
<{{{{ dsml_token }}}}{space}invoke name="$FUNCTION_NAME">
<{{{{ dsml_token }}}}{space}parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</{{{{ dsml_token }}}}{space}parameter>
</{{{{ dsml_token }}}}{space}invoke>
</{{{{ dsml_token }}}}{space}{block}>
{{%- endif -%}}
    {{%- if message.get('tool_calls') -%}}
{{{{ "\\n\\n" }}}}<{{{{ dsml_token }}}}{space}{block}>
{{%- for tool_call in message.tool_calls -%}}
{{{{ "\\n" }}}}<{{{{ dsml_token }}}}{space}invoke name="{{{{ tool_call.function.name }}}}">
{{%- endfor -%}}
{{{{ "\\n" }}}}</{{{{ dsml_token }}}}{space}{block}>
    {{%- endif -%}}
"""  # noqa: E501 - lines quoted whole from the published template


_KIMI_K2 = """\
{%- if tools -%}
  <|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>
{%- endif -%}
    {%- if message['role'] == 'assistant' and message.get('tool_calls') -%}
      {{render_content(message)}}<|tool_calls_section_begin|>
      {%- for tool_call in message['tool_calls'] -%}
        {%- set formatted_id = tool_call['id'] -%}
        <|tool_call_begin|>{{ formatted_id }}<|tool_call_argument_begin|>{{ tool_call['function']['arguments'] | tojson }}<|tool_call_end|>
      {%- endfor -%}
      <|tool_calls_section_end|>
"""  # noqa: E501 - lines quoted whole from the published template

_KIMI_K2_THINKING = (
    _KIMI_K2
    + """\
      {%- if message.get('reasoning_content') -%}<think>{{ message['reasoning_content'] }}</think>{%- else -%}<think></think>{%- endif -%}
<|im_assistant|>assistant<|im_middle|>{%- if thinking is defined and thinking is false -%}<think></think>{%- else -%}<think>{%- endif -%}
"""  # noqa: E501 - lines quoted whole from the published template
)

_KIMI_K3 = """\
{%- macro open_tag(tag, attrs=[]) -%}
{{- '<|open|>' + tag -}}
{{- '<|sep|>' -}}
{%- endmacro -%}
{%- macro render_assistant(message, state) -%}
{%- if thinking -%}
    {{- open_tag('think') -}}
    {{- close_tag('think') -}}
{%- endif -%}
{{- open_tag('response') -}}
{%- set tool_calls = message.get('tool_calls') -%}
{%- if tool_calls -%}
    {{- open_tag('tools') -}}
    {%- for tool_call in tool_calls -%}
        {{- open_tag('call', [('tool', fn.name), ('index', loop.index)]) -}}
                {{- open_tag('argument', [('key', key), ('type', xtml_type(value))]) -}}
    {%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if tools is defined and tools -%}
    {{- render_tool_declare(tools) -}}
{%- endif -%}
{%- if add_generation_prompt -%}
    {{- open_tag('message', [('role', 'assistant')]) -}}
    {{- open_tag('think' if thinking else 'response') -}}
{%- endif -%}
"""

_LLAMA33 = """\
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
    {{- 'Given the following functions, please respond with a JSON for a function call ' }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
    {%- endfor %}
    {%- elif 'tool_calls' in message %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|python_tag|>' + tool_call.name + '.call(' }}
        {%- else  %}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
"""  # noqa: E501 - lines quoted whole from the published template

_LLAMA4 = """\
{%- if tools is not none %}
    {{- 'Given the following functions, please respond with a JSON for a function call ' }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
    {%- endfor %}
{%- endif %}
    {%- elif 'tool_calls' in message and message.tool_calls|length > 0 %}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
"""  # noqa: E501 - lines quoted whole from the published template

_MISTRAL_V3 = """\
{%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {{- ', "id": "' + tool_call.id + '"}' }}
        {%- endfor %}
"""

_MISTRAL_V11 = """\
    {%- if tools is defined and tools is not none %}
        {{- '[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}
    {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {%- if message['tool_calls'] is defined and message['tool_calls'] is not none %}
            {%- for tool in message['tool_calls'] %}
                {%- set arguments = tool['function']['arguments'] %}
                {%- if arguments is not string %}
                    {%- set arguments = arguments|tojson|safe %}
                {%- endif %}
                {{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}
            {%- endfor %}
        {%- endif %}
"""

_MAGISTRAL_2506 = (
    _MISTRAL_V11
    + """\
{%- set default_system_message = "A user will ask you to solve a task. You should first draft your thinking process (inner monologue) until you have derived the final answer. Afterwards, write a self-contained summary of your thoughts.\\n\\nYour thinking process must follow the template below:\\n<think>\\nYour thoughts or/and draft, like working through an exercise on scratch paper.\\n</think>\\n\\nHere, provide a concise summary." %}
"""  # noqa: E501 - lines quoted whole from the published template
)

_MISTRAL_THINK = (
    _MISTRAL_V11
    + """\
                {%- if block['type'] == 'thinking' %}
                    {{- '[THINK]' + block['thinking'] + '[/THINK]' }}
                {%- endif %}
"""
)

_GEMMA4 = """\
{%- if tools -%}
    {%- for tool in tools -%}
        {{- '<|tool>' + format_function_declaration(tool) + '<tool|>' -}}
    {%- endfor -%}
{%- endif -%}
            {%- for tool_call in message['tool_calls'] -%}
                {{- '<|tool_call>call:' + function['name'] + '{' -}}
                {{- '}<tool_call|>' -}}
            {%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|turn>model\\n' -}}
    {%- if not enable_thinking | default(false) -%}
        {{- '<|channel>thought\\n<channel|>' -}}
    {%- endif -%}
{%- endif -%}
"""

TEMPLATES: dict[str, str] = {
    "Qwen/Qwen3-0.6B": _QWEN3_TOOLS + _QWEN3_THINK,
    "Qwen/Qwen3-4B-Instruct-2507": _QWEN3_TOOLS,
    "Qwen/Qwen3-4B-Thinking-2507": _QWEN3_TOOLS + _QWEN3_THINK,
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": _QWEN_XML_TOOLS,
    "Qwen/Qwen3-Coder-Next": _QWEN_XML_TOOLS,
    "Qwen/Qwen3.5-9B": _QWEN_XML_TOOLS + _QWEN3_THINK,
    "Qwen/Qwen3.8-27B": _QWEN_XML_TOOLS + _QWEN3_THINK,
    "zai-org/GLM-4.5": _GLM_TOOLS,
    "zai-org/GLM-4.7": _GLM_TOOLS,
    "zai-org/GLM-5.3": _GLM_TOOLS,
    "openai/gpt-oss-20b": _GPT_OSS,
    "deepseek-ai/DeepSeek-V3-0324": _DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-V3.1": _DEEPSEEK_V31,
    "deepseek-ai/DeepSeek-V3.2": _dsml("function_calls", ""),
    "deepseek-ai/DeepSeek-V4-Flash": _dsml("tool_calls", ""),
    "deepseek-ai/DeepSeek-V4.1-Flash": _dsml("calls", " "),
    "moonshotai/Kimi-K2-Instruct-0905": _KIMI_K2,
    "moonshotai/Kimi-K2.6": _KIMI_K2_THINKING,
    "moonshotai/Kimi-K3": _KIMI_K3,
    "meta-llama/Llama-3.3-70B-Instruct": _LLAMA33,
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": _LLAMA4,
    "mistralai/Mistral-7B-Instruct-v0.3": _MISTRAL_V3,
    "mistralai/Devstral-Small-2507": _MISTRAL_V11,
    "mistralai/Magistral-Small-2506": _MAGISTRAL_2506,
    "mistralai/Magistral-Small-2509": _MISTRAL_THINK,
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": _MISTRAL_V11,
    "mistralai/Ministral-3-14B-Instruct-2512": _MISTRAL_V11,
    "mistralai/Ministral-3-14B-Reasoning-2512": _MISTRAL_THINK,
    "google/gemma-4-31B-it": _GEMMA4,
}
