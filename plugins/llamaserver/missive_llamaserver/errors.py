"""llama-server's error answers, in the Anthropic envelope's terms.

llama-server answers errors as ``{"error": {"code": STATUS, "message": ...,
"type": ...}}`` (``format_error_response``, ``tools/server/server-common.cpp``)
with these types and statuses: ``invalid_request_error`` 400,
``authentication_error`` 401, ``permission_error`` 403, ``not_found_error``
404, ``server_error`` 500, ``not_supported_error`` 501,
``unavailable_error`` 503 (``Loading model``), and
``exceed_context_size_error`` 400, which adds ``n_prompt_tokens`` and
``n_ctx`` (``server_task_result_error::to_json``, ``server-task.cpp``) to
``request (N tokens) exceeds the available context size (M tokens), try
increasing it`` or ``input (N tokens) is larger than the max context size (M
tokens). skipping``.

Any exception while handling a request that is not a ``std::invalid_argument``
becomes a 500 ``server_error`` (``ex_wrapper``, ``tools/server/server.cpp``):
a chat template calling ``raise_exception`` on a conversation it rejects is
a 500 there. Such a 500, in llama-server's own envelope, comes from a server
that is up and read the request, so it never takes a replica out of rotation:
from ``/apply-template`` it is the template refusing the conversation (a
400, as the in-process drivers answer), from a generation a 502. A 503, a
502/504 from a proxy, or a 500 that is not llama-server's envelope mean the
replica is not serving: the request goes to another replica (529 when none
is left).

ik_llama.cpp streams an error after the headers as a bare ``data:
{"code", "message", "type"}`` chunk (no ``error`` wrapper), mainline as
``data: {"error": {...}}``; :func:`stream_error` reads both.
"""

from __future__ import annotations

from typing import Any

from missive.api import BadGatewayError, InvalidRequestError, MissiveError, PromptTooLongError
from missive_openai.upstream_errors import UpstreamError, translate

__all__ = ["is_replica_failure", "translate_error", "stream_error", "CONTEXT_ERROR"]

#: llama-server's ``error.type`` for a prompt over the slot's context.
CONTEXT_ERROR = "exceed_context_size_error"


def _is_envelope(error: UpstreamError) -> bool:
    """The body is llama-server's ``{"error": {"code", "message", "type"}}``."""
    body = error.body or {}
    return isinstance(body.get("type"), str) and isinstance(body.get("code"), int)


def is_replica_failure(error: UpstreamError) -> bool:
    """True when ``error`` says the replica is not serving (see the module doc):
    a 503, a 502/504, or a 5xx that is not llama-server's own envelope."""
    if error.status in (502, 503, 504):
        return True
    return error.status >= 500 and not _is_envelope(error)


def translate_error(
    error: UpstreamError,
    *,
    model: str,
    endpoint: str,
    retry_after: int | None = None,
    prompt_estimate: int | None = None,
) -> MissiveError:
    """The client-facing error for llama-server's ``error`` answer to ``endpoint``.

    * ``exceed_context_size_error`` -> :class:`PromptTooLongError` with the
      server's ``n_prompt_tokens`` and ``n_ctx - 1`` (one token must remain
      for the answer);
    * a 500 in llama-server's envelope: from ``/apply-template`` a 400 (the
      chat template rejected the conversation), otherwise a 502 naming the
      server's message;
    * a 501 (``not_supported_error``): 502, the server is not configured for
      this (e.g. started with ``--embeddings``);
    * the rest as :func:`missive_openai.upstream_errors.translate`: 400 for a
      4xx, 502 for 401/403/404, 429 passed on, 529 for a 5xx.
    """
    body = error.body or {}
    if body.get("type") == CONTEXT_ERROR or (error.status == 400 and "n_ctx" in body):
        n_prompt, n_ctx = body.get("n_prompt_tokens"), body.get("n_ctx")
        if isinstance(n_prompt, int) and isinstance(n_ctx, int) and n_ctx > 0:
            return PromptTooLongError(max(n_prompt, n_ctx), n_ctx - 1)
    if _is_envelope(error) and error.status == 500:
        if endpoint == "/apply-template":
            return InvalidRequestError(
                f"the chat template of model '{model}' rejected the conversation: {error.message}"
            )
        return BadGatewayError(f"llama-server failed on model '{model}': {error.message}")
    if error.status == 501:
        return BadGatewayError(f"llama-server of model '{model}' cannot serve {endpoint}: {error.message}")
    return translate(error, model=model, prompt_estimate=prompt_estimate, retry_after=retry_after)


def stream_error(chunk: Any) -> UpstreamError | None:
    """The error carried by a parsed stream chunk, or None.

    Mainline: ``{"error": {"code", "message", "type"}}``; ik_llama.cpp: the
    inner object itself (``{"code", "message", "type"}``, no ``choices``).
    """
    if not isinstance(chunk, dict):
        return None
    inner = chunk.get("error")
    if isinstance(inner, dict):
        chunk = inner
    elif inner is not None:
        return UpstreamError(500, str(inner), None)
    elif "choices" in chunk or not {"message", "code"} <= chunk.keys():
        return None
    status = chunk.get("code") if isinstance(chunk.get("code"), int) else 500
    return UpstreamError(status, str(chunk.get("message", "")), chunk)
