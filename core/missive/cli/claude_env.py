"""The environment that points Claude Code at a running Missive (``missive claude``).

Claude Code reads these variables (docs/clients/claude-code.md says why
each one is set; names checked against Claude Code 2.1.332):

* ``ANTHROPIC_BASE_URL``: the server; ``ANTHROPIC_AUTH_TOKEN``: sent as
  ``Authorization: Bearer`` (Missive accepts it like ``x-api-key``; unlike
  ``ANTHROPIC_API_KEY`` it needs no interactive approval);
* ``ANTHROPIC_MODEL`` and ``ANTHROPIC_DEFAULT_HAIKU_MODEL``: the main and the
  side-call model;
* ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``: the context window Claude Code assumes
  for a model id it does not know (measured: it then reports that window;
  without it, 1,000,000); ``CLAUDE_CODE_AUTO_COMPACT_WINDOW``: the window
  auto-compaction works in, only set for windows of 100,000 tokens or more
  (Claude Code raises smaller values to 100,000, with a warning);
* ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``: ``max_tokens`` of its requests (default
  32000): a quarter of the context, at most 32000 and the model's cap;
* ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``: no telemetry, error
  reporting or update checks to Anthropic's servers.
"""

from __future__ import annotations

import json
import shlex
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ..config import Config

__all__ = [
    "server_url",
    "fetch_model",
    "claude_environment",
    "export_lines",
    "context_warning",
    "ServerUnavailable",
    "CLAUDE_FIRST_REQUEST",
    "CLAUDE_MIN_CONTEXT",
    "CLAUDE_GOOD_CONTEXT",
]

#: Claude Code's own default ``max_tokens`` and the least auto-compact window it accepts.
CLAUDE_DEFAULT_MAX_OUTPUT = 32000
CLAUDE_MIN_COMPACT_WINDOW = 100_000

#: Tokens of Claude Code's first request in an empty folder (2.1.332: 12,374
#: with SmolLM2's tokenizer; other tokenizers, a CLAUDE.md and MCP tools
#: bring it to about 20,000): a smaller context cannot take it.
CLAUDE_FIRST_REQUEST = 20_000
#: The least context that works for short sessions, and what real work needs
#: (docs/clients/claude-code.md, "Context sizes that work").
CLAUDE_MIN_CONTEXT = 32768
CLAUDE_GOOD_CONTEXT = 65536

_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


class ServerUnavailable(Exception):
    """No Missive answers at the URL, or it refused the request (the message
    says which; ``status`` is the HTTP status of a refusal, else None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def server_url(config: Config) -> str:
    """``http://HOST:PORT`` of the configured server; a wildcard listen
    address becomes the loopback address of its family."""
    host = _WILDCARD_HOSTS.get(config.server.host, config.server.host)
    host_part = f"[{host}]" if ":" in host else host
    return f"http://{host_part}:{config.server.port}"


def _get(url: str, api_key: str | None, timeout: float) -> Any:
    req = urllib.request.Request(url, headers={"x-api-key": api_key} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = exc.reason
        raise ServerUnavailable(f"{url} answered {exc.code}: {message}", exc.code) from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnavailable(
            f"no Missive server answers at {url} ({reason}); start one with `missive serve`"
        ) from None


def fetch_model(url: str, api_key: str | None, model: str | None, *, timeout: float = 10.0) -> dict[str, Any]:
    """The model object (``GET /v1/models/{id}``, API shape) Claude Code will use.

    ``model`` None: the first model the server lists.

    Raises:
        ServerUnavailable: unreachable server, bad key, unknown model, no models.
    """
    if model is None:
        listing = _get(f"{url}/v1/models?limit=1", api_key, timeout)
        if not listing.get("data"):
            raise ServerUnavailable(f"the server at {url} serves no models")
        model = listing["data"][0]["id"]
    found: dict[str, Any] = _get(
        f"{url}/v1/models/{urllib.parse.quote(str(model), safe='')}", api_key, timeout
    )
    return found


def claude_environment(
    url: str, api_key: str | None, model: dict[str, Any], small_model: str | None
) -> dict[str, str]:
    """Claude Code's variables for ``model`` (an API model object) at ``url``.

    ``api_key`` None (a server without keys): a placeholder token, since
    Claude Code asks to log in when it has none.
    """
    env = {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_AUTH_TOKEN": api_key or "missive-no-key",
        "ANTHROPIC_MODEL": model["id"],
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": small_model or model["id"],
    }
    context = model.get("max_input_tokens")
    if context:
        output = min(CLAUDE_DEFAULT_MAX_OUTPUT, max(1, context // 4), model.get("max_tokens") or context)
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(output)
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(context)
        if context >= CLAUDE_MIN_COMPACT_WINDOW:
            env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(context)
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    return env


def context_warning(model: dict[str, Any]) -> str | None:
    """A warning when ``model``'s context (``max_input_tokens`` of the API
    model object) is too small for Claude Code; None when it is large
    enough or unknown. Below :data:`CLAUDE_FIRST_REQUEST` tokens the first
    request does not fit; below :data:`CLAUDE_MIN_CONTEXT` sessions compact
    after a few file reads."""
    context = model.get("max_input_tokens")
    if not isinstance(context, int) or context >= CLAUDE_MIN_CONTEXT:
        return None
    fix = (
        f"serve a model with {CLAUDE_MIN_CONTEXT}+ tokens of context ({CLAUDE_GOOD_CONTEXT}+ for real work), "
        "e.g. missive serve --model hf://unsloth/Qwen3-4B-Instruct-2507-GGUF:Q4_K_M --context-window "
        f"{CLAUDE_GOOD_CONTEXT}, or raise its context_window (docs/models.md, \"Models for Claude Code\")"
    )
    if context < CLAUDE_FIRST_REQUEST:
        return (
            f"warning: model '{model['id']}' has {context} tokens of context, too few for Claude Code: its "
            "first "
            f"request alone is 12,000 to 20,000 tokens, so it will fail with \"Prompt is too long\"; {fix}"
        )
    return (
        f"warning: model '{model['id']}' has {context} tokens of context: Claude Code's first request "
        f"(12,000 to 20,000 tokens) fits, but a session fills the rest after a few file reads; {fix}"
    )


def export_lines(env: dict[str, str]) -> str:
    """``export NAME=value`` lines, shell-quoted, for ``eval "$(missive claude)"``."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in env.items())
