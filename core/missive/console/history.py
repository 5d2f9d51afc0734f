"""What the console shows of the past: recent requests and counters over the last hour.

Kept in memory by each server process, from the same finished
:class:`~missive.serving.record.RequestRecord` objects the metrics and the access
log are made of (:meth:`History.observe`), so the console needs no
Prometheus:

* :class:`RecentRequests`: the last :data:`RECENT` requests, each as its
  access-log fields (:meth:`~missive.serving.record.RequestRecord.fields`) plus its
  id, wall-clock time and the ``missive-ignored`` list. Never prompt or
  answer text: that exists only in ``server.capture_dir`` files;
* :class:`Series`: per model, one :class:`Bucket` of :data:`BUCKET_SECONDS`
  seconds for the last :data:`WINDOW_SECONDS` (an hour): requests, errors,
  prompt, cached and output tokens, a sample of times to first token (for
  the p50 and p95) and the most requests seen waiting and running
  (:meth:`Series.sample`, called every few seconds with the admission
  gates' counts).

Probes, ``/metrics`` and the console's own calls (the record's ``quiet``)
are left out, as the metrics leave them out. With several worker processes
each keeps its own (the console shows the worker that answered it).
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..serving.record import RequestRecord

__all__ = [
    "History",
    "RecentRequests",
    "Series",
    "Bucket",
    "RECENT",
    "BUCKET_SECONDS",
    "WINDOW_SECONDS",
    "quantile",
]

#: Requests kept for the "Recent requests" view.
RECENT = 1000
#: Width of one graph point, seconds.
BUCKET_SECONDS = 10
#: How far back the graphs go, seconds.
WINDOW_SECONDS = 3600
#: What of a request's client-chosen text an entry keeps: the path's first
#: characters, the first ignored items and the first characters of each (a
#: body with thousands of unknown fields must not fill the memory).
PATH_CHARS = 256
IGNORED_ITEMS = 50
IGNORED_CHARS = 200
#: Times to first token kept per bucket and model; beyond it a uniform
#: reservoir sample (Vitter's algorithm R) stands for them all.
TTFT_SAMPLES = 512


def quantile(sorted_values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ascending ``sorted_values``, linearly
    interpolated between the two nearest ranks (numpy's default, "type 7"
    of Hyndman and Fan); None for no values."""
    if not sorted_values:
        return None
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


