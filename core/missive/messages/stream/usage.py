"""Usage and the stop reason of one message (contract sections 3 and 4).

* ``message_start`` carries the prompt usage of :class:`~missive.driver.events.Started`
  and ``output_tokens: 0``;
* ``message_delta`` carries cumulative usage, the input and cache fields
  repeated, corrected by :class:`~missive.driver.events.Finished` when the
  driver learned the exact prompt split only at the end;
* output tokens are the sum of the events' ``tokens``, unless ``Finished``
  says how many the driver generated; across the rounds of a message with
  server tools (:mod:`.server_tools`) both input and output usage add up;
* ``stop_reason`` is ``tool_use`` whenever a tool call was emitted.
"""

from __future__ import annotations

from typing import Any

from ...driver.events import Finished, Started

__all__ = ["Usage", "final_stop_reason"]

_INPUT = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class Usage:
    """The token counts of one message, round after round.

    Attributes:
        output_tokens: output tokens counted on the events so far (every round).
        thinking_tokens: the part of them counted on thinking deltas (the
            model's reasoning, shown or not). Not part of the Messages API's
            usage; a front door reports it where its API has a place for it
            (:attr:`missive.serving.answer.Answer.thinking_tokens`).
        budget: the request's ``max_tokens`` (the whole message's, across rounds).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.output_tokens = 0
        self.thinking_tokens = 0
        self._started: Started | None = None
        self._before = dict.fromkeys(_INPUT, 0)  # the prompts of the rounds before this one
        self._settled = 0  # output tokens of the rounds before this one
        self._round_start = 0  # output_tokens when this round began

    def start(self, started: Started) -> None:
        """The first round's prompt usage."""
        self._started = started

    def input(self) -> dict[str, int]:
        """The cumulative prompt usage (``input_tokens`` and the cache fields)."""
        started = self._started
        assert started is not None
        usage = {
            "input_tokens": started.input_tokens,
            "cache_creation_input_tokens": started.cache_creation_input_tokens,
            "cache_read_input_tokens": started.cache_read_input_tokens,
        }
        # Plus the rounds before a server tool's result: usage is cumulative.
        return {key: value + self._before[key] for key, value in usage.items()}

    def correct(self, finished: Finished) -> None:
        """Apply the exact prompt usage a driver learned only at the end."""
        started = self._started
        assert started is not None
        self._started = Started(
            input_tokens=_first(finished.input_tokens, started.input_tokens),
            cache_read_input_tokens=_first(finished.cache_read_input_tokens, started.cache_read_input_tokens),
            cache_creation_input_tokens=_first(
                finished.cache_creation_input_tokens, started.cache_creation_input_tokens
            ),
        )

    def used(self) -> int:
        """Output tokens of the message so far (all rounds)."""
        return self._settled + self.output_tokens - self._round_start

    def settle_round(self) -> None:
        """The round ended: its output tokens are the message's."""
        self._settled += self.output_tokens - self._round_start
        self._round_start = self.output_tokens

    def next_round(self, started: Started) -> None:
        """A new round's prompt (after a server tool's result) began."""
        self._before = self.input()
        self._started = started

    def final(self, driver_output_tokens: int | None) -> dict[str, Any]:
        """The ``message_delta`` usage; ``driver_output_tokens``: the last
        round's ``Finished.output_tokens`` (None: counted on the events)."""
        round_tokens = self.output_tokens - self._round_start
        if driver_output_tokens is not None:
            round_tokens = driver_output_tokens
        return {**self.input(), "output_tokens": self._settled + round_tokens}


def final_stop_reason(
    stop_reason: str, stop_sequence: str | None, *, tool_calls: int
) -> tuple[str, str | None]:
    """The message's ``(stop_reason, stop_sequence)``: ``tool_use`` when a
    call was emitted and the answer ended on its own or on a stop sequence."""
    if tool_calls and stop_reason in ("end_turn", "stop_sequence"):
        return "tool_use", None
    return stop_reason, stop_sequence


def _first(value: int | None, default: int) -> int:
    return default if value is None else value
