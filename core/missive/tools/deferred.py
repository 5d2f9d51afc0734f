"""Deferred tools (``defer_loading: true``) and the ``tool_reference`` blocks that load them.

The API's rules (Anthropic docs, "Tool search tool" and "Tool use with prompt
caching"; the SDK's ``BetaToolReferenceBlockParam``):

* a tool with ``defer_loading: true`` is not put into the model's context:
  the model neither sees nor can call it;
* a ``tool_reference`` block (``{"type": "tool_reference", "tool_name":
  "..."}``) in a ``tool_result``'s content, returned by a tool search (Claude
  Code's ``ToolSearch``, or any client tool), loads the tool it names: "the
  definition is appended inline as a tool_reference block in the
  conversation history. The prefix is untouched, so prompt caching is
  preserved." From then on the tool is offered like any other;
* a reference to a tool the request does not define is refused (400);
* the server-side tool search (:mod:`missive.tools.tool_search`) answers
  with the same ``tool_reference`` blocks inside a
  ``tool_search_tool_result`` of the assistant message: they load the tools
  the same way, in the message that searched and when a client sends the
  block back.

Missive does the same. :func:`loaded_names` finds the tools the history has
loaded; :func:`missive.tools.definitions.offered_tools` offers the
non-deferred tools and those, marking the latter
:attr:`~missive.tools.definitions.ToolDefinition.deferred`. Renderers that
build the tool list of the prompt themselves (the chat template of an
in-process model, :mod:`missive.tools.render`) leave deferred tools out of
it, so the top of the prompt is the same on every turn whatever was loaded;
:func:`expand_references` puts each loaded tool's definition where its
``tool_reference`` stands instead, as text the model reads in the tool's
result (:func:`reference_text`, the JSON function form every tool list of
the Hermes convention uses). Remote backends render their own tool list
from the ``tools`` they are sent: a loaded tool joins it there, so the
model can call it through the backend's parser and grammar.

``count_tokens`` renders the same prompt, so it counts the same tokens.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..protocol.errors import InvalidRequestError
from ..protocol.schema.blocks import (
    TextBlock,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolSearchToolResultBlock,
    ToolSearchToolSearchResult,
)
from ..protocol.schema.request import CountTokensRequest

if TYPE_CHECKING:
    from ..driver.conversation import Conversation
    from ..driver.tools import ToolDefinition

__all__ = ["loaded_names", "is_deferred", "reference_text", "expand_references"]


def is_deferred(tool: Any) -> bool:
    """Whether a request tool is declared ``defer_loading: true``."""
    return getattr(tool, "defer_loading", None) is True


def _references(message_role: str, block: Any) -> list[tuple[str, ToolReferenceBlock]]:
    """``(path under the block, reference)`` of the ``tool_reference`` blocks
    that ``block`` holds where they load a tool: inside a ``tool_result`` of a
    user message, inside a ``tool_search_tool_result`` of an assistant one."""
    if message_role == "user" and isinstance(block, ToolResultBlock) and isinstance(block.content, list):
        return [(f"content.{k}", c) for k, c in enumerate(block.content) if isinstance(c, ToolReferenceBlock)]
    if (
        message_role == "assistant"
        and isinstance(block, ToolSearchToolResultBlock)
        and isinstance(block.content, ToolSearchToolSearchResult)
    ):
        return [(f"content.tool_references.{k}", c) for k, c in enumerate(block.content.tool_references)]
    return []


def loaded_names(request: CountTokensRequest) -> set[str]:
    """Names of the tools the history's ``tool_reference`` blocks load.

    Raises:
        InvalidRequestError: a reference names a tool the request does not
            define, with the block's path.
    """
    defined = {tool.name for tool in request.tools or []}
    names: set[str] = set()
    for i, message in enumerate(request.messages):
        for j, block in enumerate(message.blocks()):
            for where, inner in _references(message.role, block):
                if inner.tool_name not in defined:
                    raise InvalidRequestError(
                        f"messages.{i}.content.{j}.{where}: tool_reference names the tool "
                        f"'{inner.tool_name}', which is not defined in `tools`"
                    )
                names.add(inner.tool_name)
    return names


def reference_text(tool: ToolDefinition) -> str:
    """What the model reads where a ``tool_reference`` loads ``tool``: its
    definition in the JSON function form of a Hermes tool list, inside the
    same ``<tools></tools>`` tags (key order kept, so the text is the same on
    every turn)."""
    return f"<tools>\n{json.dumps(tool.openai_function(), ensure_ascii=False)}\n</tools>"


def expand_references(conversation: Conversation, tools: tuple[ToolDefinition, ...]) -> None:
    """Replace every ``tool_reference`` block inside the conversation's tool
    results by a text block of :func:`reference_text` (results are copied,
    never changed in place). A reference to a tool not offered here (the
    model cannot call tools, so nothing is offered) becomes the tool's name
    only."""
    by_name = {tool.name: tool for tool in tools}

    def expanded(block: ToolReferenceBlock) -> TextBlock:
        tool = by_name.get(block.tool_name)
        text = reference_text(tool) if tool is not None else f"Tool loaded: {block.tool_name}"
        return TextBlock(type="text", text=text)

    for turn in conversation.turns:
        for b, block in enumerate(turn.blocks):
            if not isinstance(block, ToolResultBlock) or not isinstance(block.content, list):
                continue
            if any(isinstance(inner, ToolReferenceBlock) for inner in block.content):
                content = [expanded(c) if isinstance(c, ToolReferenceBlock) else c for c in block.content]
                turn.blocks[b] = block.model_copy(update={"content": content})
