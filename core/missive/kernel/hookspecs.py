"""The plugin hooks of Missive. Each is documented once, in docs/hooks.md.

Registration hooks are synchronous, called once when the app is built, and
return typed specs (:mod:`missive.kernel.specs`) with lazy factories.  Per-request
work runs on the objects those factories build, through async methods, never
through pluggy (pluggy has no async hooks and adds overhead on a hot path).

Implementations may accept fewer arguments than a spec lists (pluggy rule), so
arguments can be added later without breaking plugins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from ..config import Config
    from ..driver.parsing import ReasoningParserSpec, ToolParserSpec
    from .specs import (
        DefaultModel,
        DocumentProcessorSpec,
        DriverSpec,
        FrontDoorSpec,
        ImageProcessorSpec,
        SearchProviderSpec,
        TokenizerSpec,
    )

PROJECT = "missive"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["hookspec", "hookimpl", "PROJECT"]


@hookspec
def register_drivers() -> list[DriverSpec]:
    """Return the backend drivers this plugin provides."""


@hookspec
def register_default_models() -> list[DefaultModel]:
    """Return models to serve when the configuration defines none."""


@hookspec
def register_tool_parsers() -> list[ToolParserSpec]:
    """Return parsers that find tool calls in generated text."""


@hookspec
def register_reasoning_parsers() -> list[ReasoningParserSpec]:
    """Return parsers that separate reasoning from the answer in generated text."""


@hookspec
def register_tokenizers() -> list[TokenizerSpec]:
    """Return tokenizers for counting tokens."""


@hookspec
def register_image_processors() -> list[ImageProcessorSpec]:
    """Return processors for image content blocks."""


@hookspec
def register_document_processors() -> list[DocumentProcessorSpec]:
    """Return processors for document content blocks."""


@hookspec
def register_search_providers() -> list[SearchProviderSpec]:
    """Return search engines that can run the ``web_search`` server tool."""


@hookspec
def register_front_doors() -> list[FrontDoorSpec]:
    """Return HTTP APIs served beside the Messages API (OpenAI's...)."""


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``missive`` command line."""


@hookspec(firstresult=True)
def resolve_model(requested: str, config: Config) -> str | None:
    """Map a client's model id to a configured model id; None if not handled."""
