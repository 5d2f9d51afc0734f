"""A Messages request as an OpenAI chat completions body.

Rules (OpenAI chat completions API reference; vLLM's
``vllm/entrypoints/openai/protocol.py`` for the extra fields):

* the system prompt is the first message, ``role: "system"``;
* an assistant turn's text is ``content``; its ``tool_use`` blocks are
  ``tool_calls: [{id, type: "function", function: {name, arguments}}]`` with
  ``arguments`` the input as a JSON string;
* server-tool blocks (``server_tool_use``, ``web_search_tool_result``...)
  reach here already as a ``tool_use`` and a ``tool_result`` of the next
  user turn (:func:`missive.tools.server.split_server_blocks`), so they
  render like any call and result;
* a user turn's ``tool_result`` blocks become ``role: "tool"`` messages with
  ``tool_call_id``, in order, before the turn's own text (the API puts
  results first); ``is_error: true`` prefixes the content with ``"Error: "``
  so the model sees the failure; images inside a result go to the user
  message that follows (tool messages carry text only);
* text and ``search_result`` blocks are text parts (documents arrive as
  text: the core converted them); images, which the core has checked,
  fitted and fetched (:class:`~missive.media.types.ImageInput`), are
  ``image_url`` parts with a ``data:`` URL, never a URL for the server to fetch;
* custom tools are ``{type: "function", function: {name, description,
  parameters}}``; Anthropic-defined tools (``bash_*``, ``text_editor_*``...)
  have no schema here yet and are refused;
* ``tool_choice``: ``auto`` -> ``"auto"``, ``any`` -> ``"required"``,
  ``tool`` -> ``{"type": "function", "function": {"name": ...}}``, ``none``
  -> ``"none"``; ``disable_parallel_tool_use`` -> ``parallel_tool_calls: false``.
"""

from __future__ import annotations

import json
from typing import Any

from missive.api import (
    Conversation,
    GenerationRequest,
    ImageInput,
    SearchResultBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Turn,
)

__all__ = ["chat_messages", "chat_tools", "chat_tool_choice", "ERROR_PREFIX"]

#: What a failed tool result's content starts with, so the model sees it failed.
ERROR_PREFIX = "Error: "

Part = dict[str, Any]


def _text_part(text: str) -> Part:
    return {"type": "text", "text": text}


def _image_part(image: ImageInput) -> Part:
    return {"type": "image_url", "image_url": {"url": image.data_uri()}}


def _block_part(block: Any) -> Part | None:
    if isinstance(block, TextBlock):
        return _text_part(block.text)
    if isinstance(block, SearchResultBlock):
        body = "\n".join(t.text for t in block.content)
        return _text_part(f"[{block.title}]({block.source})\n{body}")
    if isinstance(block, ImageInput):
        return _image_part(block)
    return None


def _content(parts: list[Part]) -> str | list[Part]:
    """Plain text when every part is text (the form every server accepts), else parts."""
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _tool_result(block: ToolResultBlock) -> tuple[Part, list[Part]]:
    """The ``role: tool`` message of a result, and the media parts it carried."""
    texts: list[str] = []
    media: list[Part] = []
    if isinstance(block.content, str):
        texts.append(block.content)
    elif block.content:
        for inner in block.content:
            part = _block_part(inner)
            if part is None:
                continue
            if part["type"] == "text":
                texts.append(part["text"])
            else:
                media.append(part)
    text = "\n".join(texts)
    if block.is_error:
        text = ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": text}, media


def _user_messages(turn: Turn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    parts: list[Part] = []
    for block in turn.blocks:
        if isinstance(block, ToolResultBlock):
            message, media = _tool_result(block)
            messages.append(message)
            parts.extend(media)
        else:
            part = _block_part(block)
            if part is not None:
                parts.append(part)
    if parts:
        messages.append({"role": "user", "content": _content(parts)})
    elif not messages:
        messages.append({"role": "user", "content": ""})
    return messages


def _assistant_message(turn: Turn) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in turn.blocks:
        if isinstance(block, ToolUseBlock):
            calls.append(
                {
                    "id": block.id,
                    "type": "function",
                    "function": {
                        "name": block.name,
                        "arguments": json.dumps(block.input, ensure_ascii=False),
                    },
                }
            )
        else:
            part = _block_part(block)
            if part is not None and part["type"] == "text":
                texts.append(part["text"])
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "\n".join(texts) if texts or not calls else None,
    }
    if turn.thinking():
        # Replayed thinking whose signature verified, in the field vLLM and
        # llama-server pass to the chat template (templates that keep past
        # reasoning render it; others ignore it).
        message["reasoning_content"] = turn.thinking()
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(conversation: Conversation, *, prefill: bool = True) -> list[dict[str, Any]]:
    """``messages`` of a chat completions request.

    Args:
        conversation: the normalized conversation (:mod:`missive.messages.conversation`).
        prefill: append ``conversation.prefill`` as a final assistant message
            (the caller decides whether the server can continue it).

    Image and document blocks must have been processed by the core (the
    server does it before any driver runs); raw ones are left out.
    """
    messages: list[dict[str, Any]] = []
    if conversation.system is not None:
        messages.append({"role": "system", "content": conversation.system})
    for turn in conversation.turns:
        if turn.role == "user":
            messages.extend(_user_messages(turn))
        else:
            messages.append(_assistant_message(turn))
    if prefill and conversation.prefill is not None:
        messages.append({"role": "assistant", "content": conversation.prefill})
    return messages


def chat_tools(request: GenerationRequest) -> list[dict[str, Any]] | None:
    """The offered tools in the OpenAI function format, or None.

    The tools are the core's (:mod:`missive.tools.definitions`): custom tools
    as sent, Anthropic-defined client tools (bash, text editor) and the
    server tools ``web_search``/``web_fetch`` with their synthesized schemas
    (the core answers their calls: :mod:`missive.tools.server`).
    """
    if not request.tools:
        return None
    return [tool.openai_function() for tool in request.tools]


def chat_tool_choice(request: GenerationRequest) -> dict[str, Any]:
    """``tool_choice`` (and ``parallel_tool_calls``) fields for a request with tools;
    empty without tools (OpenAI servers reject ``tool_choice`` without ``tools``)."""
    if not request.tools:
        return {}
    choice = request.tool_choice
    fields: dict[str, Any]
    if choice.mode == "auto":
        fields = {"tool_choice": "auto"}
    elif choice.mode == "any":
        fields = {"tool_choice": "required"}
    elif choice.mode == "tool":
        fields = {"tool_choice": {"type": "function", "function": {"name": choice.name}}}
    else:
        return {"tool_choice": "none"}
    if not choice.parallel:
        fields["parallel_tool_calls"] = False
    return fields
