"""What a server's first request with tools would otherwise load, loaded at start.

A request with tools checks each tool's ``input_schema``
(:func:`missive.tools.validate.schema_error`: ``jsonschema`` and its
metaschemas are imported on first use) and watches its answer for another
parser's tool-call markers (:class:`missive.tools.parsers.unparsed.UnparsedCallWatch`:
every registered tool parser's module is imported on first use). In a
fresh process the first such request paid both: ~0.15 s on 2 cores with
Claude Code's request, more than the rest of a warm prompt-cache hit
(measured with py-spy on the first request after a restart). The server
loads them before it serves (:func:`warm_up`), so a restart answers its
first request as fast as the ones after it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..driver.parsing import ToolParserSpec
from .parsers.registry import parser_class
from .validate import schema_error

__all__ = ["warm_up"]

log = logging.getLogger("missive.server")


def warm_up(specs: Mapping[str, ToolParserSpec]) -> None:
    """Import ``jsonschema`` (one schema checked) and every registered tool
    parser class in ``specs``; a parser that does not load is skipped here
    (its own requests say why)."""
    schema_error({"type": "object", "properties": {}})
    for name in specs:
        try:
            parser_class(specs, name)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the server starting
            log.debug("tool parser %s not loaded at start: %s", name, exc)
