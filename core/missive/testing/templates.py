"""Chat templates that make the embedded SmolLM2 behave as other model
families do, for tests (``settings.chat_template``)."""

from __future__ import annotations

__all__ = ['THINKING_CHATML', 'HARMONY_FEWSHOT']


#: A ChatML chat template with a reasoning format, built the way Qwen3's is:
#: ``enable_thinking`` opens ``<think>`` in the prompt, otherwise an empty
#: closed block is rendered; past reasoning is rendered from
#: ``reasoning_content``. It makes any ChatML model (the embedded SmolLM2) a
#: "reasoning model" for tests of thinking (``settings.chat_template``).
THINKING_CHATML = (
    "{% for message in messages %}"
    "{% if message.role == 'assistant' and message.reasoning_content %}"
    "<|im_start|>assistant\n<think>\n{{ message.reasoning_content }}\n</think>\n\n{{ message.content "
    "}}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


#: A harmony (gpt-oss) chat template for tests on a model that knows nothing
#: of harmony (the embedded SmolLM2): a fixed few-shot preamble shows three
#: turns of ``analysis`` reasoning followed by a call to ``get_time`` (its
#: recipient in the role part of the header, one of the two forms harmony
#: allows), so with greedy sampling the model copies the pattern: reasoning,
#: then a call. Messages are rendered as ``<|start|>{role}<|message|>...<|end|>``;
#: an assistant message whose content starts with ``<|channel|>`` is written
#: as is (a prefill in harmony markup), other assistant text as a ``final``
#: message. It renders ``tools`` and ``tool_calls`` itself (no Hermes tool
#: prompt is added) and contains ``<|channel|>``, so the harmony tool and
#: reasoning parsers are chosen for it (``settings.chat_template``).
HARMONY_FEWSHOT = (
    "{% set turn = '<|start|>user<|message|>What time is it?<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>The user wants the time. Call get_time.<|end|>"
    "<|start|>assistant to=functions.get_time<|channel|>commentary <|constrain|>json<|message|>{}<|call|>' %}"
    "{% if tools %}<|start|>developer<|message|>Tools:{% for tool in tools %} {{ tool.function.name }}{% "
    "endfor %}<|end|>"
    "{% endif %}"
    "{{ turn }}{{ turn }}{{ turn }}"
    "{% for message in messages %}{% set content = message.content or '' %}"
    "{% if message.role == 'assistant' and content.startswith('<|channel|>') %}"
    "<|start|>assistant{{ content }}<|end|>"
    "{% elif message.role == 'assistant' %}"
    "{% if content %}<|start|>assistant<|channel|>final<|message|>{{ content }}<|end|>{% endif %}"
    "{% for call in message.tool_calls or [] %}<|start|>assistant to=functions.{{ call.function.name }}"
    "<|channel|>commentary <|constrain|>json<|message|>{{ call.function.arguments }}<|call|>{% endfor %}"
    "{% else %}<|start|>{{ message.role }}<|message|>{{ content }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
