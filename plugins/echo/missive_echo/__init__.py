"""missive-echo: a scripted driver (see :mod:`missive_echo.driver`).

:func:`script` builds the user-message text that makes the driver play steps.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["script"]


def script(*steps: dict[str, Any], **extra: Any) -> str:
    """The text of a user message that makes the echo driver play ``steps``.

    >>> script({"text": "Hi"}, stop_reason="end_turn")
    '{"script": [{"text": "Hi"}], "stop_reason": "end_turn"}'
    """
    return json.dumps({"script": list(steps), **extra})
