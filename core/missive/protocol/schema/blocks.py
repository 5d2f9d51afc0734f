"""Content blocks of the Messages API request (contract section 2).

Every model allows unknown keys (``extra="allow"``) so a newer client never gets
a 400 for a field Missive does not know; :mod:`missive.protocol.schema.ignored` reports
them. Unknown block types validate as :class:`UnknownBlock`.

Server-tool blocks of the tools Missive answers (``web_search``,
``web_fetch``, ``tool_search_tool_regex``/``_bm25``: :mod:`missive.tools.server`)
validate as :class:`ServerToolUseBlock`, :class:`WebSearchToolResultBlock`,
:class:`WebFetchToolResultBlock` and :class:`ToolSearchToolResultBlock`; blocks of other server tools (code
execution, MCP...) as :class:`ServerToolBlock`, which is reported as ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

__all__ = [
    "Open",
    "CacheControl",
    "TextBlock",
    "ImageBlock",
    "DocumentBlock",
    "SearchResultBlock",
    "ToolReferenceBlock",
    "ToolUseBlock",
    "ToolResultBlock",
    "ThinkingBlock",
    "RedactedThinkingBlock",
    "ServerToolUseBlock",
    "WebSearchToolResultBlock",
    "WebFetchToolResultBlock",
    "ToolSearchToolResultBlock",
    "ToolSearchToolSearchResult",
    "ToolSearchToolResultError",
    "McpToolUseBlock",
    "McpToolResultBlock",
    "McpToolListingBlock",
    "ServerToolBlock",
    "CompactionBlock",
    "FallbackBlock",
    "ToolAdditionBlock",
    "ToolRemovalBlock",
    "UnknownBlock",
    "ContentBlock",
    "ToolResultContentBlock",
    "SERVER_TOOL_BLOCK_TYPES",
    "ANSWERED_SERVER_TOOLS",
]


class Open(BaseModel):
    """Base of request models: unknown keys are kept (and reported), not rejected."""

    model_config = ConfigDict(extra="allow")


class CacheControl(Open):
    """``cache_control``: accepted on any block. Missive caches prompt prefixes
    automatically, so breakpoints need no action."""

    type: Literal["ephemeral"] = "ephemeral"
    #: The API's two lifetimes (SDK ``BetaCacheControlEphemeralParam``); another is a 400.
    ttl: Literal["5m", "1h"] | None = None


class _Block(Open):
    cache_control: CacheControl | None = None


class TextBlock(_Block):
    type: Literal["text"]
    text: str
    citations: list[dict[str, Any]] | None = None


class Base64Source(Open):
    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(Open):
    type: Literal["url"]
    url: str


class FileSource(Open):
    type: Literal["file"]
    file_id: str


class TextSource(Open):
    type: Literal["text"]
    #: The API's one type here (SDK ``PlainTextSourceParam``); another is a 400.
    media_type: Literal["text/plain"] = "text/plain"
    data: str


class ContentSource(Open):
    type: Literal["content"]
    content: str | list[dict[str, Any]]


ImageSource = Annotated[Base64Source | UrlSource | FileSource, Field(discriminator="type")]
DocumentSource = Annotated[
    Base64Source | UrlSource | FileSource | TextSource | ContentSource, Field(discriminator="type")
]


class ImageTransformations(Open):
    """An image block's ``transformations`` (SDK 2.16
    ``BetaImageTransformationsParam``): ``oversized_image: "error"`` refuses an
    image over the model's size instead of downsizing it
    (:mod:`missive.media.pipeline`)."""

    oversized_image: Literal["downsize", "error"] | None = None


class ImageBlock(_Block):
    type: Literal["image"]
    source: ImageSource
    transformations: ImageTransformations | None = None


class DocumentBlock(_Block):
    type: Literal["document"]
    source: DocumentSource
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None


class SearchResultBlock(_Block):
    type: Literal["search_result"]
    source: str
    title: str
    content: list[TextBlock]
    citations: dict[str, Any] | None = None


class ToolReferenceBlock(_Block):
    """A deferred tool loaded by a tool search (Anthropic docs, "Tool search
    tool"; ``BetaToolReferenceBlockParam``): ``{"type": "tool_reference",
    "tool_name": "..."}`` in a ``tool_result``'s content. The tool it names is
    offered from then on, its definition rendered where the block stands
    (:mod:`missive.tools.deferred`)."""

    type: Literal["tool_reference"]
    tool_name: str


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    #: The API's pattern for tool call ids (its 400: ``messages.N.content.M.tool_use.id:
    #: String should match pattern '^[a-zA-Z0-9_-]+$'``); Missive's own ids match it
    #: (:func:`missive.protocol.ids.client_tool_id`).
    id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]+$")]
    name: str
    input: dict[str, Any]


class ThinkingBlock(_Block):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


SERVER_TOOL_BLOCK_TYPES = frozenset(
    {
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "tool_search_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "container_upload",
    }
)


#: Server tools whose blocks Missive renders into the prompt (the names the
#: API gives ``web_search_*``, ``web_fetch_*`` and ``tool_search_tool_*`` tools;
#: see :mod:`missive.tools.server`).
ANSWERED_SERVER_TOOLS = frozenset(
    {"web_search", "web_fetch", "tool_search_tool_regex", "tool_search_tool_bm25"}
)


class ServerToolUseBlock(_Block):
    """A ``web_search``/``web_fetch`` call in an assistant turn (Anthropic docs,
    "Server tools"): ``{"type": "server_tool_use", "id": "srvtoolu_...",
    "name": "web_search", "input": {"query": "..."}}``."""

    type: Literal["server_tool_use"]
    id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]+$")]  # the tool_use pattern: rendered as one
    name: str
    input: dict[str, Any]


class WebSearchToolResultBlock(_Block):
    """The result of a ``web_search`` call (Anthropic docs, "Web search tool"):
    ``content`` is a list of ``web_search_result`` blocks or an error object
    ``{"type": "web_search_tool_result_error", "error_code": "unavailable"}``."""

    type: Literal["web_search_tool_result"]
    tool_use_id: str
    content: Any


class WebFetchToolResultBlock(_Block):
    """The result of a ``web_fetch`` call (Anthropic docs, "Web fetch tool"):
    ``content`` is a ``web_fetch_result`` (``url``, a ``document`` block) or an
    error object ``{"type": "web_fetch_tool_result_error", "error_code": ...}``."""

    type: Literal["web_fetch_tool_result"]
    tool_use_id: str
    content: Any


class ToolSearchToolSearchResult(_Block):
    """A tool search's matches (SDK ``ToolSearchToolSearchResultBlockParam``):
    ``{"type": "tool_search_tool_search_result", "tool_references": [...]}``."""

    type: Literal["tool_search_tool_search_result"]
    tool_references: list[ToolReferenceBlock]


class ToolSearchToolResultError(_Block):
    """A tool search that failed (SDK ``ToolSearchToolResultErrorParam``)."""

    type: Literal["tool_search_tool_result_error"]
    error_code: str
    error_message: str | None = None


class ToolSearchToolResultBlock(_Block):
    """The result of a ``tool_search_tool_regex``/``_bm25`` call (Anthropic
    docs, "Tool search tool"; SDK ``ToolSearchToolResultBlockParam``): the
    ``tool_reference`` blocks of the deferred tools found, which load them,
    or an error object."""

    type: Literal["tool_search_tool_result"]
    tool_use_id: str
    content: Annotated[ToolSearchToolSearchResult | ToolSearchToolResultError, Field(discriminator="type")]


class McpToolUseBlock(_Block):
    """A call of a tool of an MCP server, run by the server (SDK
    ``BetaMCPToolUseBlockParam``): ``{"type": "mcp_tool_use", "id":
    "mcptoolu_...", "name": "echo", "server_name": "tools", "input": {...}}``;
    rendered with its result (:mod:`missive.tools.server`)."""

    type: Literal["mcp_tool_use"]
    id: Annotated[str, Field(pattern=r"^[a-zA-Z0-9_-]+$")]  # the tool_use pattern: rendered as one
    name: str
    server_name: str
    input: dict[str, Any]


class McpToolResultBlock(_Block):
    """The result of an ``mcp_tool_use`` call (SDK
    ``BetaRequestMCPToolResultBlockParam``): ``content`` a string or a list of
    ``text`` blocks, ``is_error`` for a tool that failed."""

    type: Literal["mcp_tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None


class McpToolListingBlock(_Block):
    """The tools an MCP server listed for an earlier response (SDK
    ``BetaMCPToolListingBlockParam``): not rendered; its ``tools`` are that
    server's listing from then on (:mod:`missive.tools.mcp`)."""

    type: Literal["mcp_tool_listing"]
    mcp_server_name: str
    tools: list[dict[str, Any]]


