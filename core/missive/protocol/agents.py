"""Which agent of a client sent a request: Claude Code's subagent headers.

Claude Code 2.1.139 and later name the agent behind each request made by a
subagent (the Agent/Task tool) in two headers (Claude Code's gateway
protocol reference, https://code.claude.com/docs/en/llm-gateway-protocol,
"Request headers": headers a gateway may consume for routing and
attribution):

* ``x-claude-code-agent-id``: the subagent's id, the same on every request
  of that subagent for its lifetime;
* ``x-claude-code-parent-agent-id``: the id of the subagent that spawned it,
  on a nested subagent's requests.

The main conversation sends neither, and a subagent it spawned directly
sends only its own id (observed on the wire: the requests of a subagent
differ from its parent's in ``x-claude-code-agent-id`` alone, and both carry
the parent's ``x-claude-code-session-id``; anthropics/claude-code#49204 asked
for them with "absent for main"). So a request is a subagent's when it
carries either header. The values are the client's text: cut to
:data:`MAX_CHARS`, used to tell agents apart, never trusted as anything more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Agent", "NO_AGENT", "agent_of", "AGENT_HEADER", "PARENT_AGENT_HEADER", "MAX_CHARS"]

AGENT_HEADER = "x-claude-code-agent-id"
PARENT_AGENT_HEADER = "x-claude-code-parent-agent-id"
#: The most characters of an id kept (Claude Code's are far shorter).
MAX_CHARS = 128


@dataclass(frozen=True)
class Agent:
    """The agent behind a request (see the module doc).

    Attributes:
        id: ``x-claude-code-agent-id``, None when absent or blank.
        parent_id: ``x-claude-code-parent-agent-id``, None when absent or blank.
    """

    id: str | None = None
    parent_id: str | None = None

    @property
    def subagent(self) -> bool:
        """The request was made by a subagent (it names an agent or a parent agent)."""
        return self.id is not None or self.parent_id is not None


#: A request no subagent made (the main conversation, a batch, another client).
NO_AGENT = Agent()


def _clean(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value[:MAX_CHARS] if value else None


def agent_of(headers: Mapping[str, str] | Any | None) -> Agent:
    """The agent named by a request's ``headers`` (a mapping with lower-case
    names, or Werkzeug's ``Headers``); None (a batch's request): no agent."""
    if headers is None:
        return NO_AGENT
    return Agent(_clean(headers.get(AGENT_HEADER)), _clean(headers.get(PARENT_AGENT_HEADER)))
