"""Conversations with tools as chat-template messages.

Two renderings, for drivers that render prompts themselves (llama.cpp, MLX):

* **native**, for chat templates that take ``tools`` (Qwen, Llama 3.1+,
  Mistral, Hermes fine-tunes...): OpenAI/Hugging Face messages, assistant
  ``tool_calls`` (arguments as objects, key order kept) and ``role: "tool"``
  results, plus ``tools=[{"type": "function", ...}]`` for the template;
* **hermes**, for templates without tool support (SmolLM2): the tools and the
  ``<tool_call>`` convention go into the system prompt (Qwen2.5's wording),
  calls are written back into assistant text, and results into the user turn
  as ``<tool_response>`` blocks. Its replies parse with the ``hermes`` parser.

A ``tool_result`` with ``is_error: true`` is rendered with an ``Error:``
prefix, so the model sees the call failed. Server-tool blocks
(``server_tool_use`` and its ``web_search_tool_result``...) arrive here as a
``tool_use`` and a ``tool_result`` (:func:`missive.tools.server.split_server_blocks`)
and render like any other call, in both renderings.
"""

from __future__ import annotations

import json
from typing import Any

from ..chat_template.system_turns import template_accepts_system
from ..driver.conversation import Conversation, Turn, segments, with_reasoning
from ..driver.interface import GenerationRequest
from ..driver.media import ImageInput, ImageMarker
from ..driver.tools import ToolDefinition
from ..protocol.schema.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from .parsers.selection import system_prompt_format, template_supports_tools

__all__ = [
    "tool_result_text",
    "native_messages",
    "hermes_messages",
    "template_messages",
    "template_supports_tools",
    "system_prompt_format",
    "HERMES_INSTRUCTIONS",
]

HERMES_INSTRUCTIONS = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""  # noqa: E501 - the prompt text is sent as it is: a line break would be sent too


def tool_result_text(block: ToolResultBlock, image_marker: ImageMarker | None = None) -> str:
    """A tool_result's content as text (text blocks joined), ``Error: `` first
    when ``is_error``; with ``image_marker``, its images as their markers in
    their place (see :meth:`missive.messages.conversation.Turn.text`)."""
    if block.content is None:
        text = ""
    elif isinstance(block.content, str):
        text = block.content
    else:
        parts = []
        for inner in block.content:
            if isinstance(inner, TextBlock):
                parts.append(inner.text)
            elif image_marker is not None and isinstance(inner, ImageInput):
                parts.append(image_marker(inner))
        text = "\n".join(parts)
    return f"Error: {text}" if block.is_error else text


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _user_side(
    turn: Turn, image_marker: ImageMarker | None, results: list[str] | None = None
) -> list[dict[str, Any]]:
    """A user turn holding mid-conversation system messages, after its tool
    results, for a template that accepts system turns there: user and
    system messages in the turn's order (:mod:`missive.chat_template.system_turns`).
    ``results``: texts put first in the first user message (the Hermes
    rendering's ``<tool_response>`` blocks), or in one of their own before
    a leading system message."""
    pending = list(results or [])
    messages: list[dict[str, Any]] = []
    for role, blocks in segments(turn.blocks):
        if role == "system":
            if pending:
                messages.append({"role": "user", "content": "\n".join(pending)})
                pending = []
            messages.append({"role": "system", "content": blocks[0].system})
            continue
        text = Turn("user", blocks).text(image_marker)
        parts = [*pending, text] if text else pending
        pending = []
        if parts:
            messages.append({"role": "user", "content": "\n".join(parts)})
    if pending:
        messages.append({"role": "user", "content": "\n".join(pending)})
    return messages


