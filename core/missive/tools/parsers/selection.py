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

from ...kernel.specs import ToolParserSpec

__all__ = ["select_parser", "parser_for_template"]


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
    declared in the system prompt: :func:`missive.tools.render.system_prompt_format`);
    else ``hermes``, the convention :func:`missive.tools.render.template_messages`
    teaches models whose template has no tool support.
    """
    if override:
        return override
    from ..render import system_prompt_format, template_supports_tools

    if template_supports_tools(template) or system_prompt_format(template) is not None:
        return select_parser(template, specs) or "hermes"
    return "hermes"
