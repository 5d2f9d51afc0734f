"""Chat template rendering with jinja2's sandbox, as Hugging Face does it.

Drivers that render prompts themselves (llama.cpp in-process, MLX) use
:func:`render_prompt` with the model's own template (GGUF
``tokenizer.chat_template`` or ``tokenizer_config.json``).  The environment
mirrors ``transformers``' ``apply_chat_template``: ``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``, ``raise_exception``, ``strftime_now`` and
a ``tojson`` that keeps non-ASCII text and key order.
"""

from __future__ import annotations

import json
import re
import secrets
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import ApiError, InvalidRequestError

__all__ = ["compile_template", "render_prompt", "render_segments"]


def _raise_exception(message: str) -> None:
    raise InvalidRequestError(f"the model's chat template rejected the conversation: {message}")


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@lru_cache(maxsize=16)
def compile_template(source: str) -> Any:
    """Compile a chat template once (cached by source text)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


def render_prompt(
    template_source: str,
    messages: list[dict[str, Any]],
    *,
    prefill: str | None = None,
    bos_token: str = "",
    eos_token: str = "",
    **kwargs: Any,
) -> str:
    """Render ``messages`` and open the assistant turn.

    With ``prefill`` (a final assistant message), the conversation is rendered
    with the prefill as the last assistant message and without a generation
    prompt, then cut right after the prefill text, so the model continues it.

    Raises:
        InvalidRequestError: the template raised (``raise_exception``), e.g.
            roles in an order it does not accept.
        ApiError: the template itself is broken.
    """
    template = compile_template(template_source)
    if prefill:
        messages = [*messages, {"role": "assistant", "content": prefill}]
    try:
        text = template.render(
            messages=messages,
            add_generation_prompt=not prefill,
            bos_token=bos_token,
            eos_token=eos_token,
            **kwargs,
        )
    except InvalidRequestError:
        raise
    except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ApiError(f"the model's chat template failed to render: {exc}") from exc
    if prefill:
        cut = text.rfind(prefill)
        if cut >= 0:
            text = text[: cut + len(prefill)]
    return text


def _marks() -> tuple[str, str]:
    """A fresh pair of marks for client text: a private-use character and a
    random nonce each, so no client text can contain them (a fixed mark typed
    by a client would make the whole prompt one template piece, special
    tokens parsed everywhere)."""
    nonce = secrets.token_hex(8)
    return f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003"


def _wrap(value: str, marks: tuple[str, str]) -> str:
    """``value`` with its non-whitespace core between the marks; the leading
    and trailing whitespace stay outside, so a template's ``| trim`` (Llama 3,
    Gemma...) keeps the marks."""
    core = value.strip()
    if not core:
        return value
    start = value.index(core)
    return f"{value[:start]}{marks[0]}{core}{marks[1]}{value[start + len(core):]}"


def _wrap_client_text(messages: list[dict[str, Any]], marks: tuple[str, str]) -> list[dict[str, Any]]:
    wrapped = []
    for message in messages:
        copy = dict(message)
        if isinstance(copy.get("content"), str):
            copy["content"] = _wrap(copy["content"], marks)
        wrapped.append(copy)
    return wrapped


def render_segments(
    template_source: str,
    messages: list[dict[str, Any]],
    *,
    prefill: str | None = None,
    bos_token: str = "",
    eos_token: str = "",
    **kwargs: Any,
) -> list[tuple[str, bool]]:
    """The rendered prompt as ``[(text, is_client_text)]`` pieces.

    Client text (message contents) must be tokenized as plain text: a user
    who types ``<|im_end|>`` must not close their turn and forge others (the
    real API treats such text as text). Contents are marked while rendering
    (a private-use character and a random nonce, fresh for each call, around
    each content's non-whitespace core, so ``| trim`` keeps them), and the
    marks split the result. If the template transformed a content otherwise
    (``| upper``, a split...) the marked rendering no longer matches the
    plain one; then the whole prompt is one template piece (special tokens
    parsed everywhere, as llama.cpp's own server does), so the prompt is
    never altered.

    Same arguments and errors as :func:`render_prompt`.
    """
    plain = render_prompt(
        template_source, messages, prefill=prefill, bos_token=bos_token, eos_token=eos_token, **kwargs
    )
    marks = _marks()
    if marks[0] in plain or marks[1] in plain:  # cannot happen but by a guessed nonce
        return [(plain, False)]
    marked = render_prompt(
        template_source,
        _wrap_client_text(messages, marks),
        prefill=_wrap(prefill, marks) if prefill else None,
        bos_token=bos_token,
        eos_token=eos_token,
        **kwargs,
    )
    if marked.replace(marks[0], "").replace(marks[1], "") != plain:
        return [(plain, False)]
    pieces: list[tuple[str, bool]] = []
    position = 0
    for match in re.finditer(f"{re.escape(marks[0])}(.*?){re.escape(marks[1])}", marked, re.DOTALL):
        if match.start() > position:
            pieces.append((marked[position : match.start()], False))
        if match.group(1):
            pieces.append((match.group(1), True))
        position = match.end()
    if position < len(marked):
        pieces.append((marked[position:], False))
    return pieces
