"""Mid-conversation tool changes: ``tool_addition`` and ``tool_removal`` blocks.

The API's rules (Anthropic docs, "Mid-conversation system messages and tool
changes"; the SDK's ``BetaSystemMessageParam``,
``BetaRequestToolAdditionBlockParam``, ``BetaRequestToolRemovalBlockParam``
and the ``BetaToolChange*`` references; the beta tool runner's
``add_tools()``/``remove_tools()``, Claude Code's
``mid-conversation-tool-changes-2026-07-01`` beta):

* the blocks stand in ``role: "system"`` messages of ``messages``; a change
  applies "from this point in the conversation onward", so the prompt before
  it (the ``tools`` list at its top included) stays the same and its cache
  holds;
* ``tool_addition``'s ``tool`` is a ``tool_definition`` (``definition``: a
  ``tools`` entry, by value) or a ``tool_reference`` by ``name`` to a tool
  of ``tools`` (one declared ``defer_loading: true`` is withheld until
  added) or defined by an earlier addition; adding a name already offered
  redefines it from there on;
* ``tool_removal``'s ``tool`` is a ``tool_reference`` by ``name``: the tool is
  no longer offered from there on. A ``tool_use`` of it earlier in the
  history stays valid history;
* ``mcp_tool_reference`` / ``mcp_toolset_reference`` name MCP servers, which
  this server does not connect to: refused (400), as is a reference to a tool
  that is not defined at that point, a block outside a system message, and a
  definition of a tool type this server cannot offer.

Missive applies them as :mod:`missive.tools.deferred` applies a
``tool_reference``: :func:`apply_tool_changes` folds the blocks over the
tools offered by ``tools`` in message order. The result's ``offered`` are the
tools callable at the end (a remote backend receives them in ``tools``;
``tool_choice`` is checked against them, so forcing an added tool is valid
and forcing a removed one a 400); its ``listed`` are the tools of the
prompt's top list, unchanged by any later change; its ``texts`` are what the
model reads where each block stands (an added tool's definition in the JSON
function form of a tool list, :func:`~missive.tools.deferred.reference_text`;
a removal as one line), rendered in the system message's place
(:mod:`missive.chat_template.system_turns`). ``count_tokens`` renders the
same prompt, so it counts the same tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from ..driver.tools import ToolDefinition
from ..protocol.errors import InvalidRequestError
from ..protocol.schema.blocks import ToolAdditionBlock, ToolRemovalBlock
from ..protocol.schema.request import CountTokensRequest, Tool
from ..protocol.validation import format_validation_error
from .deferred import reference_text
from .definitions import definition_of

__all__ = ["ToolChanges", "apply_tool_changes", "removal_text", "check_forced_choice"]

_MCP = ("mcp_tool_reference", "mcp_toolset_reference")


@dataclass(frozen=True)
class ToolChanges:
    """The tools after the history's mid-conversation changes.

    Attributes:
        offered: the tools the model may call at the end of the conversation,
            the added ones marked :attr:`ToolDefinition.deferred` (their
            definition stands where they were added, not in the top list).
        listed: the prompt's top tool list (the non-deferred tools of
            ``tools``), None where no block changed anything, so a renderer
            keeps its own rule.
        texts: ``(message index, block index)`` of each change, mapped to
            the text the model reads there.
        removed: names withdrawn and not added back, mapped to the path of
            the block that withdrew them.
    """

    offered: tuple[ToolDefinition, ...]
    listed: tuple[ToolDefinition, ...] | None = None
    texts: Mapping[tuple[int, int], str] = field(default_factory=dict)
    removed: Mapping[str, str] = field(default_factory=dict)


def removal_text(name: str) -> str:
    """What the model reads where a ``tool_removal`` withdraws ``name``."""
    return f"Tool removed: {name}. It is no longer available; do not call it."


def _definition(value: object, where: str, *, server_tools: bool) -> ToolDefinition:
    """The tool a ``tool_definition`` carries, checked as a ``tools`` entry."""
    try:
        tool = Tool.model_validate(value)
    except ValidationError as exc:
        raise InvalidRequestError(f"{where}.definition: {format_validation_error(exc)}") from None
    offered = definition_of(tool, server_tools=server_tools)
    if isinstance(offered, str):
        raise InvalidRequestError(f"{where}.definition: the tool '{tool.name}' cannot be added ({offered})")
    return replace(offered, deferred=True)


def _name(tool: Mapping[str, object], where: str, kind: str) -> str:
    """The ``name`` of a ``tool_reference`` (MCP references and other kinds refused)."""
    ref = tool.get("type")
    if ref in _MCP:
        raise InvalidRequestError(
            f'{where}.type: "{ref}" refers to an MCP server\'s tools, which Missive offers from the '
            "request's `mcp_servers` and `mcp_toolset` entries only, not mid-conversation; define the "
            "tool by value with a tool_definition"
        )
    allowed = '"tool_reference" or "tool_definition"' if kind == "tool_addition" else '"tool_reference"'
    if ref != "tool_reference":
        raise InvalidRequestError(f"{where}.type: Input should be {allowed} (got {ref!r})")
    if "name" not in tool:
        raise InvalidRequestError(f"{where}.name: Field required")
    name = tool["name"]
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{where}.name: Input should be a non-empty string (the tool's name)")
    return name


def apply_tool_changes(
    request: CountTokensRequest, offered: tuple[ToolDefinition, ...], *, server_tools: bool = True
) -> ToolChanges:
    """Fold the history's ``tool_addition``/``tool_removal`` blocks over
    ``offered`` (the tools of ``tools``: :func:`~missive.tools.definitions.offered_tools`).

    Args:
        server_tools: whether server tools may be added (False for a model
            that cannot call tools).

    Raises:
        InvalidRequestError: with the block's path: a change outside a system
            message, an MCP reference, a reference to a tool not defined at
            that point, a definition that is not a valid tool this server can
            offer.
    """
    available = {tool.name: tool for tool in offered}
    declared = {tool.name: tool for tool in request.tools or []}
    defined: dict[str, ToolDefinition] = dict(available)  # every tool named so far
    texts: dict[tuple[int, int], str] = {}
    removed: dict[str, str] = {}
    for m, message in enumerate(request.messages):
        for b, block in enumerate(message.blocks()):
            if not isinstance(block, (ToolAdditionBlock, ToolRemovalBlock)):
                continue
            where = f"messages.{m}.content.{b}"
            if message.role != "system":
                raise InvalidRequestError(
                    f'{where}: {block.type} blocks are only allowed in `role: "system"` messages'
                )
            tool = block.tool
            if isinstance(block, ToolAdditionBlock) and tool.get("type") == "tool_definition":
                added = _definition(tool.get("definition"), f"{where}.tool", server_tools=server_tools)
            elif isinstance(block, ToolAdditionBlock):
                name = _name(tool, f"{where}.tool", block.type)
                known = defined.get(name)
                if known is None and name in declared:  # a deferred tool of `tools`, not loaded yet
                    found = definition_of(declared[name], server_tools=server_tools)
                    known = found if not isinstance(found, str) else None
                if known is None:
                    raise InvalidRequestError(
                        f"{where}.tool.name: tool_addition names the tool '{name}', which is not defined "
                        "in `tools` or by an earlier tool_addition"
                    )
                added = replace(known, deferred=True)
            else:
                name = _name(tool, f"{where}.tool", block.type)
                if name not in available:
                    raise InvalidRequestError(
                        f"{where}.tool.name: tool_removal names the tool '{name}', which is not available "
                        f"at messages.{m} (not in `tools`, or already removed)"
                    )
                del available[name]
                removed[name] = where
                texts[(m, b)] = removal_text(name)
                continue
            available.pop(added.name, None)  # a redefinition joins the end, as a new tool
            available[added.name] = defined[added.name] = added
            removed.pop(added.name, None)
            texts[(m, b)] = reference_text(added)
    if not texts:
        return ToolChanges(offered)
    listed = tuple(tool for tool in offered if not tool.deferred)
    return ToolChanges(tuple(available.values()), listed, texts, removed)


def check_forced_choice(request: CountTokensRequest, changes: ToolChanges) -> None:
    """A ``tool_choice`` forcing a tool a ``tool_removal`` withdrew is a 400
    naming the removal (the general check, :func:`~missive.tools.definitions.tool_choice_of`,
    would only say the tool is not offered)."""
    name = getattr(request.tool_choice, "name", None)
    if isinstance(name, str) and name in changes.removed:
        raise InvalidRequestError(
            f"tool_choice.name: tool '{name}' was removed by the tool_removal at "
            f"{changes.removed[name]} and is not available to the model"
        )
