"""What the server keeps of its responses: message threads
(:mod:`.thread`) and cache diagnostics (:mod:`.fingerprint`), in one
bounded in-memory store (:mod:`.store`), glued to ``POST /v1/messages`` by
:mod:`.keeper`; the thread errors the SDKs recover from are in
:mod:`.errors`. See docs/api-compatibility.md, "Message threads" and
"Cache diagnostics"."""

from __future__ import annotations

#: ``anthropic-beta`` values of the features this package implements (not
#: reported as ignored): message threads, and the cache diagnostics beta
#: older clients still send.
HANDLED_BETAS = frozenset({"message-threads-2026-08-12", "cache-diagnosis-2026-04-07"})

__all__ = ["HANDLED_BETAS"]
