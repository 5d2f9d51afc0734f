"""Thinking a model cannot do, in a request written for Claude.

A client that names a local model through one of its ``aliases``
(``claude-*``: Claude Code, the SDKs' examples, any tool configured for
Claude) writes the request for the Claude model it names, and older Claude
models take only the budget form of thinking: ``thinking: {"type":
"enabled", "budget_tokens": N}`` (Anthropic docs, "Building with extended
thinking"; the form ``claude --model claude-sonnet-4-5`` sends, where the
newer models' ids get ``{"type": "adaptive"}``, "Adaptive thinking"). Such a
client cannot know that the model behind the alias does not reason, and
refusing every one of its requests with a 400 makes the alias useless.

So, for a request whose ``model`` matched an alias (not the model's own id)
and a model whose driver does not declare ``thinking``
(:class:`missive.driver.capabilities.Capabilities`), with the model's
``alias_thinking = "drop"`` (the default):

* ``thinking.type: "enabled"`` is answered without thinking, as the API's
  ``disabled`` (no thinking block; reasoning a model writes anyway is
  dropped and counted), and reported: in the ``missive-ignored`` header
  (a 400 in strict mode, as every ignored part:
  :meth:`missive.messages.prepare.Notes.ignore`) and the log;
* ``adaptive`` and ``between_tools`` need no capability
  (:func:`missive.messages.capabilities.check_request`), and
  ``output_config.effort`` only sets a reasoning level where a model takes
  one (:mod:`missive.driver.thinking`): nothing else about thinking can
  refuse such a request.

``alias_thinking = "refuse"``, or a request naming the model's id, keeps
the 400 of :func:`~missive.messages.capabilities.check_request`.
"""

from __future__ import annotations

from ..config.schema import AliasThinking
from ..driver.capabilities import Capabilities
from ..protocol.schema.request import CountTokensRequest

__all__ = ["fit_thinking"]


def fit_thinking(
    req: CountTokensRequest,
    caps: Capabilities,
    *,
    model: str,
    alias: str | None,
    policy: AliasThinking,
) -> tuple[CountTokensRequest, list[str]]:
    """``req`` as the model answers it, and the ``missive-ignored`` entries
    for what was left out (see the module doc).

    Args:
        model: the configured model's id.
        alias: the client's model id when it matched one of the aliases
            (None: the request named a configured model).
        policy: the model's ``alias_thinking``.
    """
    thinking = req.thinking
    if alias is None or policy != "drop" or caps.thinking:
        return req, []
    if thinking is None or thinking.type != "enabled":
        return req, []
    note = (
        f'thinking (type "enabled": model {model} does not reason; asked as "{alias}"; '
        "answered without thinking)"
    )
    return req.model_copy(update={"thinking": None}), [note]
