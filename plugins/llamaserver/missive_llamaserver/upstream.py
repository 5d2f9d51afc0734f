"""HTTP to the llama-server replicas of one model: JSON calls and the streaming chat request.

Both go through the model's :class:`missive.remote.transport.RemoteTransport`
(the replica its policy picks: the chat request by its prefix and session
under ``replica_policy = "prefix"``, the others least busy; the failover and timeout policy every remote
driver shares); what is llama-server's own is the reading of its error
answers: :func:`.errors.is_replica_failure` (a 503 ``Loading model``, a
proxy's 502/504, a 5xx outside llama-server's envelope) takes the replica
out of rotation and sends the request to the next one; any other error is
translated by :func:`.errors.translate_error` for the endpoint it came from.

The chat request starts in the background at once
(:meth:`missive.remote.transport.RemoteTransport.stream`), because llama-server
sends its response headers only with the first result of the generation
(``handle_completions_impl``: "in streaming mode, the first error must be
treated as non-stream response", so it waits for the first token, or the
first ``prompt_progress`` event), that is after queueing for a slot and the
whole prefill. The driver waits a little (``start_wait``) for an early
refusal, then starts the message while the server works. Closing the stream
closes the connection; llama-server's ``should_stop`` sees it and cancels
the task, freeing the slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from missive.api import (
    Answer,
    BadGatewayError,
    Classify,
    Failover,
    MissiveError,
    RemoteStream,
    RemoteTransport,
    RouteKey,
)
from missive_openai.upstream_errors import parse_error_body, retry_after_header

from .errors import is_replica_failure, translate_error

__all__ = ["LlamaServerHTTP"]

#: llama-server's chat endpoint.
CHAT_PATH = "/v1/chat/completions"


class LlamaServerHTTP:
    """HTTP to one model's llama-server replicas.

    Args:
        transport: the driver's :class:`~missive.remote.transport.RemoteTransport`.
        model_id: the Missive model id, for messages.
    """

    def __init__(self, transport: RemoteTransport, model_id: str) -> None:
        self.transport = transport
        self.model_id = model_id

    def classify(self, endpoint: str, prompt: int | None = None) -> Classify:
        """The reading of llama-server's error answers to ``endpoint`` (see the module doc)."""

        def classify(
            status: int, raw: bytes, headers: Mapping[str, str], url: str
        ) -> Failover | MissiveError:
            error = parse_error_body(status, raw)
            if is_replica_failure(error):
                return Failover(f"HTTP {error.status}: {error.message[:200]}")
            return translate_error(
                error,
                model=self.model_id,
                endpoint=endpoint,
                prompt_estimate=prompt,
                retry_after=retry_after_header(headers.get("retry-after")),
            )

        return classify

    async def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, prompt: int | None = None
    ) -> Answer:
        """``method path`` with a JSON ``body``: the first successful (2xx) answer.

        Args:
            prompt: the prompt size, for a context error that states none.

        Raises:
            OverloadedError: no replica answered (529, ``retry-after``).
            TimeoutError_: ``read_timeout`` without an answer (504).
            MissiveError: llama-server's error, translated (:func:`.errors.translate_error`).
        """
        return await self.transport.request(method, path, body, classify=self.classify(path, prompt))

    def decode(self, response: Answer, path: str) -> Any:
        """The JSON of a successful answer to ``path``.

        Raises:
            BadGatewayError: the body is not JSON.
        """
        try:
            return response.json()
        except ValueError:
            raise BadGatewayError(
                f"llama-server of model '{self.model_id}' answered {path} with malformed JSON"
            ) from None

    async def json(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, prompt: int | None = None
    ) -> Any:
        """:meth:`request`, then :meth:`decode` (same errors)."""
        return self.decode(await self.request(method, path, body, prompt=prompt), path)

    def chat(self, body: dict[str, Any], *, prompt: int, route: RouteKey | None = None) -> RemoteStream:
        """Start the streaming ``POST /v1/chat/completions`` of ``body`` now,
        on the replica the replica policy picks for ``route``."""
        return self.transport.stream(
            "POST", CHAT_PATH, body, classify=self.classify(CHAT_PATH, prompt), route=route
        )
