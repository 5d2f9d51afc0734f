"""Prometheus metrics, served by ``GET /metrics`` (docs/operations.md).

Names follow vLLM's where the same thing is measured, with the ``missive:``
prefix and vLLM's ``model_name`` label (the configured model id; ``""`` for
a request that named no served model), so dashboards and alerts written for
vLLM carry over. Each app has its own :class:`~prometheus_client.CollectorRegistry`
(never the process-wide default), so several apps in one process do not
collide.

Two kinds of metric:

* per request, from each finished :class:`~missive.serving.record.RequestRecord`
  (:meth:`Metrics.observe`): counters of requests, tokens and media blocks,
  histograms of times;
* the state at scrape time (:class:`LoadCollector`): requests running and
  waiting per model (:mod:`missive.serving.admission`), the health of each
  replica of a remote backend (:mod:`missive.remote.replicas`), which models are
  loaded and how often they were loaded and unloaded (:mod:`missive.models.residency`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from ..remote.replicas import redact_url

if TYPE_CHECKING:
    from ..models.table import ModelTable
    from ..serving.admission import Admission
    from ..serving.record import RequestRecord

__all__ = ["Metrics", "LoadCollector", "PREFIX", "CONTENT_TYPE"]

PREFIX = "missive:"
#: Prometheus' text format 0.0.4, whatever the scraper's ``accept`` prefers:
#: prometheus_client's OpenMetrics encoder (0.26) escapes the ``:`` of the
#: sample names to ``_`` while keeping it in ``# TYPE``, which would rename
#: every series; the text format keeps the names as they are.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
MODEL = "model_name"

# fmt: off
# vLLM's buckets (vllm/v1/metrics/loggers.py), so quantiles compare.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)
REQUEST_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)
# fmt: on
# Queue waits are often zero or a few milliseconds: finer buckets below vLLM's 0.3 s.
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, *REQUEST_BUCKETS)
#: How the workers' scrape-time gauges combine (:mod:`missive.server.workers`;
#: ``prometheus_client``'s multiprocess modes): a replica or a model counts as
#: up while every worker has it up; others (requests running, waiting) add up.
SHARED_GAUGE_MODES = {f"{PREFIX}replica_healthy": "livemin", f"{PREFIX}model_loaded": "livemin"}


class Metrics:
    """The metrics of one app (see the module doc).

    Args:
        models: the served models (for the state gauges).
        admission: the per-model gates (running and waiting counts).
        shared_dir: several workers serve one port (:mod:`missive.server.workers`):
            the directory of ``prometheus_client``'s multiprocess mode. Every
            worker's counters and histograms go to files there, and
            :meth:`exposition` merges them all; the state gauges are each
            worker's :meth:`publish_load`, summed. Must be set before any
            metric of the process records a value (it switches
            ``prometheus_client`` to shared values for the process).
    """

    def __init__(self, models: ModelTable, admission: Admission, shared_dir: str | None = None) -> None:
        # No ``*_created`` series: one more per labelled child, which nothing
        # here reads. prometheus_client has this switch for the process only.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated in prometheus_client
        self.shared_dir = shared_dir
        if shared_dir is not None:
            values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        r, m = self.registry, [MODEL]
        self.requests = Counter(
            f"{PREFIX}requests",
            "HTTP requests to the API, by model, route, status and error type "
            "(error_type is empty for a success).",
            [MODEL, "endpoint", "status", "error_type"],
            registry=r,
        )
        self.request_success = Counter(
            f"{PREFIX}request_success",
            "Messages that ended without an error, by stop reason.",
            [MODEL, "finished_reason"],
            registry=r,
        )
        self.prompt_tokens = Counter(
            f"{PREFIX}prompt_tokens",
            "Prompt tokens of started messages (input, cache read and cache creation tokens together).",
            m,
            registry=r,
        )
        self.prompt_tokens_cached = Counter(
            f"{PREFIX}prompt_tokens_cached",
            "Prompt tokens served from the prefix cache (cache_read_input_tokens).",
            m,
            registry=r,
        )
        self.generation_tokens = Counter(
            f"{PREFIX}generation_tokens",
            "Output tokens of messages whose usage was sent.",
            m,
            registry=r,
        )
        self.time_to_first_token = Histogram(
            f"{PREFIX}time_to_first_token_seconds",
            "Seconds from a request's arrival to its first content event.",
            m,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.e2e_request_latency = Histogram(
            f"{PREFIX}e2e_request_latency_seconds",
            "Seconds from a message request's arrival to the end of its answer.",
            m,
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.request_queue_time = Histogram(
            f"{PREFIX}request_queue_time_seconds",
            "Seconds a message waited for one of its model's slots.",
            m,
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.request_decode_time = Histogram(
            f"{PREFIX}request_decode_time_seconds",
            "Seconds from a message's first content event to its last.",
            m,
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.time_per_output_token = Histogram(
            f"{PREFIX}time_per_output_token_seconds",
            "Mean seconds per output token after the first, one "
            "observation per message (1 / decode tokens per second).",
            m,
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.media_processed = Counter(
            f"{PREFIX}media_processed",
            "Image and document blocks processed, by kind (image, document).",
            ["kind"],
            registry=r,
        )
        self.routing_rules = Counter(
            f"{PREFIX}routing_rule",
            "Requests sent to a model by a [[routing.rules]] rule, by rule and the model it chose.",
            [MODEL, "rule"],
            registry=r,
        )
        self.fallbacks = Counter(
            f"{PREFIX}fallbacks",
            "Requests a model could not start (529, 429) and passed to the next model of "
            "its fallback chain, by model, fallback model and error type.",
            [MODEL, "fallback", "error_type"],
            registry=r,
        )
        self._load = LoadCollector(models, admission)
        if shared_dir is None:
            self.registry.register(self._load)
        # With shared_dir: the scrape-time metrics as shared gauges and
        # counters, made on first publication; each counter's last value.
        self._shared: dict[str, Gauge | Counter] = {}
        self._published: dict[tuple[str, tuple[str, ...]], float] = {}
        from ..batches.metrics import BatchMetrics

        #: The Message Batches' own metrics (:mod:`missive.batches.metrics`;
        #: batches are off with several workers, :mod:`missive.server.workers`).
        self.batches = BatchMetrics(self.registry, models, admission)

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request (probes and ``/metrics`` itself are not counted)."""
        if record.quiet:
            return
        model = record.model
        self.requests.labels(model, record.endpoint, str(record.status), record.error_type or "").inc()
        for model_from, model_to, error_type in record.fallbacks:
            self.fallbacks.labels(model_from, model_to, error_type).inc()
        if record.rule is not None:
            self.routing_rules.labels(model, record.rule).inc()
        for kind, count in record.media.items():
            self.media_processed.labels(kind).inc(count)
        if record.queue_seconds is not None:
            self.request_queue_time.labels(model).observe(record.queue_seconds)
        if not record.generated:
            return
        prompt = [record.input_tokens, record.cache_read_input_tokens, record.cache_creation_input_tokens]
        self.prompt_tokens.labels(model).inc(sum(t or 0 for t in prompt))
        self.prompt_tokens_cached.labels(model).inc(record.cache_read_input_tokens or 0)
        if record.output_tokens is not None:
            self.generation_tokens.labels(model).inc(record.output_tokens)
        if record.stop_reason is not None and record.error_type is None:
            self.request_success.labels(model, record.stop_reason).inc()
        if record.duration is not None:
            self.e2e_request_latency.labels(model).observe(record.duration)
        first, last = record.first_token_at, record.last_token_at
        if first is not None:
            self.time_to_first_token.labels(model).observe(first - record.started)
        if first is not None and last is not None:
            self.request_decode_time.labels(model).observe(last - first)
            if record.output_tokens is not None and record.output_tokens > 1:
                self.time_per_output_token.labels(model).observe((last - first) / (record.output_tokens - 1))

    def publish_load(self) -> None:
        """Write this worker's scrape-time metrics (requests running and
        waiting, replica health, model residency) to the shared files (with
        ``shared_dir`` only; every :data:`missive.server.workers.PUBLISH_INTERVAL`
        seconds and before each exposition). Gauges are summed over the
        workers (:data:`SHARED_GAUGE_MODES`), counters add up."""
        if self.shared_dir is None:
            return
        for family in self._load.collect():
            for sample in family.samples:
                metric = self._shared.get(family.name)
                if metric is None:
                    metric = self._shared[family.name] = self._shared_metric(family, list(sample.labels))
                label_values = tuple(sample.labels.values())
                child = metric.labels(*label_values)
                if isinstance(child, Gauge):
                    child.set(sample.value)
                    continue
                key = (family.name, label_values)
                delta = sample.value - self._published.get(key, 0.0)
                if delta > 0:
                    child.inc(delta)
                self._published[key] = sample.value

    @staticmethod
    def _shared_metric(family: Metric, labels: list[str]) -> Gauge | Counter:
        if family.type == "counter":
            return Counter(family.name, family.documentation, labels, registry=None)
        mode = SHARED_GAUGE_MODES.get(family.name, "livesum")
        return Gauge(family.name, family.documentation, labels, registry=None, multiprocess_mode=mode)  # type: ignore[arg-type]

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (:data:`CONTENT_TYPE`);
        with ``shared_dir``, every worker's metrics together."""
        if self.shared_dir is None:
            return generate_latest(self.registry)
        self.publish_load()
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.shared_dir)  # type: ignore[no-untyped-call]
        return generate_latest(merged)


