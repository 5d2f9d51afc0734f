"""A plugin that replaces the built-in Hermes tool parser."""

from missive import hookimpl
from missive.kernel.specs import ToolParserSpec


@hookimpl
def register_tool_parsers() -> list:
    return [
        ToolParserSpec(
            name="hermes",
            factory="missive.tools.parsers.llama3:Llama3JsonParser",
            description="a replacement, for the test",
            template_markers=("<tool_call>",),
        )
    ]
