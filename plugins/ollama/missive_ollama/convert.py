"""Messages API request → Ollama ``POST /api/chat`` body.

Ollama's shapes (``api/types.go``): ``Message{role, content, thinking, images
[]base64, tool_calls [{id, function{index, name, arguments object}}],
tool_name, tool_call_id}``; ``Tool{type: "function", function{name,
description, parameters}}``; ``think`` a bool or ``"low"|"medium"|"high"``;
``options`` a map (``num_ctx``, ``num_predict``, ``temperature``, ``top_p``,
``top_k``, ``repeat_penalty``...).

Rules:

* the system prompt is one leading ``system`` message (the core has folded
  every system part into it);
* a user turn's ``tool_result`` blocks become ``role: "tool"`` messages, in
  order, before the turn's own text and images; each names its tool
  (``tool_name``, looked up from the ``tool_use`` it answers) and carries the
  call id (``tool_call_id``); ``is_error: true`` prefixes the text with
  ``"Error: "`` so the model sees the failure;
* an assistant turn's ``tool_use`` blocks become ``tool_calls`` with the
  ``input`` object as ``arguments`` (key order kept);
* server-tool blocks (``server_tool_use``, ``web_search_tool_result``...)
  reach here already as a ``tool_use`` and a ``tool_result`` of the next
  user turn (:func:`missive.tools.server.split_server_blocks`), so they
  render like any call and result;
* images (checked, fitted to the model and converted to PNG or JPEG by the
  core: :class:`~missive.media.types.ImageInput`) become the message's
  ``images`` (base64); documents arrive as text;
* the prefill is a final ``assistant`` message, which Ollama continues;
* ``stop`` is never sent: the core matches stop sequences itself.
"""

from __future__ import annotations

from typing import Any

from missive.api import (
    Conversation,
    GenerationRequest,
    ImageInput,
    SearchResultBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

from .settings import OllamaSettings

__all__ = ["chat_messages", "chat_tools", "think_value", "options", "thinking_requested"]


def _image(image: ImageInput) -> str:
    return image.base64()


def _tool_result(block: ToolResultBlock, names: dict[str, str]) -> dict[str, Any]:
    texts: list[str] = []
    images: list[str] = []
    if isinstance(block.content, str):
        texts.append(block.content)
    elif block.content:
        for part in block.content:
            if isinstance(part, TextBlock):
                texts.append(part.text)
            elif isinstance(part, SearchResultBlock):
                body = "\n".join(t.text for t in part.content)
                texts.append(f"[{part.title}]({part.source})\n{body}")
            elif isinstance(part, ImageInput):
                images.append(_image(part))
    text = "\n".join(texts)
    if block.is_error:
        text = f"Error: {text}" if text else "Error"
    message: dict[str, Any] = {"role": "tool", "content": text, "tool_call_id": block.tool_use_id}
    name = names.get(block.tool_use_id)
    if name is not None:
        message["tool_name"] = name
    if images:
        message["images"] = images
    return message


def chat_messages(conv: Conversation) -> list[dict[str, Any]]:
    """The ``messages`` list of ``/api/chat`` for ``conv`` (rules in the module doc)."""
    names = {b.id: b.name for t in conv.turns for b in t.blocks if isinstance(b, ToolUseBlock)}
    messages: list[dict[str, Any]] = []
    if conv.system:
        messages.append({"role": "system", "content": conv.system})
    for turn in conv.turns:
        images = [_image(b) for b in turn.blocks if isinstance(b, ImageInput)]
        if turn.role == "user":
            messages.extend(_tool_result(b, names) for b in turn.blocks if isinstance(b, ToolResultBlock))
            text = turn.text()
            if text or images or not any(isinstance(b, ToolResultBlock) for b in turn.blocks):
                message: dict[str, Any] = {"role": "user", "content": text}
                if images:
                    message["images"] = images
                messages.append(message)
        else:
            message = {"role": "assistant", "content": turn.text()}
            if turn.thinking():
                # Replayed thinking whose signature verified (Ollama's Message.thinking).
                message["thinking"] = turn.thinking()
            calls = [
                {"id": b.id, "function": {"index": i, "name": b.name, "arguments": b.input}}
                for i, b in enumerate(b for b in turn.blocks if isinstance(b, ToolUseBlock))
            ]
            if calls:
                message["tool_calls"] = calls
            if images:
                message["images"] = images
            messages.append(message)
    if conv.prefill:
        messages.append({"role": "assistant", "content": conv.prefill})
    return messages


def chat_tools(request: GenerationRequest) -> list[dict[str, Any]] | None:
    """``tools`` for ``/api/chat``, or None when none are to be sent.

    The tools are the core's offered tools (:mod:`missive.tools.definitions`):
    custom tools as sent, Anthropic-defined client tools and the server
    tools ``web_search``/``web_fetch`` with their synthesized schemas (the
    core answers server tool calls: :mod:`missive.tools.server`). ``tool_choice: none`` sends no
    tools at all, so the model cannot call one (Ollama itself ignores
    tool_choice, contract section 8).
    """
    if not request.tools or request.tool_choice.mode == "none":
        return None
    tools = []
    for tool in request.tools:
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        function["parameters"] = tool.input_schema
        tools.append({"type": "function", "function": function})
    return tools


def thinking_requested(request: GenerationRequest) -> bool:
    """``thinking.type`` is ``enabled`` or ``adaptive`` (absent or ``disabled``: no)."""
    return request.thinking.requested


def think_value(request: GenerationRequest, *, model_thinks: bool, settings: OllamaSettings) -> bool | str:
    """Ollama's ``think`` for ``request``: always sent, never left out.

    Ollama turns thinking on when ``think`` is absent for a thinking model
    (``ChatHandler``: ``if req.Think == nil { req.Think = true }``), so
    thinking absent or disabled sends ``false``. A model without the
    ``thinking`` capability always gets ``false`` (``true`` is a 400 there).
    """
    if not (model_thinks and thinking_requested(request)):
        return False
    level = settings.think_level
    if level is None:
        return True
    if level == "effort":
        # The thinking plan's level: output_config.effort ("max" and "xhigh"
        # are "high"), else from budget_tokens, else "medium".
        return request.thinking.effort
    return level


def options(
    request: GenerationRequest, settings: OllamaSettings, *, num_ctx: int | None, num_predict: int
) -> dict[str, Any]:
    """``options``: ``num_ctx`` (always, when known: Ollama's default context is
    small and silently shared), ``num_predict`` and sampling.

    ``num_predict`` must be ≥ 1: Ollama reads 0 and negatives as "no limit".
    """
    opts: dict[str, Any] = {}
    if num_ctx is not None:
        opts["num_ctx"] = num_ctx
    opts["num_predict"] = num_predict
    api = settings.sampling_defaults == "api"
    for name, default in (("temperature", 1.0), ("top_p", 1.0), ("top_k", 0)):
        value = getattr(request, name)
        if value is not None:
            opts[name] = value
        elif api:
            opts[name] = default
    if api:
        opts["repeat_penalty"] = 1.0  # the Messages API has no repetition penalty
    return opts
