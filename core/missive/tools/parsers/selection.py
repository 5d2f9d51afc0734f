"""Choose a tool parser from a model's chat template.

Each :class:`~missive.kernel.specs.ToolParserSpec` lists ``template_markers``: literal
strings that only a template of its format contains (``<tool_call>`` for
Hermes/Qwen, ``[TOOL_CALLS]`` for Mistral...). The built-in markers come
from the models' published chat templates (see
:mod:`missive.default_plugins.tool_parsers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...driver.parsing import ToolParser, ToolParserSpec

__all__ = ["select_parser", "parser_for_template", "template_supports_tools", "system_prompt_format"]


def select_parser(
    template_source: str, specs: Iterable[ToolParserSpec] | Mapping[str, ToolParserSpec]
) -> str | None:
    """Name of the first spec, in registration order, with any of its
    ``template_markers`` in ``template_source`` (the Jinja source of the chat
    template); None when no spec matches (the model's format is unknown: the
    configuration must name a parser).

    ``specs`` is ``Kernel.tool_parsers`` (a mapping, in registration order) or
    any iterable of specs.
    """
    items = specs.values() if isinstance(specs, Mapping) else specs
    for spec in items:
        if any(marker and marker in template_source for marker in spec.template_markers):
            return spec.name
    return None


def parser_for_template(template: str, specs: Any, override: str | None = None) -> str:
    """The tool call format for a model rendered with ``template``.

    ``override`` (a driver setting) wins; else the format the template uses
    (one that takes ``tools``, or one whose calls it renders in a format
    declared in the system prompt: :func:`system_prompt_format`);
    else ``hermes``, the convention :func:`missive.tools.render.template_messages`
    teaches models whose template has no tool support.
    """
    if override:
        return override

    if template_supports_tools(template) or system_prompt_format(template) is not None:
        return select_parser(template, specs) or "hermes"
    return "hermes"


def template_supports_tools(template: str) -> bool:
    """Whether a chat template renders ``tools`` and assistant ``tool_calls`` itself."""
    return "tools" in template and "tool_calls" in template


def system_prompt_format(template: str) -> type[ToolParser] | None:
    """The built-in tool format whose declarations go into the system prompt,
    for a template that renders past ``tool_calls`` in a format of its own
    (its markers select the parser) but takes no ``tools`` list
    (DeepSeek-V3 and V3.1); None for any other template, or a format with no
    :meth:`~missive.driver.parsing.ToolParser.tool_instructions`."""
    if "tool_calls" not in template or template_supports_tools(template):
        return None
    from ...default_plugins.tool_parsers import register_tool_parsers
    from .registry import parser_class

    specs = {s.name: s for s in register_tool_parsers()}
    name = select_parser(template, specs)
    if name is None:
        return None
    cls = parser_class(specs, name)
    return cls if cls.tool_instructions([]) is not None else None
