"""Helpers for driver unit tests that call a driver directly (no HTTP):
a request built as the core builds it, its events collected and checked."""

from __future__ import annotations

from typing import Any

__all__ = ['generation_request', 'collect_events', 'text_of', 'check_order']


# -- helpers for driver unit tests (no HTTP) -----------------------------------


def generation_request(
    messages: list[dict[str, Any]],
    *,
    model: str = "test-model",
    max_tokens: int = 16,
    driver: Any = None,
    **fields: Any,
) -> Any:
    """A :class:`~missive.driver.interface.GenerationRequest` built by the
    core's own builder (:func:`missive.messages.prepare.build_generation`:
    offered tools, tool_choice, the checks, the conversation, the thinking
    plan, the output cap), for calling a driver directly.

    ``fields`` are more Messages API body fields (``system``, ``tools``,
    ``temperature``...). ``driver``: the driver the request is for: its
    capabilities are checked (a ``CapabilityError`` as the server would
    answer 400) and its model's ``max_output_tokens`` caps ``max_tokens``;
    without one, a driver that can do everything is assumed. Image and
    document blocks are left as they are (the server's media pipeline would
    convert them). Raises pydantic's ValidationError on a bad body.
    """
    import secrets

    from ..messages.prepare import Notes, Target, build_generation
    from ..protocol.schema.request import MessagesRequest
    from ..thinking.signing import Signer

    body = MessagesRequest.model_validate(
        {"model": model, "max_tokens": max_tokens, "messages": messages, **fields}
    )
    if driver is None:
        target = Target(model, "test", _capable())
    else:
        target = Target(model, driver.name, driver.capabilities, driver.entry.max_output_tokens)
    return build_generation(
        body, target, request_id="req_test", signer=Signer(secrets.token_bytes(32)), notes=Notes()
    )


def _capable() -> Any:
    """The capabilities of a driver that takes every request."""
    from ..driver.capabilities import Capabilities, ToolChoiceMode

    modes: frozenset[ToolChoiceMode] = frozenset({"auto", "any", "tool", "none"})
    return Capabilities(
        tool_choice=modes,
        strict_tools=modes,
        parallel_tool_calls=True,
        thinking=True,
        structured_output=True,
        input_media=frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
    )


async def collect_events(events: Any, timeout: float = 600) -> list[Any]:
    """All events of a driver's ``generate`` (``timeout``: a hang guard, seconds)."""
    import anyio

    with anyio.fail_after(timeout):
        return [event async for event in events]


def text_of(events: list[Any]) -> str:
    """The text of the :class:`~missive.driver.events.TextDelta` events, joined."""
    from ..driver.events import TextDelta

    return "".join(e.text for e in events if isinstance(e, TextDelta))


def check_order(events: list[Any]) -> tuple[Any, Any]:
    """Assert a text-only answer's event order (``Started``, deltas, ``Finished``);
    return the first and the last event."""
    from ..driver.events import Finished, Started, TextDelta

    assert isinstance(events[0], Started), events
    assert isinstance(events[-1], Finished), events
    assert all(isinstance(e, TextDelta) for e in events[1:-1]), events
    return events[0], events[-1]
