"""The Message Batches' metrics, in the app's registry (docs/operations.md#metrics).

Counters (from the runner and each batch request's record):

* ``missive:batch_requests_total{model_name, result}``: results written
  (``succeeded``, ``errored``, ``canceled``, ``expired``);
* ``missive:batch_preemptions_total{model_name}``: batch requests stopped so
  that an interactive request could have their slot (they run again);
* ``missive:batch_prompt_tokens_total`` / ``missive:batch_generation_tokens_total``
  ``{model_name}``: the tokens of batch requests that ran to their end.

Gauges read at scrape time:

* ``missive:batch_requests_running{model_name}``: slots held by batch requests;
* ``missive:batch_requests_pending{model_name}``: requests without a result
  yet, running ones included;
* ``missive:batches{processing_status}``: stored batches by status.

Batch requests are kept out of the per-request metrics of
:mod:`missive.server.metrics` (``missive:requests_total``, latencies): those describe
what interactive clients see.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..models.table import ModelTable
    from ..serving.admission import Admission
    from ..serving.record import RequestRecord
    from .service import Batches

__all__ = ["BatchMetrics"]

PREFIX = "missive:"
MODEL = "model_name"
STATUSES = ("in_progress", "canceling", "ended")


class BatchMetrics:
    """See the module doc.

    Args:
        registry: the app's registry.
        models, admission: for the running gauge.
    """

    def __init__(self, registry: CollectorRegistry, models: ModelTable, admission: Admission) -> None:
        self.results = Counter(
            f"{PREFIX}batch_requests",
            "Message batch requests given a result, by result type.",
            [MODEL, "result"],
            registry=registry,
        )
        self.preemptions = Counter(
            f"{PREFIX}batch_preemptions",
            "Message batch requests stopped to give their slot to an interactive "
            "request (they run again later).",
            [MODEL],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            f"{PREFIX}batch_prompt_tokens",
            "Prompt tokens of message batch requests that ran to their end.",
            [MODEL],
            registry=registry,
        )
        self.generation_tokens = Counter(
            f"{PREFIX}batch_generation_tokens",
            "Output tokens of message batch requests that ran to their end.",
            [MODEL],
            registry=registry,
        )
        self._collector = _BatchLoad(models, admission)
        registry.register(self._collector)

    def attach(self, batches: Batches) -> None:
        """Read the pending and status gauges from ``batches``."""
        self._collector.batches = batches

    def count(self, model: str, kind: str) -> None:
        """One result written (``kind`` a result type) or one preemption (``"preempted"``)."""
        if kind == "preempted":
            self.preemptions.labels(model).inc()
        else:
            self.results.labels(model, kind).inc()

    def observe(self, record: RequestRecord) -> None:
        """The tokens of one finished batch request."""
        if not record.generated or record.stop_reason is None:
            return
        prompt = [record.input_tokens, record.cache_read_input_tokens, record.cache_creation_input_tokens]
        self.prompt_tokens.labels(record.model).inc(sum(t or 0 for t in prompt))
        if record.output_tokens is not None:
            self.generation_tokens.labels(record.model).inc(record.output_tokens)


class _BatchLoad(Collector):
    def __init__(self, models: ModelTable, admission: Admission) -> None:
        self.models = models
        self.admission = admission
        self.batches: Batches | None = None

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily(
                f"{PREFIX}batch_requests_running",
                "Slots of their model held by message batch requests.",
                labels=[MODEL],
            ),
            GaugeMetricFamily(
                f"{PREFIX}batch_requests_pending",
                "Message batch requests without a result yet (running ones included).",
                labels=[MODEL],
            ),
            GaugeMetricFamily(
                f"{PREFIX}batches",
                "Stored message batches by processing_status.",
                labels=["processing_status"],
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        running, pending, statuses = self._families()
        summary = self.batches.summary if self.batches is not None else {}
        waiting = summary.get("pending", {})
        for model_id in self.models.drivers:
            gate = self.admission.gates.get(model_id)
            running.add_metric([model_id], gate.background if gate else 0)
            pending.add_metric([model_id], waiting.get(model_id, 0))
        counts = summary.get("batches", {})
        for status in STATUSES:
            statuses.add_metric([status], counts.get(status, 0))
        yield running
        yield pending
        yield statuses
