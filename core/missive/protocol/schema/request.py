"""The ``POST /v1/messages`` and ``count_tokens`` request bodies (contract section 2).

Validation follows the API: ``max_tokens`` an integer >= 0 (0 is the API's
cache warm-up), ``temperature`` and ``top_p`` in [0, 1], ``top_k`` >= 0, at least
one message, tool names matching ``^[a-zA-Z0-9_-]{1,64}$``, and the thinking
budget rules (``budget_tokens`` >= 1024 and < ``max_tokens``).  Fields Missive
does not act on are not declared: they land in ``model_extra`` and are reported
(header ``missive-ignored``), or rejected in strict mode.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, ModelWrapValidatorHandler, StrictBool, StrictFloat, StrictInt, model_validator

from ...tools.validate import schema_error, schema_too_deep
from .blocks import (
    CacheControl,
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Open,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
)
from .breakpoints import check_breakpoints
from .management import CompactionConfig, ContextManagement, FallbackEntry
from .mcp import McpServer, McpToolset
from .thread import Diagnostics, MessageThread

__all__ = [
    "Message",
    "Tool",
    "ToolChoice",
    "Thinking",
    "OutputConfig",
    "Metadata",
    "CountTokensRequest",
    "MessagesRequest",
    "WhitespaceStopsRequest",
]


#: Largest ``max_tokens`` taken (and clamped to the model's room); beyond, the
#: API's 400 for a value over the model's output maximum (see ``_api_rules``).
MAX_TOKENS_LIMIT = 2**31 - 1

#: What a ``role: "system"`` message holds (Anthropic docs, "Mid-conversation
#: system messages"; SDK 2.16 ``BetaSystemMessageParam``: text and the tool
#: changes; images and documents are reported as not shown).
_SYSTEM_BLOCKS = frozenset({"text", "tool_addition", "tool_removal", "image", "document"})


class Message(Open):
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]

    @model_validator(mode="after")
    def _system_content(self) -> Message:
        """A system message's blocks are instructions: a call, a result or
        thinking there is a 400 (a type Missive does not know stays reported)."""
        if self.role == "system" and isinstance(self.content, list):
            for j, block in enumerate(self.content):
                if block.type not in _SYSTEM_BLOCKS and not isinstance(block, UnknownBlock):
                    raise ValueError(
                        f"content.{j}: `{block.type}` blocks cannot be in a system message (it holds text, "
                        "tool_addition and tool_removal blocks)"
                    )
        return self

    def blocks(self) -> list[Any]:
        """Content as a list of blocks (a string becomes one text block)."""
        if isinstance(self.content, str):
            return [TextBlock(type="text", text=self.content)]
        return list(self.content)


class Tool(Open):
    """A custom tool (``input_schema``) or an Anthropic-defined one (versioned ``type``)."""

    name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")]
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    cache_control: CacheControl | None = None
    #: Not rendered until a ``tool_reference`` block loads it (:mod:`missive.tools.deferred`).
    defer_loading: StrictBool | None = None

    @model_validator(mode="after")
    def _custom_needs_schema(self) -> Tool:
        """A custom tool's ``input_schema`` is required, a JSON Schema of
        ``type: "object"`` (the API's rules and wordings: ``input_schema.type:
        Input should be 'object'``, ``input_schema: JSON schema is invalid``)."""
        if self.type not in (None, "custom"):
            return self
        if self.input_schema is None:
            raise ValueError("input_schema: Field required")
        if "type" not in self.input_schema:
            raise ValueError("input_schema.type: Field required")
        if self.input_schema["type"] != "object":
            raise ValueError("input_schema.type: Input should be 'object'")
        if deep := schema_too_deep(self.input_schema):
            raise ValueError(f"input_schema: {deep}")
        problem = schema_error(self.input_schema)
        if problem is not None:
            raise ValueError(f"input_schema: JSON schema is invalid ({problem}); see https://json-schema.org")
        return self


class _ToolChoiceBase(Open):
    disable_parallel_tool_use: StrictBool | None = None


class ToolChoiceAuto(_ToolChoiceBase):
    type: Literal["auto"]


class ToolChoiceAny(_ToolChoiceBase):
    type: Literal["any"]


class ToolChoiceNone(Open):
    type: Literal["none"]


class ToolChoiceTool(_ToolChoiceBase):
    type: Literal["tool"]
    name: str


ToolChoice = Annotated[
    ToolChoiceAuto | ToolChoiceAny | ToolChoiceNone | ToolChoiceTool, Field(discriminator="type")
]


class Thinking(Open):
    # ``between_tools``: thinking off, text between tool calls returned as
    # thinking blocks (:mod:`missive.thinking.between_tools`).
    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = None
    display: str | None = None


class OutputFormat(Open):
    type: Literal["json_schema"]
    schema_: Annotated[dict[str, Any], Field(alias="schema")]

    @model_validator(mode="after")
    def _valid_schema(self) -> OutputFormat:
        """The schema must be valid JSON Schema, as a tool's ``input_schema``
        (:func:`missive.tools.validate.schema_error`; nothing is fetched)."""
        if deep := schema_too_deep(self.schema_):
            raise ValueError(f"schema: {deep}")
        problem = schema_error(self.schema_)
        if problem is not None:
            raise ValueError(f"schema: JSON schema is invalid ({problem}); see https://json-schema.org")
        return self


#: ``output_config.effort`` values (SDK 2.16 ``OutputConfigParam``); another is a 400.
Effort = Literal["low", "medium", "high", "xhigh", "max"]


class OutputConfig(Open):
    effort: Effort | None = None
    format: OutputFormat | None = None


class Metadata(Open):
    user_id: str | None = None


def _check_text_block(block: Any, where: str) -> None:
    """An empty or whitespace-only text block is refused, in the API's words
    (``text content blocks must be non-empty`` / ``must contain
    non-whitespace text``); the optional final assistant message is not
    checked (the caller skips it).

    Raises:
        ValueError: the message naming the block's path.
    """
    if getattr(block, "type", None) != "text" or not isinstance(getattr(block, "text", None), str):
        return
    if block.text == "":
        raise ValueError(f"{where}: text content blocks must be non-empty")
    if not block.text.strip():
        raise ValueError(f"{where}: text content blocks must contain non-whitespace text")


def _ends_with_whitespace(content: Any) -> bool:
    """Whether message content ends with whitespace: a string, or a list
    whose last block is a text block."""
    if isinstance(content, str):
        return content != "" and content != content.rstrip()
    if content:
        text = getattr(content[-1], "text", None) if getattr(content[-1], "type", None) == "text" else None
        return isinstance(text, str) and text != "" and text != text.rstrip()
    return False


class CountTokensRequest(Open):
    """Body of ``POST /v1/messages/count_tokens``; also the base of
    :class:`MessagesRequest`, so both render the same prompt."""

    model: str
    messages: Annotated[list[Message], Field(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    output_format: OutputFormat | None = None
    cache_control: CacheControl | None = None  # automatic prefix caching: nothing to do
    #: The MCP connector (:mod:`missive.tools.mcp`): the servers, and the
    #: ``tools`` entries of type ``mcp_toolset`` (they have no ``name``), set
    #: apart when the body is read.
    mcp_servers: list[McpServer] | None = None
    mcp_toolsets: list[McpToolset] | None = None

    # -- Issue 26 part B: conversation management (missive.context_management) --------
    # context_management: edits applied before rendering (count_tokens too);
    # compaction: a compaction request (count_tokens accepts and ignores it).
    context_management: ContextManagement | None = None
    compaction: CompactionConfig | None = None
    # -- end of issue 26 part B ---------------------------------------------

    # Fields of MessagesRequest, absent here; declared for a shared interface.
    max_tokens: int | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _toolsets_apart(cls, data: Any) -> Any:
        """``tools`` entries of type ``mcp_toolset`` (SDK ``BetaMCPToolsetParam``)
        moved to ``mcp_toolsets``: they configure a server's tools, not one tool.
        ``mcp_toolsets`` is not a field of the API: sent by a client, it is refused."""
        if isinstance(data, dict) and "mcp_toolsets" in data:
            raise ValueError("mcp_toolsets: not a request field; send `mcp_toolset` entries in `tools`")
        if not isinstance(data, dict) or not isinstance(data.get("tools"), list):
            return data
        tools = data["tools"]
        sets = [t for t in tools if isinstance(t, dict) and t.get("type") == "mcp_toolset"]
        if not sets:
            return data
        return {
            **data,
            "tools": [t for t in tools if not (isinstance(t, dict) and t.get("type") == "mcp_toolset")],
            "mcp_toolsets": sets,
        }

    @model_validator(mode="wrap")
    @classmethod
    def _breakpoints(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """The API's ``cache_control`` rules: at most 4 breakpoints, TTLs
        never longer than an earlier one's (:mod:`.breakpoints`). Around the
        other validators (defined after ``_toolsets_apart``, so outside it):
        the client's ``tools`` list places its ``mcp_toolset`` entries."""
        raw_tools = data.get("tools") if isinstance(data, dict) else None
        request = handler(data)
        check_breakpoints(request, raw_tools)
        return request

    @model_validator(mode="after")
    def _non_empty_content(self) -> CountTokensRequest:
        """Every message has content (``""`` and ``[]`` are refused), except an
        optional final assistant message (a prefill that may be empty). The
        API's rule and wording; an empty ``tool_result`` content stays valid
        (a command with no output, as Claude Code sends)."""
        last = len(self.messages) - 1
        for i, message in enumerate(self.messages):
            if i == last and message.role == "assistant":
                continue
            if message.content == "" or message.content == []:
                raise ValueError(
                    f"messages.{i}: all messages must have non-empty content except for the optional final "
                    "assistant message"
                )
            if isinstance(message.content, str) and not message.content.strip():
                # String content is one text block to the API, refused the same way.
                raise ValueError(f"messages.{i}: text content blocks must contain non-whitespace text")
            if isinstance(message.content, list):
                for j, block in enumerate(message.content):
                    _check_text_block(block, f"messages.{i}.content.{j}")
        if isinstance(self.system, list):
            for j, block in enumerate(self.system):
                _check_text_block(block, f"system.{j}")
        final = self.messages[last]
        if final.role == "assistant" and _ends_with_whitespace(final.content):
            # The API's rule and wording: a prefill the answer continues may
            # not end with whitespace (tokenizers merge a space into the next word).
            raise ValueError("messages: final assistant content cannot end with trailing whitespace")
        return self

    def output_format_schema(self) -> dict[str, Any] | None:
        """The JSON schema of ``output_config.format`` (or legacy ``output_format``)."""
        fmt = (self.output_config.format if self.output_config else None) or self.output_format
        return fmt.schema_ if fmt is not None else None

    def iter_blocks(self) -> Iterator[Any]:
        """Every content block of every message, tool_result content included."""
        return (block for _, block in self.iter_blocks_at())

    def iter_blocks_at(self) -> Iterator[tuple[str, Any]]:
        """:meth:`iter_blocks` with each block's path (``messages.0.content.1``,
        ``messages.2.content.0.content.1`` inside a tool_result)."""
        for i, message in enumerate(self.messages):
            for j, block in enumerate(message.blocks()):
                yield f"messages.{i}.content.{j}", block
                if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                    for k, inner in enumerate(block.content):
                        yield f"messages.{i}.content.{j}.content.{k}", inner

    def first_image(self) -> tuple[str, str] | None:
        """``(its path, its media type)`` of the first image block, tool_result
        content included (``messages.0.content.1``,
        ``messages.2.content.0.content.1``; ``image`` for a URL or file
        source), or None."""
        for path, block in self.iter_blocks_at():
            if isinstance(block, ImageBlock):
                return path, getattr(block.source, "media_type", None) or "image"
        return None

    def uses_tool_blocks(self) -> bool:
        return any(isinstance(b, (ToolUseBlock, ToolResultBlock)) for b in self.iter_blocks())

    def media_types(self) -> list[str]:
        """Media of image/document blocks, e.g. ``image/png``, ``application/pdf``,
        in order, without repeats.

        URL and file sources, whose type is unknown until fetched, give
        ``image`` or ``document``; ``content`` documents ``text/plain``.
        """
        found: list[str] = []
        for block in self.iter_blocks():
            if isinstance(block, (ImageBlock, DocumentBlock)):
                source = block.source
                kind = "image" if isinstance(block, ImageBlock) else "document"
                media = getattr(source, "media_type", None)
                if source.type == "content":
                    media = "text/plain"
                found.append(media or kind)
        return list(dict.fromkeys(found))


