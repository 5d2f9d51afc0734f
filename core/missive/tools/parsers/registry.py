"""Building tool parsers from the registered :class:`~missive.kernel.specs.ToolParserSpec`\\ s."""

from __future__ import annotations

from collections.abc import Mapping

from ...driver.parsing import ToolParser, ToolParserSpec
from ...driver.tools import ToolDefinition
from ...kernel.specs import load_registered

__all__ = ["parser_class", "build_parser"]


def parser_class(specs: Mapping[str, ToolParserSpec], name: str) -> type[ToolParser]:
    """The parser class registered as ``name``.

    Raises:
        ApiError: no plugin registers that parser (a server configuration
            problem, e.g. a ``tool_parser`` setting naming an absent plugin).
    """
    if not specs:  # a driver built outside the app (tests, scripts): the built-ins
        from ...default_plugins.tool_parsers import register_tool_parsers

        specs = {s.name: s for s in register_tool_parsers()}
    return load_registered(specs, name, ToolParser, "tool parser")  # type: ignore[no-any-return]


def build_parser(
    specs: Mapping[str, ToolParserSpec], name: str, tools: tuple[ToolDefinition, ...], *, constrained: bool
) -> ToolParser:
    """A fresh parser for one generation.

    ``constrained``: generation is grammar-constrained to valid calls, so
    arguments may be streamed as they come and malformed output is an error.
    """
    cls = parser_class(specs, name)
    schemas = {t.name: t.input_schema for t in tools}
    return cls(frozenset(schemas), stream_arguments=constrained, strict=constrained, schemas=schemas)
