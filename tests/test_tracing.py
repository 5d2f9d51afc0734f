"""OpenTelemetry spans continuing the client's W3C trace (``server.tracing``,
:mod:`missive.serving.tracing`), through the official SDK against the app
in process on the echo driver.

The app's spans are read back by an ``InMemorySpanExporter`` added to the
provider the app built (``OTEL_TRACES_EXPORTER=none``: nothing exported
otherwise). The client's ``traceparent`` is set by hand (``extra_headers``,
the SDK's own tracing off) and by the SDK's own tracing (its
``open_telemetry`` option with a provider of the test's).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from missive.config import ConfigError, ServerConfig
from missive.server.services import services
from missive.serving.tracing import build_tracing
from missive.testing import InProcessApp, in_process_app
from missive_echo import script

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SECRET = "zebra-quartz-prompt-words"  # prompt text that must appear in no span

CONFIG: dict[str, Any] = {
    "server": {"tracing": True},
    "models": {"echo": {"driver": "echo", "context_window": 1000, "aliases": ["claude-*"]}},
}
ENV = {"OTEL_TRACES_EXPORTER": "none", "OTEL_SDK_DISABLED": "false"}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[InProcessApp, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    with in_process_app(CONFIG, env=ENV) as app:
        tracing = services(app.app).tracing
        assert tracing is not None and tracing.owned
        tracing.provider.add_span_processor(SimpleSpanProcessor(exporter))
        yield app, exporter


@pytest.fixture
def exporter(server: tuple[InProcessApp, InMemorySpanExporter]) -> InMemorySpanExporter:
    server[1].clear()
    return server[1]


@pytest.fixture
def client(server: tuple[InProcessApp, InMemorySpanExporter]) -> anthropic.Anthropic:
    # The SDK's own tracing off: the traceparent is the test's.
    return server[0].sdk(open_telemetry=False)


def server_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    found = [span for span in exporter.get_finished_spans() if span.kind == SpanKind.SERVER]
    assert len(found) == 1, [span.name for span in exporter.get_finished_spans()]
    return found[0]


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> dict[str, ReadableSpan]:
    return {
        span.name: span
        for span in exporter.get_finished_spans()
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    }


def assert_no_prompt(exporter: InMemorySpanExporter) -> None:
    for span in exporter.get_finished_spans():
        assert SECRET not in json.dumps(dict(span.attributes or {}), default=str), span.name
        assert SECRET not in span.name
        assert not span.events


def test_message_continues_the_clients_trace(
    client: anthropic.Anthropic, exporter: InMemorySpanExporter
) -> None:
    message = client.messages.create(
        model="claude-test",
        max_tokens=50,
        messages=[{"role": "user", "content": f"hello {SECRET} world"}],
        extra_headers={"traceparent": TRACEPARENT, "tracestate": "vendor=x"},
    )
    assert message.content[0].type == "text"
    span = server_span(exporter)
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert span.parent is not None and span.parent.span_id == int(PARENT_ID, 16)
    assert span.parent.is_remote
    assert span.context.trace_state.get("vendor") == "x"
    assert span.name == "chat claude-test"
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "missive"
    assert attributes["gen_ai.request.model"] == "claude-test"
    assert attributes["gen_ai.response.model"] == "echo"  # the configured model that answered
    assert attributes["gen_ai.request.stream"] is False
    assert attributes["gen_ai.usage.input_tokens"] == message.usage.input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == message.usage.output_tokens == 3
    assert attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v1/messages"
    assert attributes["http.response.status_code"] == 200
    assert str(attributes["missive.request_id"]).startswith("req_")
    assert "error.type" not in attributes
    assert span.status.status_code == StatusCode.UNSET
    phases = children(exporter, span)
    assert set(phases) == {"missive.admission", "missive.prompt", "missive.generation"}
    assert span.start_time is not None and span.end_time is not None
    for phase in phases.values():
        assert phase.context.trace_id == span.context.trace_id
        assert phase.start_time is not None and phase.end_time is not None
        assert span.start_time <= phase.start_time <= phase.end_time <= span.end_time
    assert phases["missive.admission"].end_time == phases["missive.prompt"].start_time
    assert phases["missive.prompt"].end_time == phases["missive.generation"].start_time
    assert_no_prompt(exporter)


def test_cached_input_tokens_are_counted_in_input_tokens(
    client: anthropic.Anthropic, exporter: InMemorySpanExporter
) -> None:
    """gen_ai.usage.input_tokens includes the cached ones (the GenAI conventions' note on it)."""
    message = client.messages.create(
        model="echo",
        max_tokens=50,
        messages=[{"role": "user", "content": script({"text": "hi"}, cache_read_input_tokens=2)}],
        extra_headers={"traceparent": TRACEPARENT},
    )
    attributes = dict(server_span(exporter).attributes or {})
    assert message.usage.cache_read_input_tokens == 2
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 2
    assert attributes["gen_ai.usage.input_tokens"] == message.usage.input_tokens + 2


def test_stream_span(client: anthropic.Anthropic, exporter: InMemorySpanExporter) -> None:
    with client.messages.stream(
        model="echo",
        max_tokens=50,
        messages=[{"role": "user", "content": f"one two {SECRET}"}],
        extra_headers={"traceparent": TRACEPARENT},
    ) as stream:
        final = stream.get_final_message()
    span = server_span(exporter)
    attributes = dict(span.attributes or {})
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert attributes["gen_ai.request.stream"] is True
    assert attributes["gen_ai.usage.output_tokens"] == final.usage.output_tokens
    assert float(attributes["gen_ai.response.time_to_first_chunk"]) >= 0  # type: ignore[arg-type]
    assert set(children(exporter, span)) == {"missive.admission", "missive.prompt", "missive.generation"}
    assert_no_prompt(exporter)


def test_stream_ended_by_an_error_is_an_error_span(
    client: anthropic.Anthropic, exporter: InMemorySpanExporter
) -> None:
    body = script({"text": "a"}, {"error": {"type": "api_error", "message": "boom"}})
    with pytest.raises(anthropic.APIStatusError):
        with client.messages.stream(
            model="echo",
            max_tokens=50,
            messages=[{"role": "user", "content": body}],
            extra_headers={"traceparent": TRACEPARENT},
        ) as stream:
            stream.get_final_message()
    span = server_span(exporter)
    assert span.status.status_code == StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "api_error"


def test_client_error_is_recorded_but_not_a_server_error(
    client: anthropic.Anthropic, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(
            model="no-such-model",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"traceparent": TRACEPARENT},
        )
    span = server_span(exporter)
    attributes = dict(span.attributes or {})
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert attributes["http.response.status_code"] == 404
    assert attributes["error.type"] == "not_found_error"
    assert attributes["gen_ai.request.model"] == "no-such-model"
    assert span.status.status_code == StatusCode.UNSET  # a 4xx is the client's (HTTP server spans)


def test_count_tokens_and_batch_create_are_traced(
    client: anthropic.Anthropic, exporter: InMemorySpanExporter
) -> None:
    headers = {"traceparent": TRACEPARENT}
    client.messages.count_tokens(
        model="echo", messages=[{"role": "user", "content": SECRET}], extra_headers=headers
    )
    span = server_span(exporter)
    assert span.name == "POST /v1/messages/count_tokens"
    assert span.parent is not None and span.parent.span_id == int(PARENT_ID, 16)
    assert dict(span.attributes or {})["gen_ai.request.model"] == "echo"
    exporter.clear()
    batch = client.messages.batches.create(
        requests=[
            {
                "custom_id": "a",
                "params": {
                    "model": "echo",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": SECRET}],
                },
            }
        ],
        extra_headers=headers,
    )
    span = server_span(exporter)
    assert span.name == "POST /v1/messages/batches"
    assert span.context.trace_id == int(TRACE_ID, 16)
    assert dict(span.attributes or {})["http.response.status_code"] == 200
    assert_no_prompt(exporter)
    client.messages.batches.cancel(batch.id)


def test_other_endpoints_are_not_traced(client: anthropic.Anthropic, exporter: InMemorySpanExporter) -> None:
    client.models.list(extra_headers={"traceparent": TRACEPARENT})
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize(
    "traceparent",
    [
        "garbage",
        f"00-{'0' * 32}-{PARENT_ID}-01",  # all-zero trace id: invalid
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id: invalid
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",  # upper case: invalid
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff: invalid
    ],
)
def test_malformed_traceparent_starts_a_new_trace(
    client: anthropic.Anthropic, exporter: InMemorySpanExporter, traceparent: str
) -> None:
    message = client.messages.create(
        model="echo",
        max_tokens=5,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"traceparent": traceparent},
    )
    assert message.stop_reason == "end_turn"
    span = server_span(exporter)
    assert span.parent is None
    assert span.context.trace_id not in (0, int(TRACE_ID, 16))


