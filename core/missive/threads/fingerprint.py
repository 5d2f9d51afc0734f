"""Cache diagnostics: a request's fingerprint and why a later one diverged.

Anthropic docs, "Cache diagnostics": a request with a ``diagnostics`` object
has a fingerprint kept under its response id (hashes and a token count,
never the prompt's text); a later request naming that id in
``diagnostics.previous_message_id`` gets ``diagnostics.cache_miss_reason``,
the first place the two diverge, in the SDK's shapes
(``anthropic/types/cache_miss_*.py``):

* ``model_changed``: the model serving it differs (Missive compares the
  configured model the id resolves to: two aliases of one model share its
  cache);
* ``tools_changed``, ``system_changed``: checked in the order the prompt
  cache's prefix is built (tools, then system, then messages: Anthropic docs,
  "Prompt caching"). ``system`` is the system prompt Missive renders: the
  top-level ``system`` without Claude Code's billing header, and the
  ``role: "system"`` messages before the first turn, which Missive folds into
  it (so a changed one is ``system_changed``: it changes the head of the
  prompt);
* ``messages_changed``: the other messages, later ``role: "system"``
  messages included (Missive renders them where they stand:
  :mod:`missive.chat_template.system_turns`), are not the previous request's followed by
  new ones;
* ``unavailable``: model, tools, system and messages match but another
  prompt-affecting parameter (``thinking``, ``tool_choice``,
  ``output_config``) differs;
* ``previous_message_not_found``: nothing is kept under that id for this API
  key (never asked for, expired, dropped, another worker's or key's).

No divergence: the response's ``diagnostics`` is ``null``, as the API's.
``cache_missed_input_tokens`` is the previous request's prompt (input, cache
read and cache creation tokens) less the tokens this request read from the
prefix cache: what it would have read had the prefix matched, as far as
Missive's own count shows. ``cache_control`` markers never count: Missive
caches prefixes by itself, and clients move the markers every turn.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import orjson

from ..protocol.schema.request import MessagesRequest

__all__ = ["Fingerprint", "fingerprint_of", "cache_miss_reason", "same_json"]


@dataclass(frozen=True)
class Fingerprint:
    """What is compared of a request: digests of its parts and its prompt's size."""

    model: str
    tools: str
    system: str
    messages: tuple[str, ...]
    params: str
    prompt_tokens: int


def _plain(value: Any) -> Any:
    """``value`` (JSON) without ``cache_control`` keys in it, following only
    the keys that hold blocks (a tool's ``input`` is the caller's data)."""
    if isinstance(value, dict):
        return {k: (_plain(v) if k == "content" else v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _digest(value: Any) -> str:
    """A SHA-256 digest of ``value``'s JSON with sorted keys (key order is not content)."""
    try:
        data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits
        data = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()[:32]


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same, ``cache_control`` markers and key order aside."""
    return bool(_plain(a) == _plain(b))


def _json(model: Any) -> Any:
    """A validated model (or list of them) as JSON values, ``None`` fields left out."""
    if isinstance(model, list):
        return [_json(item) for item in model]
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", exclude_none=True, by_alias=True)
    return model


def fingerprint_of(
    req: MessagesRequest, *, model: str, system: str | None, prompt_tokens: int
) -> Fingerprint:
    """The fingerprint of ``req`` served by configured model ``model``.

    Args:
        system: the system prompt Missive rendered for it
            (:attr:`missive.messages.conversation.Conversation.system`).
        prompt_tokens: its prompt's size (input + cache read + cache creation).
    """
    leading = 0
    while leading < len(req.messages) and req.messages[leading].role == "system":
        leading += 1  # folded into ``system``
    messages = tuple(_digest(_plain(_json(message))) for message in req.messages[leading:])
    params = {
        "thinking": _json(req.thinking),
        "tool_choice": _json(req.tool_choice),
        "output_config": _json(req.output_config),
        "output_format": _json(req.output_format),
    }
    return Fingerprint(
        model=model,
        tools=_digest(_plain(_json(req.tools or []))),
        system=_digest(system),
        messages=messages,
        params=_digest(params),
        prompt_tokens=prompt_tokens,
    )


def cache_miss_reason(
    previous: Fingerprint | None, current: Fingerprint, cache_read: int
) -> dict[str, Any] | None:
    """``diagnostics.cache_miss_reason`` of ``current`` against ``previous``
    (None: not found), or None when they do not diverge; ``cache_read``:
    the tokens ``current`` read from the prefix cache."""
    if previous is None:
        return {"type": "previous_message_not_found"}
    missed = max(0, previous.prompt_tokens - cache_read)
    for kind, same in (
        ("model_changed", previous.model == current.model),
        ("tools_changed", previous.tools == current.tools),
        ("system_changed", previous.system == current.system),
        ("messages_changed", current.messages[: len(previous.messages)] == previous.messages),
    ):
        if not same:
            return {"type": kind, "cache_missed_input_tokens": missed}
    if previous.params != current.params:
        return {"type": "unavailable"}
    return None
