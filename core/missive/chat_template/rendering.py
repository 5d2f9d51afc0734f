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

from ..protocol.errors import ApiError, InvalidRequestError

__all__ = ["compile_template", "render_prompt", "render_segments"]


def _raise_exception(message: str) -> None:
    raise InvalidRequestError(f"the model's chat template rejected the conversation: {message}")


def _tojson(value: Any, indent: int | None = None, **_: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


@lru_cache(maxsize=16)
def compile_template(source: str) -> Any:
    """Compile a chat template once (cached by source text)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
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
    prompt, then cut right after the prefill text, so the model continues it
    (found by a sentinel rendered after it; a template that cuts the
    prefill's end gets the generation prompt followed by the prefill).

    Raises:
        InvalidRequestError: the template raised (``raise_exception``), e.g.
            roles in an order it does not accept.
        ApiError: the template itself is broken.
    """
    template = compile_template(template_source)

    def render(messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        try:
            return str(
                template.render(
                    messages=messages,
                    add_generation_prompt=add_generation_prompt,
                    bos_token=bos_token,
                    eos_token=eos_token,
                    **kwargs,
                )
            )
        except InvalidRequestError:
            raise
        except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ApiError(f"the model's chat template failed to render: {exc}") from exc

    if not prefill:
        return render(messages, True)
    # The prefill is rendered with a sentinel after it and the prompt cut at
    # the sentinel: looking for the prefill's own text would find a prefill
    # such as "<" or ">" inside the template's markup.
    sentinel = f"\ue010{secrets.randbits(64)}\ue011"
    text = render([*messages, {"role": "assistant", "content": prefill + sentinel}], False)
    cut = text.rfind(sentinel)
    if cut >= 0:
        return text[:cut]
    # The template cut or dropped the prefill's end (it truncates assistant
    # text): the assistant turn as the generation prompt opens it, then the
    # prefill, as servers without template support for prefills do.
    return render(messages, True) + prefill


@lru_cache(maxsize=16)
def _control_pattern(control_texts: tuple[str, ...]) -> re.Pattern[str] | None:
    texts = sorted({t for t in control_texts if t}, key=len, reverse=True)  # longest first
    return re.compile("|".join(re.escape(t) for t in texts)) if texts else None


def _escape(value: Any, pattern: re.Pattern[str], found: list[str], tag: str) -> Any:
    """``value`` (strings, and lists and dicts of them, keys included, at any
    depth) with every control-token text replaced by a placeholder naming its
    index in ``found``."""
    if isinstance(value, str):

        def hide(match: re.Match[str]) -> str:
            found.append(match.group(0))
            return f"\ue000{tag}\ue002{len(found) - 1}\ue001"

        return pattern.sub(hide, value)
    if isinstance(value, dict):  # keys too: tool call arguments are client objects
        return {_escape(k, pattern, found, tag): _escape(v, pattern, found, tag) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escape(v, pattern, found, tag) for v in value]
    return value


def render_segments(
    template_source: str,
    messages: list[dict[str, Any]],
    *,
    control_texts: tuple[str, ...] = (),
    prefill: str | None = None,
    bos_token: str = "",
    eos_token: str = "",
    **kwargs: Any,
) -> list[tuple[str, bool]]:
    """The rendered prompt as ``[(text, is_client_text)]`` pieces.

    What a client sends must reach the model as text: a user who types
    ``<|im_end|>`` must not close their turn and forge others (the real API
    treats such text as text). ``control_texts`` are the texts of the
    tokens a tokenizer turns into control tokens only when asked to parse
    special tokens (llama.cpp: tokens with the ``CONTROL`` attribute). Every
    occurrence of one in a client string (message contents, tool
    definitions and calls, reasoning, the prefill: every string of
    ``messages``, ``prefill`` and ``kwargs``, at any depth) is replaced by a
    placeholder before rendering, and comes back as a piece of its own
    marked ``True``: the driver tokenizes it as plain text, the rest (marked
    ``False``) with special tokens parsed. The template sees the
    placeholders, never the control texts, so what templates do with client
    strings (``| trim``, ``startswith``, ``split``, slicing, ``tojson``)
    cannot turn them into markup. Not covered: a template that rebuilds
    client text character by character (``replace()`` of a substring,
    ``| lower``, ``| reverse``, ``| striptags``, two client strings
    concatenated) could assemble a control text out of harmless pieces; no
    common chat template does. A placeholder the template cut apart stays
    as the private-use text it is (the text it stood for is then lost: only
    a template that slices client strings mid-way could do that).

    Same errors as :func:`render_prompt`.
    """
    pattern = _control_pattern(tuple(control_texts))
    if pattern is None:
        return [
            (
                render_prompt(
                    template_source,
                    messages,
                    prefill=prefill,
                    bos_token=bos_token,
                    eos_token=eos_token,
                    **kwargs,
                ),
                False,
            )
        ]
    found: list[str] = []
    tag = str(secrets.randbits(64))  # digits and private-use marks: nothing | upper or | trim changes
    text = render_prompt(
        template_source,
        _escape(messages, pattern, found, tag),
        prefill=_escape(prefill, pattern, found, tag),
        bos_token=bos_token,
        eos_token=eos_token,
        **_escape(kwargs, pattern, found, tag),
    )
    pieces: list[tuple[str, bool]] = []
    position = 0
    for match in re.finditer(f"\ue000{tag}\ue002(\\d+)\ue001", text):
        index = int(match.group(1))
        if index >= len(found):
            continue
        if match.start() > position:
            pieces.append((text[position : match.start()], False))
        pieces.append((found[index], True))
        position = match.end()
    if position < len(text) or not pieces:
        pieces.append((text[position:], False))
    return pieces
