"""A warning, once per model, when its answer text holds tool calls its
parser does not read.

A model whose tool parser is wrong (a ``tool_parser`` setting naming another
format, a template whose markers chose the wrong one, a fine-tune that
writes another family's syntax) sends its calls to the client as text:
Claude Code shows them as prose and runs nothing. The text a parser gives
back is watched for the ``output_markers`` of every other registered parser
and, failing those, for a few strings that only tool call syntaxes use; the
first found is logged once per model with the setting that fixes it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from ...driver.parsing import ToolParser, ToolParserSpec

__all__ = ["UnparsedCallWatch"]

log = logging.getLogger("missive.tools")

#: Strings of tool call syntaxes no registered parser may know.
HINTS = ("<tool_call", "<function", "<invoke", "[TOOL_CALLS", "<|tool_call", "<TOOLCALL")

_warned: set[str] = set()


def _markers(specs: Mapping[str, ToolParserSpec], current: type[ToolParser]) -> list[tuple[str, str]]:
    """``(marker, parser name)`` of every registered parser but ``current``
    (worked out once per set of specs and parser: every generation with
    tools asks)."""
    if not specs:  # a driver built outside the app: the built-ins
        from ...default_plugins.tool_parsers import register_tool_parsers

        specs = {s.name: s for s in register_tool_parsers()}
    return list(_markers_of(tuple(specs.items()), current))


@functools.lru_cache(maxsize=64)
def _markers_of(
    specs: tuple[tuple[str, ToolParserSpec], ...], current: type[ToolParser]
) -> tuple[tuple[str, str], ...]:
    from .registry import parser_class

    registered = dict(specs)
    out: list[tuple[str, str]] = []
    for name in registered:
        try:
            cls = parser_class(registered, name)
        except Exception:  # noqa: BLE001 - a plugin parser that does not load is not this warning's business
            continue
        if cls is current or cls.name == current.name:
            continue
        out += [(marker, name) for marker in cls.output_markers if marker not in current.output_markers]
    return tuple(out)


class UnparsedCallWatch:
    """Watches the text one generation's tool parser gave back.

    Args:
        model_id: the model (the warning is logged once per model id).
        parser: the generation's tool parser.
        specs: the registered tool parsers.
    """

    def __init__(self, model_id: str, parser: ToolParser, specs: Mapping[str, ToolParserSpec]) -> None:
        self.model_id = model_id
        self.parser = parser
        self._done = model_id in _warned
        self._markers = [] if self._done else _markers(specs, type(parser))
        self._tail = ""
        self._hint: str | None = None
        self._own = False
        self._width = max([len(m) for m, _ in self._markers] + [len(h) for h in HINTS])

    def feed(self, text: str) -> None:
        """Text the parser emitted as answer text."""
        if self._done or not text:
            return
        window = self._tail + text
        self._tail = window[-(self._width - 1) :]
        for marker, name in self._markers:
            if marker in window:
                self._warn(
                    "model %s wrote a tool call in the %s format (%r) that its tool parser %s does not read, "
                    "so the client got it as text; set settings.tool_parser = \"%s\" for this model",
                    self.model_id,
                    name,
                    marker,
                    self.parser.name,
                    name,
                )
                return
        own = self.parser.output_markers
        if any(m in window for m in own):
            self._own = True  # its own format, malformed: given back as the rules say
        if self._hint is None:
            self._hint = next((h for h in HINTS if h in window and not any(h in m for m in own)), None)

    def finish(self) -> None:
        """The generation ended: a call-like string no registered format
        claimed is named (decided only now: ``<function`` may still have
        become Qwen's ``<function=``)."""
        if not self._done and self._hint is not None and not self._own:
            self._warn(
                "model %s wrote what looks like a tool call (%r) that its tool parser %s does not read and "
                "no registered parser knows, so the client got it as text; set the model's "
                "settings.tool_parser to its format (docs/tools.md) or register a parser for it",
                self.model_id,
                self._hint,
                self.parser.name,
            )

    def _warn(self, message: str, *args: object) -> None:
        self._done = True
        if self.model_id not in _warned:
            _warned.add(self.model_id)
            log.warning(message, *args)
