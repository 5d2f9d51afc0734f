"""Polling until a condition holds: tests wait for states, never for a
fixed time."""

from __future__ import annotations

import time
from typing import Any

__all__ = ['until', 'wait_until']


def until(condition: Any, what: str, timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Poll ``condition()`` until it returns something true, and return that.

    Raises:
        AssertionError: ``never {what}`` when ``timeout`` seconds pass first.
    """
    end = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"never {what}")
        time.sleep(interval)
    return result


def wait_until(condition: Any, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition()`` until it is true or ``timeout`` seconds pass;
    return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())