class ServerToolBlock(_Block):
    """A block of a server tool Missive does not answer (code execution, MCP...):
    it is dropped from the prompt and reported as ignored."""

    type: str


class CompactionBlock(_Block):
    """A conversation summary returned by a compaction request, sent back at
    the head of ``messages`` (``BetaCompactionBlockParam``; checked and
    rendered by :mod:`missive.context_management.compaction`). ``content`` None is a
    failed compaction, which the API treats as a no-op."""

    type: Literal["compaction"]
    content: str | None = None
    signature: str | None = None
    encrypted_content: str | None = None
    tool_changes: list[Any] | None = None


class FallbackBlock(_Block):
    """A ``fallback`` block echoed back from a response: accepted and never
    rendered (``BetaFallbackBlockParam``: "not rendered into the prompt")."""

    type: Literal["fallback"]
    from_: dict[str, Any] = Field(alias="from")
    to: dict[str, Any]
    trigger: Any = None


class ToolAdditionBlock(_Block):
    """A mid-conversation directive making a tool available, in a ``role:
    "system"`` message (``BetaRequestToolAdditionBlockParam``). ``tool`` is a
    ``tool_definition`` (``{"type": "tool_definition", "definition": {...a
    tools entry}}``) or a reference (``tool_reference``, or an MCP one);
    checked and applied where it stands by :mod:`missive.tools.changes`."""

    type: Literal["tool_addition"]
    tool: dict[str, Any]