def test_no_traceparent_is_a_root_span(client: anthropic.Anthropic, exporter: InMemorySpanExporter) -> None:
    client.messages.create(model="echo", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert server_span(exporter).parent is None


def test_sdk_tracing_is_continued(
    server: tuple[InProcessApp, InMemorySpanExporter], exporter: InMemorySpanExporter
) -> None:
    """The SDK's own tracing (its ``open_telemetry`` option) writes the
    traceparent of its call span; Missive's span is that span's child."""
    client_spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(client_spans))
    client = server[0].sdk(open_telemetry={"tracer_provider": provider})
    client.messages.create(model="echo", max_tokens=5, messages=[{"role": "user", "content": SECRET}])
    (call,) = client_spans.get_finished_spans()
    assert call.kind == SpanKind.CLIENT and call.name == "anthropic.messages.create"
    span = server_span(exporter)
    assert span.context.trace_id == call.context.trace_id
    assert span.parent is not None and span.parent.span_id == call.context.span_id


def test_off_by_default_and_by_otel_sdk_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_tracing(ServerConfig()) is None
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert build_tracing(ServerConfig(tracing=True)) is None


def test_unknown_exporter_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OTEL_TRACES_EXPORTER names 'nope'"):
        with in_process_app(CONFIG, env={**ENV, "OTEL_TRACES_EXPORTER": "nope"}):
            pass


def test_otlp_exporter_of_the_extra_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default exporter, ``otlp``, is the extra's OTLP/HTTP one."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    tracing = build_tracing(ServerConfig(tracing=True))
    assert tracing is not None and tracing.owned
    assert dict(tracing.provider.resource.attributes)["service.name"] == "missive"
    tracing.shutdown()


def test_tracing_without_the_sdk_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"missive-server\[otel\]"):
        build_tracing(ServerConfig(tracing=True))


def test_off_imports_nothing_of_opentelemetry() -> None:
    """Tracing off, a request through the app loads no OpenTelemetry module:
    no cost is paid (a child process: this one has loaded them)."""
    code = textwrap.dedent(
        """
        import sys
        import httpx
        from missive.testing import in_process_app
        config = {"models": {"echo": {"driver": "echo", "context_window": 100}}}
        with in_process_app(config) as app:
            client = app.http_client(httpx)  # not the SDK's: it loads opentelemetry's API itself
            body = {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            headers = {"traceparent": "TRACEPARENT"}
            assert client.post("/v1/messages", json=body, headers=headers).status_code == 200
        print(sorted(name for name in sys.modules if name.startswith("opentelemetry")))
        """
    ).replace("TRACEPARENT", TRACEPARENT)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
