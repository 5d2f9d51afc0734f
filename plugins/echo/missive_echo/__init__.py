"""missive-echo: a scripted driver (see :mod:`missive_echo.driver`).

:func:`script` builds the user-message text that makes the driver play steps;
:func:`tool_loop` the text that drives a client's tool loop.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["script", "tool_loop"]


def script(*steps: dict[str, Any], **extra: Any) -> str:
    """The text of a user message that makes the echo driver play ``steps``.

    >>> script({"text": "Hi"}, stop_reason="end_turn")
    '{"script": [{"text": "Hi"}], "stop_reason": "end_turn"}'
    """
    return json.dumps({"script": list(steps), **extra})


def tool_loop(name: str, inputs: list[dict[str, Any]], answer: str) -> str:
    """The text of a user message that makes the echo driver call tool
    ``name`` once per assistant turn of a client's tool loop, with each of
    ``inputs`` in turn, then answer ``answer`` (``"then"`` scripts: the
    driver plays the next one when the conversation goes on with tool results).

    ``tool_loop("lookup", [{"word": "tea"}, {"word": "milk"}], "done")``: a call
    with ``{"word": "tea"}``, then (after its result) one with ``{"word": "milk"}``,
    then (after that result) the text ``done``.
    """
    turns = [
        {"script": [{"tool_call": {"name": name, "arguments": [json.dumps(i)]}}], "stop_reason": "tool_use"}
        for i in inputs
    ]
    first, *rest = turns
    return json.dumps({**first, "then": [*rest, {"script": [{"text": answer}]}]})