def native_messages(
    conversation: Conversation, image_marker: ImageMarker | None = None, *, system_turns: bool = False
) -> list[dict[str, Any]]:
    """Messages for a template with tool support (see module doc);
    ``image_marker``: see :meth:`missive.messages.conversation.Turn.text`;
    ``system_turns``: see :meth:`missive.messages.conversation.Conversation.chat_messages`."""
    names: dict[str, str] = {}
    messages: list[dict[str, Any]] = []
    if conversation.system is not None:
        messages.append({"role": "system", "content": conversation.system})
    for turn in conversation.turns:
        if turn.role == "assistant":
            message: dict[str, Any] = with_reasoning(
                {"role": "assistant", "content": turn.text(image_marker)}, turn
            )
            calls = [b for b in turn.blocks if isinstance(b, ToolUseBlock)]
            if calls:
                names.update({c.id: c.name for c in calls})
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.input}}
                    for c in calls
                ]
            messages.append(message)
            continue
        for block in turn.blocks:
            if isinstance(block, ToolResultBlock):
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.tool_use_id,
                        "name": names.get(block.tool_use_id, ""),
                        "content": tool_result_text(block, image_marker),
                    }
                )
        # The turn's text is rendered once: each image marker records its
        # image (ImageMarks.mark), so a second rendering would count it twice.
        if system_turns and turn.has_system_notes():
            messages += _user_side(turn, image_marker)
        elif (text := turn.text(image_marker)) or not any(
            isinstance(b, ToolResultBlock) for b in turn.blocks
        ):
            messages.append({"role": "user", "content": text})
    return messages


def hermes_messages(
    conversation: Conversation,
    tools: tuple[ToolDefinition, ...],
    image_marker: ImageMarker | None = None,
    *,
    system_turns: bool = False,
) -> list[dict[str, Any]]:
    """Messages for a template without tool support (see module doc);
    ``image_marker``: see :meth:`missive.messages.conversation.Turn.text`;
    ``system_turns``: see :meth:`missive.messages.conversation.Conversation.chat_messages`."""
    instructions = HERMES_INSTRUCTIONS.format(tools="\n".join(_dumps(t.openai_function()) for t in tools))
    system = f"{conversation.system}\n\n{instructions}" if conversation.system else instructions
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in conversation.turns:
        parts: list[str] = []
        if turn.role == "assistant":
            if text := turn.text(image_marker):
                parts.append(text)
            for block in turn.blocks:
                if isinstance(block, ToolUseBlock):
                    call = _dumps({"name": block.name, "arguments": block.input})
                    parts.append(f"<tool_call>\n{call}\n</tool_call>")
        else:
            for block in turn.blocks:
                if isinstance(block, ToolResultBlock):
                    parts.append(
                        f"<tool_response>\n{tool_result_text(block, image_marker)}\n</tool_response>"
                    )
            if system_turns and turn.has_system_notes():
                messages += _user_side(turn, image_marker, parts)
                continue
            # Rendered once (see native_messages).
            if text := turn.text(image_marker):
                parts.append(text)
        messages.append(with_reasoning({"role": turn.role, "content": "\n".join(parts)}, turn))
    return messages


def template_messages(
    request: GenerationRequest, template: str, image_marker: ImageMarker | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Messages and extra template variables for a driver that renders ``template``.

    Tools are offered unless ``tool_choice`` is ``none`` (then the model is not
    told about them, so it cannot call them; past calls and results are still
    rendered). A template with tool support gets them natively (``tools=``);
    one that renders past calls in a known format but takes no tool list
    (:func:`system_prompt_format`) gets its history natively and the tools
    declared in the system prompt in that format's words; any other the
    Hermes convention. ``image_marker``: images rendered as the
    text it returns, in their place (see :meth:`missive.messages.conversation.Turn.text`).
    """
    conversation = request.conversation
    # Deferred and added tools are not in the list (their definitions stand
    # where a tool_reference or tool_addition put them: missive.tools.deferred,
    # missive.tools.changes), and a removed one stays, so the top of the
    # prompt does not change when one is loaded, added or removed.
    offered = request.prompt_tools() if request.tool_choice.mode != "none" else ()
    system_turns = any(t.has_system_notes() for t in conversation.turns) and template_accepts_system(template)
    if not offered and not conversation.has_tool_blocks():
        return conversation.chat_messages(image_marker, system_turns=system_turns), {}
    if template_supports_tools(template):
        extra = {"tools": [t.openai_function() for t in offered]} if offered else {}
        return native_messages(conversation, image_marker, system_turns=system_turns), extra
    if (fmt := system_prompt_format(template)) is not None:
        messages = native_messages(conversation, image_marker, system_turns=system_turns)
        if offered:
            declared = fmt.tool_instructions([t.openai_function()["function"] for t in offered]) or ""
            if messages and messages[0]["role"] == "system":
                messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{declared}"}
            else:
                messages.insert(0, {"role": "system", "content": declared})
        return messages, {}
    return hermes_messages(conversation, offered, image_marker, system_turns=system_turns), {}
