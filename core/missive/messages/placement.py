"""Request fields about where and how fast a request runs, and who it is for.

The API (SDK 2.15 ``MessageCreateParams`` docstrings): ``speed``
(``"standard"`` or ``"fast"``: "high output-tokens-per-second inference"),
``inference_geo`` (the geographic region for inference), and the headers the
SDK sends for its ``user_profile_id`` (``anthropic-user-profile-id``: "the
user profile ID to attribute this request to") and ``workspace_id``
(``anthropic-workspace-id``: selects the workspace of a credential that can
act on several). A Missive server runs its models where it runs, at the one
speed they have, for one organisation and workspace: ``speed: "standard"``
and a missing field are what it does anyway; anything else is accepted and
reported as ignored with the reason (the ``missive-ignored`` header; a 400
in strict mode, :meth:`missive.messages.prepare.Notes.ignore`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ignored_routing", "HEADER_REASONS"]

#: Headers the SDK sends for request parameters, and why Missive does not act on them.
HEADER_REASONS = {
    "anthropic-user-profile-id": "no user profiles: requests are not attributed or billed",
    "anthropic-workspace-id": "one workspace per server",
}


def ignored_routing(req: Any, headers: Mapping[str, str]) -> list[str]:
    """The ``missive-ignored`` entries for these fields and headers (names
    in lower case) of a request."""
    found: list[str] = []
    if getattr(req, "speed", None) == "fast":
        found.append("speed (no fast mode: the model runs at its one speed)")
    if getattr(req, "inference_geo", None) is not None:
        found.append("inference_geo (inference runs where this server runs)")
    for header, reason in HEADER_REASONS.items():
        if headers.get(header):
            found.append(f"{header} ({reason})")
    return found
