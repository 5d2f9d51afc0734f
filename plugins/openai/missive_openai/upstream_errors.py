"""Errors of an OpenAI-compatible server, in the Anthropic envelope's terms.

Error bodies seen in the wild:

* vLLM < 0.10: ``{"object": "error", "message": ..., "type": "BadRequestError",
  "param": null, "code": 400}``; vLLM >= 0.10 and OpenAI:
  ``{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}``
  (``vllm/entrypoints/openai/protocol.py`` ``ErrorResponse``);
* FastAPI defaults: ``{"detail": ...}``; others: plain text.

Context overflow wordings recognised (numbers parsed from them):

* vLLM: ``This model's maximum context length is N tokens. However, your
  request has M input tokens.`` (older: ``However, you requested M tokens
  (P in the messages, C in the completion)``), and for an output budget too
  large: ``'max_tokens' or 'max_completion_tokens' is too large: X. This
  model's maximum context length is N tokens and your request has M input
  tokens``;
* llama-server: ``request (M tokens) exceeds the available context size (N
  tokens)``, with ``n_prompt_tokens`` and ``n_ctx`` in the body;
* vLLM's decoder check: ``The decoder prompt (length M) is longer than the
  maximum model length of N``; and ``is longer than the model's context length``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from missive.api import (
    BadGatewayError,
    InvalidRequestError,
    MissiveError,
    OverloadedError,
    PromptTooLongError,
    RateLimitError,
)

__all__ = ["UpstreamError", "parse_error_body", "context_overflow", "translate", "DEFAULT_RETRY_AFTER"]

#: ``retry-after`` seconds when a down backend gives no hint.
DEFAULT_RETRY_AFTER = 5

_CONTEXT_MARKERS = (
    "maximum context length is",
    "exceeds the available context size",
    "is longer than the model's context length",
    "is longer than the maximum model length",
)


@dataclass(frozen=True)
class UpstreamError:
    """A parsed error answer: status, message and the raw body object (if JSON)."""

    status: int
    message: str
    body: dict[str, Any] | None = None


def parse_error_body(status: int, raw: bytes) -> UpstreamError:
    """Read an error response body in any of the shapes in the module doc."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return UpstreamError(status, text[:1000] or f"HTTP {status}")
    if not isinstance(data, dict):
        return UpstreamError(status, text[:1000])
    inner = data.get("error")
    if isinstance(inner, dict):
        message = inner.get("message")
        merged = {**data, **inner}
    else:
        message = inner if isinstance(inner, str) else data.get("message") or data.get("detail")
        merged = data
    if not isinstance(message, str):
        message = json.dumps(message) if message is not None else text[:1000]
    return UpstreamError(status, message, merged)


def _int(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text, flags=re.IGNORECASE | re.DOTALL)
    return int(found.group(1)) if found else None


@dataclass(frozen=True)
class ContextOverflow:
    """Numbers of a context error: ``prompt_tokens`` (None if not stated),
    ``context`` (the server's context length, None if not stated), and
    ``output_only``: the prompt fits, the output budget does not."""

    prompt_tokens: int | None
    context: int | None
    output_only: bool


def context_overflow(error: UpstreamError) -> ContextOverflow | None:
    """The context numbers of ``error`` if it is a context-length error, else None."""
    message = error.message
    lowered = message.lower()
    if not any(marker in lowered for marker in _CONTEXT_MARKERS):
        return None
    body = error.body or {}
    prompt = body.get("n_prompt_tokens") if isinstance(body.get("n_prompt_tokens"), int) else None
    context = body.get("n_ctx") if isinstance(body.get("n_ctx"), int) else None
    context = context or _int(r"maximum context length is (\d+)", message)
    context = context or _int(r"available context size \((\d+)", message)
    context = context or _int(r"maximum model length of (\d+)", message)
    context = context or _int(r"context length (?:of|is) (\d+)", message)
    prompt = prompt or _int(r"request has (\d+) input tokens", message)
    prompt = prompt or _int(r"prompt contains at least (\d+) input tokens", message)
    prompt = prompt or _int(r"\((\d+) in the messages", message)
    prompt = prompt or _int(r"request \((\d+) tokens\)", message)
    prompt = prompt or _int(r"prompt \(length (\d+)\)", message)
    prompt = prompt or _int(r"resulted in (\d+) tokens", message)
    output_only = (
        ("max_tokens" in lowered or "max_completion_tokens" in lowered or "in the completion" in lowered)
        and prompt is not None
        and context is not None
        and prompt < context
    )
    return ContextOverflow(prompt, context, output_only)


def translate(
    error: UpstreamError, *, model: str, prompt_estimate: int | None = None, retry_after: int | None = None
) -> MissiveError:
    """The client-facing error for a backend's error answer.

    * context overflow -> :class:`PromptTooLongError` (``prompt is too long:
      N tokens > M maximum``, M = context - 1); when the backend states no
      prompt size, ``prompt_estimate`` (or the context) stands in;
    * 401/403 -> 502: the backend refused Missive's own credentials, which
      is not the client's fault (``settings.api_key``);
    * 404 -> 502: the backend does not serve the configured model name;
    * 429 -> 429 with the backend's ``retry-after``;
    * other 4xx -> 400 with the backend's message (the request's fault);
    * 5xx -> 529 ``overloaded_error`` with ``retry-after``.
    """
    overflow = context_overflow(error) if 400 <= error.status < 500 else None
    if overflow is not None and overflow.context is not None:
        prompt = overflow.prompt_tokens or max(prompt_estimate or 0, overflow.context)
        return PromptTooLongError(prompt, overflow.context - 1)
    status = error.status
    if status in (401, 403):
        return BadGatewayError(
            f"the backend of model '{model}' refused Missive's credentials (HTTP {status}: {error.message}); "
            "check the model's settings.api_key"
        )
    if status == 404:
        return BadGatewayError(f"the backend of model '{model}' answered 404: {error.message}")
    if status == 429:
        return RateLimitError(
            f"the backend of model '{model}' is rate limited: {error.message}",
            retry_after=retry_after or DEFAULT_RETRY_AFTER,
        )
    if 400 <= status < 500:
        return InvalidRequestError(f"the backend of model '{model}' rejected the request: {error.message}")
    return OverloadedError(
        f"the backend of model '{model}' failed (HTTP {status}): {error.message}",
        retry_after=retry_after or DEFAULT_RETRY_AFTER,
    )


def retry_after_header(value: str | None) -> int | None:
    """``retry-after`` seconds from a header value (delta-seconds form only)."""
    if value is None:
        return None
    try:
        return max(1, int(float(value)))
    except ValueError:
        return None
