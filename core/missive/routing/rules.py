"""Routing by need: rules in the configuration send a request to the model it needs.

One ``ANTHROPIC_BASE_URL`` in front of a fleet: Claude Code names one main
model and one small/fast model, yet a conversation with a screenshot needs a
vision model, a 100k-token prompt a long-context one, a ``thinking`` request
a reasoning one. ``[[routing.rules]]`` are tried in order after the client's
model id is resolved (aliases); the first rule whose every condition holds
sends the request to its ``to`` model instead::

    [[routing.rules]]
    name = "small-fast"                       # Claude Code's side requests
    model = ["claude-3-5-haiku*", "claude-haiku-*"]
    to = "qwen3-1.7b"

    [[routing.rules]]
    name = "vision"
    images = true
    to = "qwen2.5-vl-7b"

    [[routing.rules]]
    name = "long"
    min_prompt_tokens = 32000
    to = "qwen3-30b-a3b-128k"

    [[routing.rules]]
    name = "reasoning"
    thinking = ["enabled"]                    # true: enabled or adaptive
    to = "qwen3-32b"

    [[routing.rules]]
    name = "subagents"                        # Claude Code's Agent/Task tool
    subagent = true
    to = "qwen3-8b"

Conditions (a rule needs at least one; all must hold):

* ``model``: glob patterns (``fnmatch``) of the model id the client sent;
* ``images``: the request has image blocks (true) or none (false), in its
  messages or inside tool results;
* ``min_prompt_tokens``: the prompt is estimated at this many tokens or more
  (its text over 4 characters a token, images and documents left out: an
  estimate, as no model has been chosen yet to count exactly);
* ``thinking``: thinking is requested: true for ``enabled`` or ``adaptive``
  (Claude Code asks for ``adaptive`` on every request), a list for those
  types only, false for none;
* ``subagent``: the request was made by a Claude Code subagent (true: it
  carries ``x-claude-code-agent-id`` or ``x-claude-code-parent-agent-id``,
  :mod:`missive.protocol.agents`) or by the main conversation (false);
* ``agent_id``: glob patterns of ``x-claude-code-agent-id`` (a request
  without one never matches).

A rule whose model the request's API key may not use (``keys.NAME.models``)
is passed over: routing never reaches a model the key could not name.
The rule that fired is named in the request's log line (``rule``), counted in
``missive:routing_rule_total`` and listed by ``missive plugins`` and
``missive models``. The response's ``model`` stays the id the client sent.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..config import ConfigError
from ..config.routing import RoutingConfig, RoutingRule, ThinkingType
from ..protocol.agents import NO_AGENT, Agent

__all__ = ["RoutingRule", "RoutingConfig", "RoutingRules", "estimate_prompt_tokens"]

#: Characters per token of the prompt estimate.
CHARS_PER_TOKEN = 4


def _strings(value: Any) -> Iterable[str]:
    """Every string in a JSON-like value, base64 image and document data left out."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        if value.get("type") == "base64":
            return
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def estimate_prompt_tokens(req: Any) -> int:
    """About how many tokens the request's system prompt, messages and tools
    take (their text over :data:`CHARS_PER_TOKEN`)."""
    dumped = req.model_dump(mode="json", include={"system", "messages", "tools"}, exclude_none=True)
    return sum(len(s) for s in _strings(dumped)) // CHARS_PER_TOKEN


class RoutingRules:
    """The configured rules, checked against the served models.

    Args:
        config: ``[routing]``.
        models: the ids of the served models.
        fallbacks: each model's configured ``fallbacks`` chain.

    Raises:
        ConfigError: a rule or a fallback chain names a model that is not
            served, or two rules share a name.
    """

    def __init__(
        self,
        config: RoutingConfig,
        models: Sequence[str],
        fallbacks: Mapping[str, Sequence[str | Mapping[str, Any]]] | None = None,
    ) -> None:

        for model_id, chain in (fallbacks or {}).items():
            for entry in chain:
                target = entry if isinstance(entry, str) else entry.get("model")
                if target not in models:
                    raise ConfigError(
                        f"models.{model_id}.fallbacks names '{target}', which is not a served model "
                        f"(served: {', '.join(models) or 'none'})"
                    )
        self.default_fallbacks = config.default_fallbacks
        self.fallbacks = dict(fallbacks or {})
        names = [rule.name for rule in config.rules]
        for rule in config.rules:
            if rule.to not in models:
                raise ConfigError(
                    f"routing rule '{rule.name}' sends requests to '{rule.to}', which is not a "
                    f"served model (served: {', '.join(models) or 'none'})"
                )
            if names.count(rule.name) > 1:
                raise ConfigError(f"two routing rules are named '{rule.name}'")
        self.rules = list(config.rules)

    def route(
        self, req: Any, allowed: Callable[[str], bool] = lambda model: True, agent: Agent = NO_AGENT
    ) -> RoutingRule | None:
        """The first rule ``req`` (a validated Messages or count_tokens
        request, sent by ``agent``) meets whose model is ``allowed`` (the
        request's key may use it), or None."""
        estimate: int | None = None
        for rule in self.rules:
            if not allowed(rule.to):
                continue
            if rule.model and not any(fnmatch.fnmatchcase(req.model, p) for p in rule.model):
                continue
            if rule.images is not None and rule.images != _has_images(req):
                continue
            if rule.thinking is not None and not _thinking_matches(rule.thinking, req):
                continue
            if rule.subagent is not None and rule.subagent != agent.subagent:
                continue
            if rule.agent_id and not (
                agent.id is not None and any(fnmatch.fnmatchcase(agent.id, p) for p in rule.agent_id)
            ):
                continue
            if rule.min_prompt_tokens is not None:
                if estimate is None:
                    estimate = estimate_prompt_tokens(req)
                if estimate < rule.min_prompt_tokens:
                    continue
            return rule
        return None


def _has_images(req: Any) -> bool:
    return any(getattr(block, "type", None) == "image" for block in req.iter_blocks())


def _thinking_matches(wanted: bool | list[ThinkingType], req: Any) -> bool:
    kind = getattr(getattr(req, "thinking", None), "type", None)
    requested = kind in ("enabled", "adaptive")
    if isinstance(wanted, bool):
        return requested == wanted
    return kind in wanted
