"""Content blocks of the Messages API request (contract section 2).

Every model allows unknown keys (``extra="allow"``) so a newer client never gets
a 400 for a field Missive does not know; :mod:`missive.schema.ignored` reports
them. Unknown block types validate as :class:`UnknownBlock`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

__all__ = [
    "Open",
    "CacheControl",
    "TextBlock",
    "ImageBlock",
    "DocumentBlock",
    "SearchResultBlock",
    "ToolUseBlock",
    "ToolResultBlock",
    "ThinkingBlock",
    "RedactedThinkingBlock",
    "ServerToolBlock",
    "UnknownBlock",
    "ContentBlock",
    "ToolResultContentBlock",
    "SERVER_TOOL_BLOCK_TYPES",
]


class Open(BaseModel):
    """Base of request models: unknown keys are kept (and reported), not rejected."""

    model_config = ConfigDict(extra="allow")


class CacheControl(Open):
    """``cache_control``: accepted on any block. Missive caches prompt prefixes
    automatically, so breakpoints need no action."""

    type: str = "ephemeral"
    ttl: str | None = None


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
    media_type: str = "text/plain"
    data: str


class ContentSource(Open):
    type: Literal["content"]
    content: str | list[dict[str, Any]]


ImageSource = Annotated[Union[Base64Source, UrlSource, FileSource], Field(discriminator="type")]
DocumentSource = Annotated[
    Union[Base64Source, UrlSource, FileSource, TextSource, ContentSource], Field(discriminator="type")
]


class ImageBlock(_Block):
    type: Literal["image"]
    source: ImageSource


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


class ToolUseBlock(_Block):
    type: Literal["tool_use"]
    id: str
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
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)


class ServerToolBlock(_Block):
    """A block from a server tool run by the real API (web search...): Missive
    cannot act on it; it is dropped from the prompt and reported as ignored."""

    type: str


class UnknownBlock(_Block):
    """A block type this version of Missive does not know."""

    type: str


def _tag(known: frozenset[str]) -> Any:
    def discriminate(value: Any) -> str:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        if kind in known:
            return str(kind)
        if kind in SERVER_TOOL_BLOCK_TYPES:
            return "server_tool"
        return "unknown"

    return Discriminator(discriminate)


ToolResultContentBlock = Annotated[
    Union[
        Annotated[TextBlock, Tag("text")],
        Annotated[ImageBlock, Tag("image")],
        Annotated[DocumentBlock, Tag("document")],
        Annotated[SearchResultBlock, Tag("search_result")],
        Annotated[ServerToolBlock, Tag("server_tool")],
        Annotated[UnknownBlock, Tag("unknown")],
    ],
    _tag(frozenset({"text", "image", "document", "search_result"})),
]


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[ToolResultContentBlock] | None = None
    is_error: bool | None = None


ContentBlock = Annotated[
    Union[
        Annotated[TextBlock, Tag("text")],
        Annotated[ImageBlock, Tag("image")],
        Annotated[DocumentBlock, Tag("document")],
        Annotated[SearchResultBlock, Tag("search_result")],
        Annotated[ToolUseBlock, Tag("tool_use")],
        Annotated[ToolResultBlock, Tag("tool_result")],
        Annotated[ThinkingBlock, Tag("thinking")],
        Annotated[RedactedThinkingBlock, Tag("redacted_thinking")],
        Annotated[ServerToolBlock, Tag("server_tool")],
        Annotated[UnknownBlock, Tag("unknown")],
    ],
    _tag(
        frozenset(
            {
                "text",
                "image",
                "document",
                "search_result",
                "tool_use",
                "tool_result",
                "thinking",
                "redacted_thinking",
            }
        )
    ),
]
