"""A Codex turn (``POST /v1/responses``) renders the prompt of a Claude Code
turn (``POST /v1/messages``) on the same conversation, byte for byte, so the
two share the prompt cache (issue 44; measured by
``benchmarks/bench_shared_cache.py``, which builds its requests here).

The Claude Code turn is the captured first request
(``plugins/llamacpp/tests/claude_code_first_request.json``: system blocks
with ``cache_control``, the tools, a user turn of two text blocks, and the
mid-conversation system message Claude Code sends after it), cut to a few
tools. The Codex turn is the same conversation in Codex's shape (its
requests as ``tests/clients/test_codex.py`` drives them; OpenAI API
reference, "Create a model response"): ``instructions`` (the system text),
the tools as ``function`` tools (``strict: false``), ``input`` items (the
user message's ``input_text`` parts, the later system message as a
``developer`` message), ``tool_choice: "auto"``, ``parallel_tool_calls:
false``, ``store: false``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from missive.chat_template.rendering import render_prompt
from missive.testing import generation_request
from missive.tools.render import template_messages
from missive_openai_api.responses_request import translate

ROOT = Path(__file__).resolve().parents[3]
CAPTURE = ROOT / "plugins" / "llamacpp" / "tests" / "claude_code_first_request.json"
#: The captured tools kept: the full list is ~12k tokens with the rest, past SmolLM2's 8k window.
TOOLS = ("Bash", "Read", "Edit", "Write")
BILLING = "x-anthropic-billing-header:"
#: SmolLM2's chat template (ChatML with a default system prompt; no tool
#: support, so tools are declared in the Hermes way, as for the default model).
CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def claude_code_turn(
    model: str = "test-model", max_tokens: int = 16, tools: tuple[str, ...] = TOOLS, nonce: str = ""
) -> dict[str, Any]:
    """The captured Claude Code request with only ``tools``, streamed;
    ``nonce`` starts the system prompt (a prefix no cache holds yet)."""
    captured = json.loads(CAPTURE.read_text())["body"]
    system = [dict(block) for block in captured["system"]]  # the billing header kept: the core drops it
    if nonce:
        first = next(i for i, b in enumerate(system) if not b["text"].startswith(BILLING))
        system[first]["text"] = f"{nonce}\n{system[first]['text']}"
    return {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "system": system,
        "tools": [t for t in captured["tools"] if t["name"] in tools],
        "messages": captured["messages"],
    }


def _texts(content: Any) -> list[str]:
    return [content] if isinstance(content, str) else [b["text"] for b in content if b["type"] == "text"]


def as_codex(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` (a Messages request) as Codex would send its conversation to ``/v1/responses``."""
    system = [b["text"] for b in body["system"] if not b["text"].startswith(BILLING)]
    items: list[dict[str, Any]] = []
    for message in body["messages"]:
        texts = _texts(message["content"])
        if message["role"] == "user":
            parts = [{"type": "input_text", "text": t} for t in texts]
            items.append({"type": "message", "role": "user", "content": parts})
        elif message["role"] == "system":
            parts = [{"type": "input_text", "text": "\n".join(texts)}]
            items.append({"type": "message", "role": "developer", "content": parts})
        else:
            parts = [{"type": "output_text", "text": t} for t in texts]
            items.append({"type": "message", "role": "assistant", "content": parts})
    tools = [
        {
            "type": "function",
            "name": t["name"],
            "description": t.get("description", ""),
            "parameters": t["input_schema"],
            "strict": False,
        }
        for t in body["tools"]
    ]
    return {
        "model": body["model"],
        "instructions": "\n".join(system),
        "input": items,
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "store": False,
        "stream": body.get("stream", False),
        "temperature": body.get("temperature"),
        "max_output_tokens": body["max_tokens"],
    }


def rendered(body: dict[str, Any]) -> str:
    """The prompt a Messages ``body`` renders with :data:`CHATML`, as the
    embedded engine renders it (:mod:`missive.engine.prompt`)."""
    fields = {k: v for k, v in body.items() if k not in ("model", "max_tokens", "messages", "stream")}
    request = generation_request(body["messages"], max_tokens=body["max_tokens"], **fields)
    messages, extra = template_messages(request, CHATML)
    return render_prompt(CHATML, messages, **{**request.thinking.template_kwargs(), **extra})


def test_a_codex_turn_renders_the_prompt_of_the_claude_code_turn() -> None:
    claude = claude_code_turn()
    codex = translate(as_codex(claude), lambda _: None)
    assert not codex.ignored, codex.ignored
    prompt = rendered(claude)
    assert rendered(codex.body) == prompt
    # What makes it a test of this conversation: the system text, every tool in
    # its order, the user turn and the later system message are in the prompt.
    system = "\n".join(b["text"] for b in claude["system"][1:])
    assert prompt.startswith(f"<|im_start|>system\n{system}\n\n# Tools")
    names = [t["name"] for t in claude["tools"]]
    assert sorted(names) == sorted(TOOLS)
    places = [prompt.index(f'"name": "{name}"') for name in names]
    assert places == sorted(places)  # in the order sent
    assert claude["messages"][0]["content"][1]["text"] in prompt
    assert claude["messages"][1]["content"][0]["text"][:200] in prompt
    assert BILLING not in prompt


def test_the_nonce_starts_the_prompt_in_both_shapes() -> None:
    claude = claude_code_turn(nonce="Session 7f3a.")
    assert rendered(claude).startswith("<|im_start|>system\nSession 7f3a.\nYou are")
    assert rendered(translate(as_codex(claude), lambda _: None).body) == rendered(claude)
