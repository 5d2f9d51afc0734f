"""Helpers of the tests that serve the test kit's tiny models (issue 43's
placement, LoRA and draft-model tests): a model entry and a greedy answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic

from missive.testing import ServerProcess

TEMPLATE = "{% for m in messages %}{{ m.content }}\n{% endfor %}"


def entry(path: Path, **settings: Any) -> dict[str, Any]:
    """A ``[models]`` entry of the GGUF at ``path``: one slot, no weight
    repacking (no start-up trial), no speculation unless ``settings`` say."""
    base = {"model_path": str(path), "parallel": 1, "extra_buffer_types": "off", "speculative": "off"}
    return {"driver": "llamacpp", "context_window": 512, "settings": {**base, **settings}}


def greedy(server: ServerProcess, model: str, text: str = "Weather in Lyon?", max_tokens: int = 8) -> str:
    """``model``'s greedy answer to ``text`` through the SDK."""
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    msg = client.messages.create(
        model=model,
        max_tokens=max_tokens,
        extra_body={"temperature": 0.0},
        messages=[{"role": "user", "content": text}],
    )
    return "".join(b.text for b in msg.content if b.type == "text")


def lora_files(folder: Path) -> dict[str, Path]:
    """A tiny Llama (``base``), a LoRA adapter for it (``adapter``) and one
    written for a tiny Qwen3 (``foreign``: llama.cpp refuses it on ``base``)."""
    from missive_llamacpp.testing_gguf import write_tiny_gguf, write_tiny_lora

    base = write_tiny_gguf(
        folder / "llama.gguf", arch="llama", chat_template=TEMPLATE, special_tokens=["<|end|>"]
    )
    other = write_tiny_gguf(
        folder / "qwen3.gguf", arch="qwen3", chat_template=TEMPLATE, special_tokens=["<|end|>"]
    )
    return {
        "base": base,
        "adapter": write_tiny_lora(folder / "style.gguf", base),
        "foreign": write_tiny_lora(folder / "qwen3-style.gguf", other),
    }
