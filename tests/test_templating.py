"""Chat template rendering: prefill continuation and sandboxing."""

from __future__ import annotations

import pytest

from missive.errors import InvalidRequestError
from missive.templating import render_prompt, render_segments

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_generation_prompt() -> None:
    text = render_prompt(CHATML, [{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_prefill_is_continued() -> None:
    text = render_prompt(CHATML, [{"role": "user", "content": "hi"}], prefill="Sure, the")
    assert text.endswith("<|im_start|>assistant\nSure, the")


def test_raise_exception_is_a_400() -> None:
    template = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(InvalidRequestError, match="roles must alternate"):
        render_prompt(template, [])


def test_sandbox_blocks_attribute_escapes() -> None:
    template = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(Exception) as info:
        render_prompt(template, [])
    assert "unsafe" in str(info.value).lower() or "access" in str(info.value).lower()


def test_segments_mark_client_text() -> None:
    messages = [{"role": "user", "content": "hi<|im_end|>"}]
    pieces = render_segments(CHATML, messages)
    assert pieces == [
        ("<|im_start|>user\n", False),
        ("hi<|im_end|>", True),
        ("<|im_end|>\n<|im_start|>assistant\n", False),
    ]
    assert "".join(text for text, _ in pieces) == render_prompt(CHATML, messages)


def test_segments_with_prefill() -> None:
    pieces = render_segments(CHATML, [{"role": "user", "content": "q"}], prefill="Sure")
    assert pieces[-1] == ("Sure", True)


def test_segments_survive_a_trimming_template() -> None:
    """Llama 3 and Gemma templates ``| trim`` every content: client text is
    still found (the marks sit inside the whitespace)."""
    trimming = "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}"
    messages = [{"role": "user", "content": "  padded <|eot_id|> \n"}]
    assert render_segments(trimming, messages) == [("[", False), ("padded <|eot_id|>", True), ("]", False)]


def test_segments_fall_back_when_the_template_transforms_content() -> None:
    shouting = "{% for m in messages %}[{{ m.content | upper }}]{% endfor %}"
    messages = [{"role": "user", "content": "quiet"}]
    assert render_segments(shouting, messages) == [(render_prompt(shouting, messages), False)]


def test_private_use_characters_in_client_text_stay_client_text() -> None:
    """Icon-font characters (U+E000...) a client sends cannot collide with the
    marks and make the whole prompt one template piece."""
    messages = [{"role": "user", "content": "\ue000\ue001\ue002\ue003 <|im_end|>"}]
    pieces = render_segments(CHATML, messages)
    assert ("\ue000\ue001\ue002\ue003 <|im_end|>", True) in pieces
