"""The client's session id, for slot and cache affinity.

Claude Code names its session in the ``x-claude-code-session-id`` header and
inside ``metadata.user_id`` (a JSON string with a ``session_id`` key in 2.x;
``user_<hash>_account_<uuid>_session_<uuid>`` before). Other clients may put
any string in ``metadata.user_id``; only a session found in one of these two
forms counts. The id only steers which cached prompt state a request
prefers when two serve it equally (:mod:`missive.engine.batcher`,
:mod:`missive.engine.host_cache`); it never changes what is reused, which is
always an exact token prefix, so naming another client's session gains
nothing but a tie.

A Claude Code subagent sends its parent's session id, and its own agent id
in ``x-claude-code-agent-id`` (:mod:`missive.protocol.agents`). Its
conversation is not its parent's: it has its own system prompt and turns,
and runs beside the parent, so sharing one affinity key would make the two
compete for one slot or replica, each evicting the other's cached prefix.
The key of a subagent's request is therefore its session and its agent id
(``<session>/agent/<agent id>``: the same for every request of that
subagent, another for each subagent, the session alone for the main
conversation); a subagent naming no session is keyed by its agent id alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..protocol.agents import agent_of

__all__ = ["session_of", "SESSION_HEADER"]

SESSION_HEADER = "x-claude-code-session-id"
_LEGACY = re.compile(r"_session_([A-Za-z0-9-]{8,64})$")
_MAX = 128


def _clean(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value[:_MAX] if value else None


def session_of(request: Any, headers: Mapping[str, str] | Any | None) -> str | None:
    """The affinity key of a request: its session id (the header first, then
    ``metadata.user_id``), with the subagent's id when a subagent sent it
    (see the module doc). ``headers``: the request's (a mapping, or
    Werkzeug's ``Headers``), None without an HTTP request (a batch)."""
    session = _session_id(request, headers)
    agent = agent_of(headers).id
    if agent is None:
        return session
    return f"agent/{agent}" if session is None else f"{session}/agent/{agent}"


def _session_id(request: Any, headers: Mapping[str, str] | Any | None) -> str | None:
    if headers is not None:
        found = _clean(headers.get(SESSION_HEADER))
        if found:
            return found
    metadata = getattr(request, "metadata", None)
    user_id = getattr(metadata, "user_id", None) if metadata is not None else None
    if not isinstance(user_id, str):
        return None
    if user_id.lstrip().startswith("{"):
        try:
            parsed = json.loads(user_id)
        except ValueError:
            return None
        return _clean(parsed.get("session_id")) if isinstance(parsed, dict) else None
    match = _LEGACY.search(user_id)
    return match.group(1) if match else None