class ToolRemovalBlock(_Block):
    """A mid-conversation directive withdrawing a tool, in a ``role:
    "system"`` message (``BetaRequestToolRemovalBlockParam``): ``tool`` is a
    ``tool_reference`` by name (or an MCP reference); applied where it
    stands by :mod:`missive.tools.changes`."""

    type: Literal["tool_removal"]
    tool: dict[str, Any]


class UnknownBlock(_Block):
    """A block type this version of Missive does not know."""

    type: str


#: Every block type of a message's content Missive knows.
MESSAGE_BLOCK_TYPES = frozenset(
    "text image document search_result tool_use tool_result thinking redacted_thinking compaction fallback "
    "tool_addition tool_removal server_tool_use web_search_tool_result web_fetch_tool_result "
    "tool_search_tool_result mcp_tool_use mcp_tool_result mcp_tool_listing".split()
)
#: What a ``tool_result``'s content holds (SDK 2.16 ``BetaToolResultBlockParam``).
_TOOL_RESULT_TYPES = frozenset({"text", "image", "document", "search_result", "tool_reference"})


class MisplacedBlock(_Block):
    """A block of a message's content found inside a ``tool_result``'s
    content, which holds text, image, document, search_result and
    tool_reference blocks only (SDK 2.16 ``BetaToolResultBlockParam``): a
    400, where a type Missive does not know is reported as ignored."""

    type: str

    @model_validator(mode="after")
    def _refuse(self) -> MisplacedBlock:
        raise ValueError(
            f"`{self.type}` blocks cannot be in a tool_result's content (it holds text, image, document, "
            "search_result and tool_reference blocks)"
        )


def _tag(known: frozenset[str], misplaced: frozenset[str] = frozenset()) -> Any:
    def discriminate(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        name = value.get("name") if isinstance(value, dict) else getattr(value, "name", None)
        if not isinstance(kind, str):
            # A list or object as the type is unhashable: "unknown" validates
            # it as UnknownBlock, whose ``type: str`` gives the 400 with its path.
            return "unknown"
        if kind in misplaced:
            return "misplaced"
        if kind == "server_tool_use" and (not isinstance(name, str) or name not in ANSWERED_SERVER_TOOLS):
            return "server_tool"
        if kind in known:
            return str(kind)
        if kind in SERVER_TOOL_BLOCK_TYPES:
            return "server_tool"
        return "unknown"

    return Discriminator(discriminate)


ToolResultContentBlock = Annotated[
    (
        Annotated[TextBlock, Tag("text")]
        | Annotated[ImageBlock, Tag("image")]
        | Annotated[DocumentBlock, Tag("document")]
        | Annotated[SearchResultBlock, Tag("search_result")]
        | Annotated[ToolReferenceBlock, Tag("tool_reference")]
        | Annotated[MisplacedBlock, Tag("misplaced")]
        | Annotated[ServerToolBlock, Tag("server_tool")]
        | Annotated[UnknownBlock, Tag("unknown")]
    ),
    _tag(_TOOL_RESULT_TYPES, misplaced=MESSAGE_BLOCK_TYPES - _TOOL_RESULT_TYPES),
]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultContentBlock] | None = None
    is_error: bool | None = None


ContentBlock = Annotated[
    (
        Annotated[TextBlock, Tag("text")]
        | Annotated[ImageBlock, Tag("image")]
        | Annotated[DocumentBlock, Tag("document")]
        | Annotated[SearchResultBlock, Tag("search_result")]
        | Annotated[ToolUseBlock, Tag("tool_use")]
        | Annotated[ToolResultBlock, Tag("tool_result")]
        | Annotated[ThinkingBlock, Tag("thinking")]
        | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
        | Annotated[ServerToolUseBlock, Tag("server_tool_use")]
        | Annotated[WebSearchToolResultBlock, Tag("web_search_tool_result")]
        | Annotated[WebFetchToolResultBlock, Tag("web_fetch_tool_result")]
        | Annotated[ToolSearchToolResultBlock, Tag("tool_search_tool_result")]
        | Annotated[McpToolUseBlock, Tag("mcp_tool_use")]
        | Annotated[McpToolResultBlock, Tag("mcp_tool_result")]
        | Annotated[McpToolListingBlock, Tag("mcp_tool_listing")]
        | Annotated[CompactionBlock, Tag("compaction")]
        | Annotated[FallbackBlock, Tag("fallback")]
        | Annotated[ToolAdditionBlock, Tag("tool_addition")]
        | Annotated[ToolRemovalBlock, Tag("tool_removal")]
        | Annotated[ServerToolBlock, Tag("server_tool")]
        | Annotated[UnknownBlock, Tag("unknown")]
    ),
    _tag(MESSAGE_BLOCK_TYPES),
]
