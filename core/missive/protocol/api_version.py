"""The ``anthropic-version`` request header.

The API requires it and answers a value that is not one of its versions
with a 400 ``invalid_request_error``: ``anthropic-version: "X" is not a valid
version`` (its wording as clients quote it, e.g. decolua/9router#1227 for a
duplicated header, ``"2023-06-01, 2023-06-01"``; an invented date such as
``2024-10-22`` is refused too, sseshachala/conductai#2179). Its versions are
``2023-01-01``, ``2023-06-01`` and ``2026-10-21`` (Anthropic docs,
"Versions", https://platform.claude.com/docs/en/api/versioning; SDK 2.x
sends ``2026-10-21``, Claude Code and opencode ``2023-06-01``).

Missive answers every version alike, so it checks the header only as far as
a mistake is certain:

* absent or empty: accepted (contract section 1: curl users and
  OpenAI-style clients send none);
* one of the versions: accepted;
* a calendar date after the newest version known here: a version newer than
  this server may be real, so it is accepted and reported as ignored
  (``missive-ignored``; a 400 in strict mode), never refused: an SDK
  upgrade must not break against an older Missive;
* anything else (not a ``YYYY-MM-DD`` date, several values, a date that the
  API's published history does not have): the API's 400.
"""

from __future__ import annotations

import re
from datetime import date

from .errors import InvalidRequestError

__all__ = ["VERSIONS", "check_api_version"]

#: The API's versions, oldest first (module doc).
VERSIONS = ("2023-01-01", "2023-06-01", "2026-10-21")

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _is_date(value: str) -> bool:
    if not _DATE.match(value):
        return False
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def check_api_version(value: str | None) -> list[str]:
    """Check an ``anthropic-version`` header's value (None: absent; a
    repeated header comes joined with ``", "``, as the API reads it).

    Returns:
        ``missive-ignored`` entries: one for a date later than every known
        version, else none.

    Raises:
        InvalidRequestError: the value is not a version (module doc).
    """
    if value is None or not value.strip() or value in VERSIONS:
        return []
    if _is_date(value) and value > VERSIONS[-1]:
        return [f"anthropic-version (version {value} is newer than this server knows: answered alike)"]
    shown = value if len(value) <= 100 else value[:100] + "..."
    raise InvalidRequestError(
        f'anthropic-version: "{shown}" is not a valid version (versions: {", ".join(VERSIONS)}; '
        "send one of them, or leave the header out)"
    )
