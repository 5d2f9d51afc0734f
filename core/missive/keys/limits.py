"""Limits per key on ``POST /v1/messages``: requests per minute, input and
output tokens per minute and per day, concurrent requests.

A request is admitted while each of its key's buckets holds at least one
request or token and its key has fewer than ``concurrent_requests``
answers running; admitting it takes one request. Its tokens are counted
when its answer ends, from the usage sent to the client: input tokens are
``input_tokens + cache_creation_input_tokens`` (the API: "cache_read_input_tokens
... do not count towards ITPM limits"), output tokens ``output_tokens``.
So a key may overshoot a token limit by the answers it had running; the
next request then waits until the bucket holds a token again.

Beyond a limit: 429 ``rate_limit_error`` with ``retry-after`` (whole
seconds until every exceeded bucket admits a request again; clients clamp
it to 60) and the API's rate-limit headers, which every admitted answer
carries too (Anthropic API docs, Rate limits, "Response headers"):

* ``anthropic-ratelimit-requests-limit`` / ``-remaining`` / ``-reset``;
* ``anthropic-ratelimit-input-tokens-*`` and ``-output-tokens-*``: the more
  restrictive (fewer remaining) of the per-minute and per-day limits set;
* ``anthropic-ratelimit-tokens-*``: "the most restrictive limit currently
  in effect" among all the token limits set;

``-limit`` is the bucket's capacity, ``-remaining`` what it holds now
(whole; never negative; exact, where the API rounds tokens to thousands),
``-reset`` the RFC 3339 time at which it is full again. Only the headers of
the limits a key has are sent. The buckets are shared by the workers
(:mod:`.buckets`) and kept in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

from ..protocol.errors import RateLimitError
from .buckets import Bucket, SharedTable, ceil_seconds
from .ring import Identity

__all__ = ["Limiter", "Ticket", "RateLimited", "HEADER_PREFIX", "PERIODS"]

HEADER_PREFIX = "anthropic-ratelimit-"
#: Each bucket's period, seconds.
PERIODS = {
    "requests_per_minute": 60.0,
    "input_tokens_per_minute": 60.0,
    "output_tokens_per_minute": 60.0,
    "input_tokens_per_day": 86400.0,
    "output_tokens_per_day": 86400.0,
}
_INPUT = ("input_tokens_per_minute", "input_tokens_per_day")
_OUTPUT = ("output_tokens_per_minute", "output_tokens_per_day")
_WHAT = {
    "requests_per_minute": "requests per minute",
    "input_tokens_per_minute": "input tokens per minute",
    "output_tokens_per_minute": "output tokens per minute",
    "input_tokens_per_day": "input tokens per day",
    "output_tokens_per_day": "output tokens per day",
}
#: Cells of one key: a level and a time per bucket, then the running count.
_RUNNING = 2 * len(PERIODS)
_CELLS = _RUNNING + 1
#: ``retry-after`` when only ``concurrent_requests`` refuses: when one of the
#: key's answers ends is not known.
CONCURRENT_RETRY = 1


class RateLimited(RateLimitError):
    """A 429 with the key's rate-limit ``headers`` (sent by the route) and
    the ``limit`` that refused it (the metrics' label)."""

    def __init__(self, message: str, *, retry_after: int, headers: dict[str, str], limit: str) -> None:
        super().__init__(message, retry_after=retry_after)
        self.headers = headers
        self.limit = limit


class Ticket:
    """An admitted request's part in its key's limits: its ``headers``, and
    :meth:`finish` when its answer ends."""

    def __init__(self, limiter: Limiter, identity: Identity, headers: dict[str, str]) -> None:
        self.limiter = limiter
        self.identity = identity
        self.headers = headers
        self._open = True

    def finish(self, input_tokens: int, output_tokens: int) -> None:
        """Count the answer's tokens and end its running count (once)."""
        if self._open:
            self._open = False
            self.limiter._finish(self.identity, input_tokens, output_tokens)


class Limiter:
    """The limits of every configured key (see the module doc).

    Args:
        identities: the configured keys (their ``row`` in the table).
        on_refused: ``(key name, limit field)`` for each 429 (the metrics).
    """

    def __init__(
        self,
        identities: list[Identity],
        on_refused: Callable[[str, str], None] = lambda k, f: None,
    ) -> None:
        self.table = SharedTable(len(identities) * _CELLS)
        self.on_refused = on_refused
        self._buckets: dict[int, dict[str, Bucket]] = {}
        for identity in identities:
            base = identity.row * _CELLS
            self._buckets[identity.row] = {
                name: Bucket(base + 2 * i, identity.limits[name], period)
                for i, (name, period) in enumerate(PERIODS.items())
                if name in identity.limits
            }

    def admit(self, identity: Identity) -> Ticket | None:
        """Admit one request of ``identity``: its ticket, or None for a key
        without limits.

        Raises:
            RateLimited: a limit is reached (429 with ``retry-after``).
        """
        if not identity.limits:
            return None
        buckets = self._buckets[identity.row]
        running_cell = identity.row * _CELLS + _RUNNING
        most = identity.limits.get("concurrent_requests")
        with self.table.locked() as cells:
            now = time.monotonic()
            levels = {name: bucket.level(cells, now) for name, bucket in buckets.items()}
            waits = {name: buckets[name].wait(level, 1.0) for name, level in levels.items() if level < 1.0}
            running = int(cells[running_cell])
            if most is not None and running >= most:
                waits["concurrent_requests"] = float(CONCURRENT_RETRY)
            if not waits:
                if "requests_per_minute" in buckets:
                    buckets["requests_per_minute"].take(cells, 1.0, now)
                    levels["requests_per_minute"] -= 1.0
                cells[running_cell] = running + 1
        headers = self._headers(buckets, levels)
        if not waits:
            return Ticket(self, identity, headers)
        limit = max(waits, key=lambda name: waits[name])
        retry = max(1, ceil_seconds(waits[limit]))
        self.on_refused(identity.name, limit)
        if limit == "concurrent_requests":
            message = (
                f"This request would exceed the rate limit of key '{identity.name}': {running} "
                f"requests running, its limit (keys.{identity.name}.concurrent_requests); retry when "
                "one ends"
            )
        else:
            message = (
                f"This request would exceed the rate limit of key '{identity.name}': "
                f"{identity.limits[limit]} {_WHAT[limit]} (keys.{identity.name}.{limit}); retry in "
                f"{retry} s. The anthropic-ratelimit-* response headers show the key's limits and "
                "what remains"
            )
        raise RateLimited(message, retry_after=retry, headers=headers, limit=limit)

    def _finish(self, identity: Identity, input_tokens: int, output_tokens: int) -> None:
        buckets = self._buckets[identity.row]
        running_cell = identity.row * _CELLS + _RUNNING
        with self.table.locked() as cells:
            now = time.monotonic()
            for names, amount in ((_INPUT, input_tokens), (_OUTPUT, output_tokens)):
                for name in names:
                    if name in buckets and amount > 0:
                        buckets[name].take(cells, float(amount), now)
            cells[running_cell] = max(0.0, cells[running_cell] - 1)

    @staticmethod
    def _headers(buckets: dict[str, Bucket], levels: dict[str, float]) -> dict[str, str]:
        wall = time.time()
        headers: dict[str, str] = {}

        def put(prefix: str, names: tuple[str, ...]) -> None:
            present = [name for name in names if name in buckets]
            if not present:
                return
            name = min(present, key=lambda n: (levels[n], -buckets[n].capacity))
            bucket, level = buckets[name], levels[name]
            headers[f"{HEADER_PREFIX}{prefix}-limit"] = str(bucket.capacity)
            headers[f"{HEADER_PREFIX}{prefix}-remaining"] = str(max(0, int(level)))
            headers[f"{HEADER_PREFIX}{prefix}-reset"] = _rfc3339(bucket.full_at(level, wall))

        put("requests", ("requests_per_minute",))
        put("tokens", _INPUT + _OUTPUT)
        put("input-tokens", _INPUT)
        put("output-tokens", _OUTPUT)
        return headers


def _rfc3339(seconds: float) -> str:
    """``seconds`` (Unix) as the API writes ``-reset``: whole seconds, UTC, rounded up."""
    return datetime.fromtimestamp(ceil_seconds(seconds), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