class RecentRequests:
    """The last ``size`` finished requests, newest last.

    Each entry is a dict: ``seq`` (a number increasing by one per request,
    for paging), ``request_id``, ``time`` (Unix seconds of its arrival),
    the access-log fields (``method``, ``path``, ``status``, ``endpoint``,
    ``model``, token counts, ``ttft_s``, ``duration_s``, ``stop_reason``,
    ``error_type``, ``key``: the name of its API key...) and ``ignored``
    (client text cut to :data:`PATH_CHARS`, :data:`IGNORED_ITEMS` and
    :data:`IGNORED_CHARS`). Beside it is kept who sent it (the key's name,
    :attr:`~missive.serving.record.RequestRecord.key`: None when no key was
    accepted), for :meth:`find`.
    """

    def __init__(self, size: int = RECENT) -> None:
        self._entries: deque[tuple[dict[str, Any], str | None]] = deque(maxlen=size)
        self._seq = 0

    def add(self, record: RequestRecord, now: float) -> dict[str, Any]:
        """Keep ``record`` (finished at Unix time ``now``); returns its entry."""
        self._seq += 1
        ignored = [item[:IGNORED_CHARS] for item in record.ignored[:IGNORED_ITEMS]]
        if len(record.ignored) > IGNORED_ITEMS:
            ignored.append(f"... ({len(record.ignored)} in all)")
        entry: dict[str, Any] = {
            "seq": self._seq,
            "request_id": record.request_id,
            "time": round(now - (record.duration or 0.0), 3),
            **record.fields(),
            "path": record.path[:PATH_CHARS],
            "model": record.model,  # always there: "" for a request that named no served model
            "ignored": ignored,
        }
        self._entries.append((entry, record.key))
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def find(self, request_id: str) -> tuple[dict[str, Any], str | None] | None:
        """The entry of ``request_id`` and the name of the key that sent it, if still kept."""
        for entry, identity in reversed(self._entries):
            if entry["request_id"] == request_id:
                return entry, identity
        return None

    def select(
        self, match: Callable[[dict[str, Any]], bool], limit: int, before: int | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` entries for which ``match`` holds, newest first;
        with ``before``, only those with a smaller ``seq`` (the next page)."""
        out: list[dict[str, Any]] = []
        for entry, _ in reversed(self._entries):
            if before is not None and entry["seq"] >= before:
                continue
            if match(entry):
                out.append(entry)
                if len(out) == limit:
                    break
        return out

    def values(self, key: str) -> list[str]:
        """The distinct values of ``key`` among the kept entries, sorted (for filters)."""
        return sorted({str(e[key]) for e, _ in self._entries if e.get(key) is not None})


@dataclass
class Bucket:
    """What one model did during one :data:`BUCKET_SECONDS` interval.

    Attributes:
        index: the interval: its start is ``index * BUCKET_SECONDS`` (Unix time).
        requests: requests finished in it; errors: those with an error type.
        prompt_tokens: input, cache read and cache creation tokens of the
            messages started; cached_tokens: their cache reads.
        output_tokens: output tokens of the messages whose usage was sent.
        ttft: times to first token, seconds (at most :data:`TTFT_SAMPLES`).
        ttft_seen: how many there were (the reservoir's denominator).
        waiting_max, running_max: the most requests seen waiting for an
            admission permit, and holding one, when sampled (None: not sampled).
    """

    index: int
    requests: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    ttft: list[float] = field(default_factory=list)
    ttft_seen: int = 0
    waiting_max: int | None = None
    running_max: int | None = None

    def add_ttft(self, value: float, rng: random.Random) -> None:
        self.ttft_seen += 1
        if len(self.ttft) < TTFT_SAMPLES:
            self.ttft.append(value)
            return
        at = rng.randrange(self.ttft_seen)
        if at < TTFT_SAMPLES:
            self.ttft[at] = value


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


class Series:
    """Per-model buckets over the last :data:`WINDOW_SECONDS` (see the module doc)."""

    def __init__(self, width: int = BUCKET_SECONDS, window: int = WINDOW_SECONDS) -> None:
        self.width = width
        self.count = window // width
        self._models: dict[str, deque[Bucket]] = {}
        self._load: deque[Bucket] = deque()  # every model's waiting and running, added up at each sample
        self._rng = random.Random(0)

    def _bucket(self, model: str | None, now: float) -> Bucket:
        """The bucket of ``now`` for ``model`` (None: the load of all models)."""
        index = int(now // self.width)
        buckets = self._load if model is None else self._models.setdefault(model, deque())
        if not buckets or buckets[-1].index < index:
            buckets.append(Bucket(index))
            while buckets and buckets[0].index <= index - self.count:
                buckets.popleft()
            return buckets[-1]
        for bucket in reversed(buckets):  # a record finished a little late: its own interval
            if bucket.index == index:
                return bucket
            if bucket.index < index:
                break
        return buckets[-1]

    def observe(self, record: RequestRecord, now: float) -> None:
        """Count a finished request (at Unix time ``now``) under its model."""
        bucket = self._bucket(record.model, now)
        bucket.requests += 1
        if record.error_type is not None:
            bucket.errors += 1
        if not record.generated:
            return
        prompt = (record.input_tokens, record.cache_read_input_tokens, record.cache_creation_input_tokens)
        bucket.prompt_tokens += sum(t or 0 for t in prompt)
        bucket.cached_tokens += record.cache_read_input_tokens or 0
        bucket.output_tokens += record.output_tokens or 0
        if record.first_token_at is not None:
            bucket.add_ttft(record.first_token_at - record.started, self._rng)

    def sample(self, load: Iterable[tuple[str, int, int]], now: float) -> None:
        """Note each model's ``(model, waiting, running)`` counts at Unix
        time ``now``, and their sums (the load of all models)."""
        total_waiting = total_running = 0
        for model, waiting, running in load:
            self._note_load(self._bucket(model, now), waiting, running)
            total_waiting += waiting
            total_running += running
        self._note_load(self._bucket(None, now), total_waiting, total_running)

    @staticmethod
    def _note_load(bucket: Bucket, waiting: int, running: int) -> None:
        bucket.waiting_max = _max(bucket.waiting_max, waiting)
        bucket.running_max = _max(bucket.running_max, running)

    def models(self) -> list[str]:
        """The models with buckets, sorted (``""``: requests that named no served model)."""
        return sorted(self._models)

    def _merged(self, model: str | None, now: float) -> Iterator[Bucket]:
        """The window's buckets of ``model`` (None: every model added
        together, with the load sums of :meth:`sample`), oldest first, with
        empty ones where nothing happened."""
        first = int(now // self.width) - self.count + 1
        chosen = [self._models.get(model, deque())] if model is not None else list(self._models.values())
        by_index: dict[int, Bucket] = {}
        for buckets in chosen:
            for b in buckets:
                if b.index < first:
                    continue
                into = by_index.setdefault(b.index, Bucket(b.index))
                into.requests += b.requests
                into.errors += b.errors
                into.prompt_tokens += b.prompt_tokens
                into.cached_tokens += b.cached_tokens
                into.output_tokens += b.output_tokens
                into.ttft.extend(b.ttft)
                if model is not None:
                    into.waiting_max, into.running_max = b.waiting_max, b.running_max
        if model is None:
            for b in self._load:
                if b.index >= first:
                    into = by_index.setdefault(b.index, Bucket(b.index))
                    into.waiting_max, into.running_max = b.waiting_max, b.running_max
        for index in range(first, first + self.count):
            yield by_index.get(index) or Bucket(index)

    def points(self, model: str | None, now: float) -> list[dict[str, Any]]:
        """The graph points of ``model`` (None: all models), oldest first:
        ``t`` (the interval's start, Unix seconds), ``requests_per_s``,
        ``errors_per_s``, ``input_tokens_per_s`` (all prompt tokens),
        ``output_tokens_per_s``, ``cache_hit_ratio`` (cached over prompt
        tokens; None without prompt tokens), ``ttft_p50_s``, ``ttft_p95_s``
        (None without a first token), ``waiting_max``, ``running_max``
        (None where not sampled). Rates are per second of the interval."""
        out = []
        for b in self._merged(model, now):
            ttft = sorted(b.ttft)
            p50, p95 = quantile(ttft, 0.5), quantile(ttft, 0.95)
            out.append(
                {
                    "t": b.index * self.width,
                    "requests_per_s": b.requests / self.width,
                    "errors_per_s": b.errors / self.width,
                    "input_tokens_per_s": b.prompt_tokens / self.width,
                    "output_tokens_per_s": b.output_tokens / self.width,
                    "cache_hit_ratio": b.cached_tokens / b.prompt_tokens if b.prompt_tokens else None,
                    "ttft_p50_s": None if p50 is None else round(p50, 4),
                    "ttft_p95_s": None if p95 is None else round(p95, 4),
                    "waiting_max": b.waiting_max,
                    "running_max": b.running_max,
                }
            )
        return out


class History:
    """The console's memory of one server process: :class:`RecentRequests`
    and :class:`Series`, fed by :meth:`observe` (the app's request observer).

    Args:
        clock: Unix time now (``time.time``; tests give their own).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.recent = RecentRequests()
        self.series = Series()

    def observe(self, record: RequestRecord) -> None:
        """Take in one finished request (quiet ones are left out)."""
        if record.quiet:
            return
        now = self.clock()
        self.recent.add(record, now)
        self.series.observe(record, now)
