"""Helpers for driver unit tests that call a driver directly (no HTTP):
a request built as the core builds it, its events collected and checked."""

from __future__ import annotations

from typing import Any

__all__ = ['generation_request', 'collect_events', 'text_of', 'check_order']


# -- helpers for driver unit tests (no HTTP) -----------------------------------


def generation_request(
    messages: list[dict[str, Any]], *, model: str = "test-model", max_tokens: int = 16, **fields: Any
) -> Any:
    """A :class:`~missive.driver.interface.GenerationRequest` built as the core builds it
    (conversation, offered tools, tool_choice), for calling a driver directly.

    ``fields`` are more Messages API body fields (``system``, ``tools``,
    ``temperature``...). Raises pydantic's ValidationError on a bad body.
    """
    from ..messages.conversation import build_conversation
    from ..driver.interface import GenerationRequest
    from ..protocol.schema.request import MessagesRequest
    from ..thinking.plan import plan_thinking
    from ..thinking.replay import answer_position
    from ..tools.definitions import offered_tools, tool_choice_of

    body = MessagesRequest.model_validate({"model": model, "max_tokens": max_tokens, "messages": messages, **fields})
    tools, _ = offered_tools(body)
    return GenerationRequest(
        request_id="req_test",
        model=model,
        conversation=build_conversation(body),
        max_tokens=body.max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        stop_sequences=tuple(body.stop_sequences or ()),
        request=body,
        tools=tools,
        tool_choice=tool_choice_of(body, tools),
        thinking=plan_thinking(body.thinking, body.output_config),
        thinking_position=answer_position(body.messages),
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