class MessagesRequest(CountTokensRequest):
    """Body of ``POST /v1/messages``."""

    # Strict types: the API rejects "10" for an integer and "yes" for a boolean.
    max_tokens: Annotated[StrictInt, Field(ge=0)]
    stream: StrictBool = False
    stop_sequences: list[str] | None = None
    temperature: Annotated[StrictFloat, Field(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[StrictFloat, Field(ge=0.0, le=1.0)] | None = None
    top_k: Annotated[StrictInt, Field(ge=0)] | None = None
    metadata: Metadata | None = None
    # Message threads and cache diagnostics (missive.threads; the SDK 2.15 types in .thread).
    thread: MessageThread | None = None
    diagnostics: Diagnostics | None = None

    # -- Issue 26 part B: fallbacks and request-routing fields -------------
    # fallbacks: missive.routing.chain; speed, inference_geo:
    # missive.messages.placement (what cannot be honoured is reported as
    # ignored, with the reason; the SDK sends user_profile_id and
    # workspace_id as headers, handled there too).
    fallbacks: list[FallbackEntry] | Literal["default"] | None = None
    speed: Literal["standard", "fast"] | None = None
    inference_geo: str | None = None
    # -- end of issue 26 part B ---------------------------------------------

    #: Whether a stop sequence may be whitespace only (:class:`WhitespaceStopsRequest`).
    whitespace_stops: ClassVar[bool] = False

    @model_validator(mode="after")
    def _api_rules(self) -> MessagesRequest:
        if self.max_tokens > MAX_TOKENS_LIMIT:
            # A smaller value is clamped to the model's output cap and context
            # (Claude Code sends 32000 to any model); this one is a mistake. The
            # API's 400 and wording for max_tokens over a model's maximum (Anthropic
            # docs, "Migrating from Text Completions": "If you pass a value higher
            # than the model supports, returns a validation error").
            raise ValueError(
                f"max_tokens: {self.max_tokens} > {MAX_TOKENS_LIMIT}, which is the maximum allowed number "
                f"of output tokens for {self.model} (a value up to it is clamped to what the model can write)"
            )
        if self.stop_sequences is not None:
            for i, seq in enumerate(self.stop_sequences):
                if self.whitespace_stops and not seq:
                    raise ValueError(f"stop_sequences.{i}: each stop sequence must be non-empty")
                if not seq.strip() and not self.whitespace_stops:
                    raise ValueError(f"stop_sequences.{i}: each stop sequence must contain non-whitespace")
        thinking = self.thinking
        if thinking is not None and thinking.type == "enabled":
            if thinking.budget_tokens is None:
                raise ValueError("thinking.enabled.budget_tokens: Field required")
            if thinking.budget_tokens < 1024:
                raise ValueError(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                )
            if self.max_tokens <= thinking.budget_tokens:
                raise ValueError("`max_tokens` must be greater than `thinking.budget_tokens`")
            if self.tool_choice is not None and self.tool_choice.type in ("any", "tool"):
                raise ValueError("Thinking may not be enabled when tool_choice forces tool use.")
        if self.compaction is not None and self.context_management is not None:
            # Issue 26 part B: the SDK's docstring of `compaction`.
            raise ValueError("compaction: cannot be combined with `context_management`")
        return self


class WhitespaceStopsRequest(MessagesRequest):
    """A :class:`MessagesRequest` whose stop sequences may be whitespace only
    (an empty one is still refused): what a front door asks for
    (:meth:`missive.server.front_door.Gateway.answer`) when its API allows
    them, as OpenAI's does (``stop: "\\n"``; API reference, "Create chat
    completion", ``stop``: "Up to 4 sequences where the API will stop
    generating further tokens", no rule on their content). ``POST
    /v1/messages`` keeps the Messages API's rule (:class:`MessagesRequest`)."""

    whitespace_stops: ClassVar[bool] = True
