"""Metrics per key, in the app's registry (docs/operations.md#metrics).

Counters labelled by ``key_name`` (the key's name, never the key nor its
hash; ``""`` on a server with no key configured) and ``model_name``:

* ``missive:key_requests_total{key_name, model_name, status}``: requests
  of the key (every API request once it is authenticated, and each request
  of its message batches, status 200 or the error's);
* ``missive:key_input_tokens_total``, ``missive:key_cache_creation_input_tokens_total``,
  ``missive:key_cache_read_input_tokens_total``, ``missive:key_output_tokens_total``
  ``{key_name, model_name}``: the usage its answers reported, field by field;
* ``missive:key_rate_limited_total{key_name, limit}``: its requests refused
  with 429, by the limit that refused them (:mod:`.limits`).

A request refused with 401 has no key and is counted only in
``missive:requests_total``. With several workers the counters are shared as
every other counter is (:mod:`missive.server.metrics`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

if TYPE_CHECKING:
    from ..serving.record import RequestRecord

__all__ = ["KeyMetrics", "TOKEN_FIELDS"]

PREFIX = "missive:"
KEY = "key_name"
MODEL = "model_name"
#: The usage fields counted, as the API names them.
TOKEN_FIELDS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")


class KeyMetrics:
    """See the module doc. ``registry``: the app's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            f"{PREFIX}key_requests",
            "API requests by key (its name), model and HTTP status, batch requests included.",
            [KEY, MODEL, "status"],
            registry=registry,
        )
        self.tokens = {
            name: Counter(
                f"{PREFIX}key_{name}",
                f"The {name} of the answers to a key's requests, by model.",
                [KEY, MODEL],
                registry=registry,
            )
            for name in TOKEN_FIELDS
        }
        self.rate_limited = Counter(
            f"{PREFIX}key_rate_limited",
            "A key's requests refused with 429 rate_limit_error, by the limit reached.",
            [KEY, "limit"],
            registry=registry,
        )

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request of a key (probes and ``/metrics`` are not counted)."""
        if record.key is None or record.quiet:
            return
        self.requests.labels(record.key, record.model, str(record.status)).inc()
        if not record.generated:
            return
        for name, counter in self.tokens.items():
            value = getattr(record, name)
            if value:
                counter.labels(record.key, record.model).inc(value)

    def refused(self, key_name: str, limit: str) -> None:
        """Count one 429 of ``key_name`` by ``limit``."""
        self.rate_limited.labels(key_name, limit).inc()