class LoadCollector(Collector):
    """Gauges read at scrape time: ``missive:num_requests_running`` and
    ``missive:num_requests_waiting`` per model (slots held and requests
    queued, :mod:`missive.serving.admission`), ``missive:replica_healthy`` per
    replica of a remote model (1 healthy, 0 out of rotation),
    ``missive:model_loaded`` per model (1 loaded, 0 not: lazy or unloaded);
    counter ``missive:replica_routed_total`` per replica and reason
    (:mod:`missive.routing.policy`);
    counters ``missive:model_loads_total`` (start-up and on demand) and
    ``missive:model_unloads_total`` by ``reason`` (``idle``, ``memory``);
    the prompt cache's disk tier per model (:mod:`missive.engine.disk_cache`):
    counters ``missive:prompt_cache_disk_{hits,misses,writes,corrupt,evictions}_total``,
    gauges ``missive:prompt_cache_disk_bytes`` and ``_entries``;
    counters ``missive:spec_decode_num_draft_tokens_total`` and
    ``missive:spec_decode_num_accepted_tokens_total`` per model that decodes
    speculatively (vLLM's names: draft tokens verified, and accepted)."""

    def __init__(self, models: ModelTable, admission: Admission) -> None:
        self.models = models
        self.admission = admission

    def _families(
        self,
    ) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}num_requests_running",
                "Messages holding a slot of their model (generating).",
                labels=[MODEL],
            ),
            GaugeMetricFamily(
                f"{PREFIX}num_requests_waiting", "Messages waiting for a slot of their model.", labels=[MODEL]
            ),
            GaugeMetricFamily(
                f"{PREFIX}replica_healthy",
                "1 while a replica of a remote backend is in "
                "rotation, 0 while it is out (failed, being probed).",
                labels=[MODEL, "replica"],
            ),
            CounterMetricFamily(
                f"{PREFIX}replica_routed",
                "Generation requests sent to a replica of a remote "
                "backend, by why its replica policy chose it: prefix (it held the longest "
                "prefix), session (the session's replica), least_outstanding.",
                labels=[MODEL, "replica", "route"],
            ),
        )

    def _residency(self) -> tuple[GaugeMetricFamily, CounterMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}model_loaded",
                "1 while a model is loaded, 0 while it is not (lazy, or unloaded when idle or for memory).",
                labels=[MODEL],
            ),
            CounterMetricFamily(
                f"{PREFIX}model_loads", "Times a model was loaded (at start-up or on demand).", labels=[MODEL]
            ),
            CounterMetricFamily(
                f"{PREFIX}model_unloads",
                "Times a model was unloaded, by reason: idle "
                "(idle_unload) or memory (server.memory_budget_mib).",
                labels=[MODEL, "reason"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()
        yield from self._residency()
        yield from self._speculation()

    def collect(self) -> Iterator[Metric]:
        loaded, loads, unloads = self._residency()
        for model_id in self.models.drivers:
            loaded.add_metric([model_id], 1 if self.models.loaded(model_id) else 0)
            loads.add_metric([model_id], self.models.loads[model_id])
        for (model_id, reason), count in sorted(self.models.unloads.items()):
            unloads.add_metric([model_id, reason], count)
        yield loaded
        yield loads
        yield unloads
        running, waiting, healthy, routed = self._families()
        for model_id, driver in self.models.drivers.items():
            gate = self.admission.gates.get(model_id)
            running.add_metric([model_id], gate.running if gate else 0)
            waiting.add_metric([model_id], gate.waiting if gate else 0)
            pool = driver.replica_pool()
            for replica in pool.replicas if pool is not None else ():
                healthy.add_metric([model_id, redact_url(replica.url)], 1 if replica.healthy else 0)
                for reason, count in sorted(replica.routed.items()):
                    routed.add_metric([model_id, redact_url(replica.url), reason], count)
        yield running
        yield waiting
        yield healthy
        yield routed
        yield from self._disk_tier()
        yield from self._speculation()

    def _speculation(self) -> Iterator[Metric]:
        drafted = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_draft_tokens",
            "Draft tokens a model verified (speculative decoding).",
            labels=[MODEL],
        )
        accepted = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_accepted_tokens",
            "Draft tokens the model accepted (speculative decoding).",
            labels=[MODEL],
        )
        for model_id, driver in self.models.drivers.items():
            counts = driver.counters()
            if "spec_decode_draft_tokens" in counts:
                drafted.add_metric([model_id], counts["spec_decode_draft_tokens"])
                accepted.add_metric([model_id], counts.get("spec_decode_accepted_tokens", 0))
        yield drafted
        yield accepted

    def _disk_tier(self) -> Iterator[Metric]:
        """The prompt cache's disk tier of each model that has one now."""
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for name, what in _DISK_COUNTERS.items():
            families[name] = CounterMetricFamily(f"{PREFIX}prompt_cache_disk_{name}", what, labels=[MODEL])
        for name, what in _DISK_GAUGES.items():
            families[name] = GaugeMetricFamily(f"{PREFIX}prompt_cache_disk_{name}", what, labels=[MODEL])
        for model_id, driver in self.models.drivers.items():
            for name, value in driver.prompt_cache_disk().items():
                if name in families:
                    families[name].add_metric([model_id], value)
        yield from families.values()


_DISK_COUNTERS = {
    "hits": "Prompt states read back from the prompt cache's disk tier and restored.",
    "misses": "Sequences for which the disk tier held no better state than the slots or RAM.",
    "writes": "Prompt states written to the disk tier.",
    "corrupt": "Disk-tier files dropped: bad header, another build or layout, truncated, "
    "or a wrong checksum.",
    "evictions": "Disk-tier files deleted, least recently used first, to stay within its bytes or files.",
}
_DISK_GAUGES = {
    "bytes": "Bytes of the prompt cache's disk-tier files.",
    "entries": "Files in the prompt cache's disk tier.",
}
