"""Polling until a condition holds: tests wait for states, never for a
fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["until", "wait_until"]


def until(
    condition: Callable[[], Any],
    what: str,
    timeout: float = 120.0,
    interval: float = 0.02,
    detail: Callable[[], Any] | None = None,
) -> Any:
    """Poll ``condition()`` until it returns something true, and return that.
    The one poll helper of the test suite: ``timeout`` only bounds a broken
    run (a slow machine passes, later: 120 s by default, as a CI machine
    running other jobs has taken over 30 s to run a one-request batch).

    Args:
        condition: checked every ``interval`` seconds.
        what: the state waited for, for the failure message.
        timeout: seconds before giving up.
        interval: seconds between checks.
        detail: called on failure, its value appended to the message (a log, the last state).

    Raises:
        AssertionError: ``never {what}`` (and the detail) when ``timeout`` seconds pass first.
    """
    end = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"never {what}" + (f": {detail()}" if detail is not None else ""))
        time.sleep(interval)
    return result


def wait_until(condition: Callable[[], Any], timeout: float, interval: float = 0.1) -> bool:
    """:func:`until` that answers instead of failing: whether ``condition()``
    became true within ``timeout`` seconds."""
    try:
        until(condition, "", timeout, interval)
    except AssertionError:
        return False
    return True
