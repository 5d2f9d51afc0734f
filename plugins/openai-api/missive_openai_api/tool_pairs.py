"""Every tool call answered, every answer to a call: OpenAI's rules, checked
on the request before the core sees it.

The core's own check (a ``tool_use`` turn followed by a turn of its
``tool_result`` blocks) does not cover a conversation that *ends* with
calls: the Messages API reads a last assistant turn as a prefill to go on
from, so calls nobody answered would reach the model. OpenAI refuses them:

* Chat Completions: "An assistant message with 'tool_calls' must be
  followed by tool messages responding to each 'tool_call_id'. The
  following tool_call_ids did not have response messages: call_x"
  (``param`` the assistant message's ``role``); a tool message with no
  assistant message with ``tool_calls`` right before it: "Invalid parameter:
  messages with role 'tool' must be a response to a preceeding message with
  'tool_calls'."; one whose id that message did not call: "Invalid
  parameter: 'tool_call_id' of 'call_y' not found in 'tool_calls' of
  previous message." (OpenAI's 400s as its clients report them: agno
  #3105, litellm #10083, dapr-agents #145);
* Responses: "No tool output found for function call call_x." for a
  ``function_call`` with no ``function_call_output`` after it, and "No tool
  call found for function call output with call_id call_x." for an output
  whose call is neither earlier in ``input`` nor in the conversation of
  ``previous_response_id`` (agentscope-ai/AgentTeams #299).
"""

from __future__ import annotations

from typing import Any

from .common import bad
from .turns import ToolIds, Turns

__all__ = ["check_chat_calls", "check_response_calls"]


def _unanswered(at: int, calls: list[str], answered: set[str]) -> None:
    missing = [c for c in calls if c not in answered]
    if missing:
        raise bad(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. The following tool_call_ids did not have response messages: "
            + ", ".join(missing),
            f"messages[{at}].role",
        )


def check_chat_calls(messages: list[dict[str, Any]]) -> None:
    """The tool calls and tool messages of Chat ``messages`` (already
    type-checked by the translation) pair up as OpenAI requires."""
    open_at: int | None = None  # the assistant message whose calls the next tool messages answer
    calls: list[str] = []
    answered: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if open_at is None:
                raise bad(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                    "message with 'tool_calls'.",
                    f"messages[{i}].role",
                )
            call_id = message["tool_call_id"]
            if call_id not in calls:
                raise bad(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of "
                    "previous message.",
                    f"messages[{i}].tool_call_id",
                )
            if call_id in answered and calls.count(call_id) == 1:  # a doubled call id: the core's 400
                raise bad(
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' is answered by more than one "
                    "tool message; answer each tool call once.",
                    f"messages[{i}].tool_call_id",
                )
            answered.add(call_id)
            continue
        if open_at is not None:
            _unanswered(open_at, calls, answered)
        made = message.get("tool_calls") if role == "assistant" else None
        open_at = i if made else None
        calls, answered = [call["id"] for call in made or []], set()
    if open_at is not None:
        _unanswered(open_at, calls, answered)


def check_response_calls(turns: Turns, ids: ToolIds) -> None:
    """The ``function_call`` and ``function_call_output`` items of a
    Responses conversation (``turns``: the kept one of
    ``previous_response_id``, then ``input``) pair up as OpenAI requires."""
    called: dict[str, str] = {}
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, message in enumerate(turns.messages):
        for j, block in enumerate(message["content"]):
            origin = turns.origin(index, j)
            where = origin.path if origin is not None else "input"
            if block.get("type") == "tool_use":
                called.setdefault(block["id"], where)
                calls[block["id"]] = calls.get(block["id"], 0) + 1
            elif block.get("type") == "tool_result":
                call_id = block["tool_use_id"]
                if call_id not in called:
                    param = origin.at(["tool_use_id"]) if origin is not None else "input"
                    raise bad(
                        f"No tool call found for function call output with call_id {ids.outward(call_id)}.",
                        param,
                    )
                if call_id in answered and calls[call_id] == 1:  # a doubled call id: the core's 400
                    param = origin.at(["tool_use_id"]) if origin is not None else "input"
                    raise bad(
                        f"Duplicate function call output found for call_id {ids.outward(call_id)}; "
                        "answer each function call once.",
                        param,
                    )
                answered.add(call_id)
    for call_id, where in called.items():
        if call_id not in answered:
            param = where if where == "previous_response_id" else f"{where}.call_id"
            raise bad(f"No tool output found for function call {ids.outward(call_id)}.", param)
