"""The ``markov`` driver: a model served by ``markov-backend`` over HTTP.

* The prompt (:func:`render_prompt`) is the system prompt and one
  ``role: text`` line per turn, then ``assistant:`` and the prefill, if any;
  ``count_tokens`` and ``generate`` both count it with the backend's
  ``/tokenize``, so the count equals the usage.
* :meth:`MarkovDriver.generate` refuses a prompt leaving no room for one
  token (400 ``prompt is too long``), opens ``/generate`` and waits for the
  backend to accept it before ``Started`` (so its refusals are HTTP errors,
  not stream errors), then turns each ``token`` line into a ``TextDelta``
  and the ``done`` line into ``Finished``: ``end`` is ``end_turn``,
  ``length`` is ``max_tokens``. Closing the generator (client gone, stop
  sequence matched) closes the connection, which stops the backend.
* The context window is the entry's ``context_window``, at most the
  backend's (read from ``/health`` at start-up).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing

from missive.api import (
    BadGatewayError,
    Capabilities,
    Conversation,
    Driver,
    Finished,
    GenerationEvent,
    GenerationRequest,
    MissiveError,
    ModelEntry,
    PromptTooLongError,
    Started,
    TextDelta,
    clamp_max_tokens,
)

from .client import MarkovClient
from .plugin import CAPABILITIES
from .settings import parse_settings

__all__ = ["MarkovDriver", "render_prompt"]

log = logging.getLogger("missive.markov")

_STOP_REASONS = {"end": "end_turn", "length": "max_tokens"}


def render_prompt(conversation: Conversation) -> str:
    """The text the backend continues: system prompt, ``role: text`` lines, ``assistant:`` and the prefill."""
    lines = [conversation.system] if conversation.system else []
    lines += [f"{turn.role}: {turn.text()}" for turn in conversation.turns]
    lines.append(f"assistant: {conversation.prefill}" if conversation.prefill else "assistant:")
    return "\n".join(lines)


class MarkovDriver(Driver):
    """Serves one model from a markov backend. Built as ``MarkovDriver(model_id, entry, capabilities)``.

    Raises (constructor):
        ConfigError: bad ``entry.settings`` (names the model and the key).
    """

    name = "markov"

    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities | None = None) -> None:
        super().__init__(model_id, entry, capabilities or CAPABILITIES)
        self.settings = parse_settings(model_id, entry.settings)
        self.client = MarkovClient(self.settings)
        self._backend_context: int | None = None

    @property
    def context_window(self) -> int | None:
        """The entry's ``context_window``, capped at the backend's once known."""
        known = [c for c in (self.entry.context_window, self._backend_context) if c is not None]
        return min(known) if known else None

    async def start(self) -> None:
        """Read the backend's context window. An unreachable backend is
        logged, not fatal: requests get a 529 until it answers."""
        try:
            self._backend_context = int((await self.client.health())["context_window"])
        except MissiveError as exc:
            log.warning("model %s: %s; requests get a 529 until it answers", self.model_id, exc.message)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def count_tokens(self, request: GenerationRequest) -> int:
        return await self.client.tokenize(render_prompt(request.conversation))

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        prompt = render_prompt(request.conversation)
        prompt_tokens = await self.client.tokenize(prompt)
        if self._backend_context is None:  # the backend was down at start-up
            self._backend_context = int((await self.client.health())["context_window"])
        context = self.context_window
        if context is not None and prompt_tokens >= context:
            raise PromptTooLongError(prompt_tokens, context - 1)  # before Started: the 400
        budget = clamp_max_tokens(request.max_tokens, prompt_tokens, context)
        if budget == 0:  # max_tokens 0 (a count_tokens-like call): nothing to generate
            yield Started(input_tokens=prompt_tokens)
            yield Finished("max_tokens", output_tokens=0)
            return
        body = {
            "prompt": prompt,
            "max_tokens": budget,
            "temperature": 1.0 if request.temperature is None else request.temperature,
            "top_k": request.top_k,
            "seed": self.settings.seed,
        }
        async with self.client.generate(body) as stream, aclosing(stream) as lines:
            yield Started(input_tokens=prompt_tokens)
            first = not request.conversation.prefill
            async for line in lines:
                if "token" in line:
                    yield TextDelta(line["token"] if first else " " + line["token"])
                    first = False
                elif line.get("done"):
                    reason = _STOP_REASONS.get(line.get("stop_reason"), "end_turn")
                    yield Finished(reason, output_tokens=int(line["output_tokens"]))
                    return
            raise BadGatewayError(
                f"markov backend at {self.settings.base_url} ended the answer without its done line"
            )
