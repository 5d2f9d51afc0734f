"""Choosing and building reasoning parsers from the registered
:class:`~missive.kernel.specs.ReasoningParserSpec`\\ s.

Each spec lists ``template_markers``: literal strings only a template of its
format contains (``<think>``, ``[THINK]``, ``<|channel|>``). The first spec,
in registration order, with a marker in the model's chat template is chosen;
a driver setting may name one instead, or ``"none"``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..driver.parsing import ReasoningParser, ReasoningParserSpec
from ..kernel.specs import load_registered

__all__ = ["reasoning_parser_for_template", "reasoning_parser_class"]


def _builtin(specs: Mapping[str, ReasoningParserSpec]) -> Mapping[str, ReasoningParserSpec]:
    if specs:
        return specs
    # A driver built outside the app (tests, scripts): the built-ins.
    from ..default_plugins.reasoning_parsers import register_reasoning_parsers

    return {s.name: s for s in register_reasoning_parsers()}


def reasoning_parser_for_template(
    template: str, specs: Mapping[str, ReasoningParserSpec], override: str | None = None
) -> str | None:
    """The reasoning format of a model rendered with ``template`` (its Jinja
    source): ``override`` (a driver setting; ``"none"`` disables parsing) wins,
    else the first registered spec with a marker in the template, else None
    (the model does not reason in-band)."""
    if override:
        return None if override == "none" else override
    for spec in _builtin(specs).values():
        if any(marker and marker in template for marker in spec.template_markers):
            return spec.name
    return None


def reasoning_parser_class(specs: Mapping[str, ReasoningParserSpec], name: str) -> type[ReasoningParser]:
    """The parser class registered as ``name``.

    Raises:
        ApiError: no plugin registers that parser (a configuration problem:
            a ``reasoning_parser`` setting naming an absent plugin).
    """
    return load_registered(_builtin(specs), name, ReasoningParser, "reasoning parser")  # type: ignore[no-any-return]
