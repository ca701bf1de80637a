"""A finished completion's spans, checked in OpenTelemetry's own in-memory exporter."""

from __future__ import annotations

import sys

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tercet.cli import main
from tercet.config_sections import ObservabilityConfig
from tercet.errors import ConfigError
from tercet.frontend.request_traces import OTEL_MODULES, PHASES, RequestTracer, check_tracing_installed
from tercet.ipc.messages import FinishKind, FinishReason
from tercet.ipc.request_phase_times import RequestPhaseTimes

T0 = 1_700_000_000.0
TOKENS = {"prompt": 12, "output": 5, "cached": 8}
STOPPED = FinishReason(FinishKind.STOP)


@pytest.fixture
def exporter():
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter):
    return RequestTracer.with_processor(SimpleSpanProcessor(exporter), "tercet-test", "tiny")


def spans_by_name(exporter) -> dict:
    spans = exporter.get_finished_spans()
    by_name = {span.name: span for span in spans}
    assert len(by_name) == len(spans), "one span of each name"
    return by_name


def test_a_finished_request_is_one_span_with_a_child_per_phase_in_order(tracer, exporter):
    times = RequestPhaseTimes(arrived=T0 + 0.010, admitted=T0 + 0.020, first_token=T0 + 0.050, finished=T0 + 0.090)
    tracer.trace("req-1", T0, T0 + 0.005, times, T0 + 0.100, TOKENS, STOPPED, rank=1)
    spans = spans_by_name(exporter)
    root = spans.pop("tercet.request")
    assert list(spans) == list(PHASES)
    assert root.parent is None and root.resource.attributes["service.name"] == "tercet-test"
    assert dict(root.attributes) == {
        "tercet.request_id": "req-1", "gen_ai.request.model": "tiny", "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 5, "tercet.cached_tokens": 8, "tercet.finish_reason": "stop",
        "tercet.dp_rank": 1,
    }
    for phase in spans.values():
        assert phase.parent.span_id == root.context.span_id and phase.context.trace_id == root.context.trace_id
    expected = {  # milliseconds after T0
        "tercet.api": (0, 5), "tercet.queue": (10, 20), "tercet.prefill": (20, 50),
        "tercet.decode": (50, 90), "tercet.detokenize": (90, 100),
    }
    for name, (start, end) in expected.items():
        assert (round((spans[name].start_time - root.start_time) / 1e6), round((spans[name].end_time - root.start_time) / 1e6)) == (start, end), name
    assert root.end_time - root.start_time == pytest.approx(100e6, abs=1e3)
    assert dict(spans["tercet.prefill"].attributes) == {"gen_ai.usage.input_tokens": 12, "tercet.cached_tokens": 8}
    assert dict(spans["tercet.decode"].attributes) == {"gen_ai.usage.output_tokens": 5}


def test_a_request_aborted_while_waiting_has_no_prefill_or_decode(tracer, exporter):
    times = RequestPhaseTimes(arrived=T0 + 0.01, admitted=None, first_token=None, finished=T0 + 0.5)
    tracer.trace("gone", T0, T0 + 0.005, times, T0 + 0.6, {"prompt": 3, "output": 0, "cached": 0},
                 FinishReason(FinishKind.ABORT, message="aborted"), rank=None)
    spans = spans_by_name(exporter)
    assert set(spans) == {"tercet.request", "tercet.api", "tercet.queue", "tercet.detokenize"}
    assert spans["tercet.queue"].end_time == spans["tercet.detokenize"].start_time  # waited until its end
    assert spans["tercet.request"].attributes["tercet.finish_reason"] == "abort"
    assert "tercet.dp_rank" not in spans["tercet.request"].attributes


def test_clocks_that_disagree_cannot_turn_a_phase_around(tracer, exporter):
    # The scheduler's clock runs 50 ms behind the API's: its stamps fall before the request was sent.
    times = RequestPhaseTimes(arrived=T0 - 0.04, admitted=T0 - 0.03, first_token=T0 + 0.02, finished=T0 + 0.3)
    tracer.trace("skewed", T0, T0 + 0.01, times, T0 + 0.2, TOKENS, STOPPED, rank=0)
    spans = sorted(exporter.get_finished_spans(), key=lambda span: (span.parent is not None, span.start_time))
    root, phases = spans[0], spans[1:]
    for phase in phases:
        assert root.start_time <= phase.start_time <= phase.end_time <= root.end_time, phase.name
    for earlier, later in zip(phases, phases[1:]):
        assert earlier.end_time <= later.start_time, (earlier.name, later.name)


def test_traces_off_need_nothing_installed(monkeypatch):
    for name in OTEL_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    check_tracing_installed(ObservabilityConfig())
    assert RequestTracer.create(ObservabilityConfig(), "tiny") is None


def test_traces_without_the_extra_fail_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    config = ObservabilityConfig(otlp_endpoint="http://127.0.0.1:4318/v1/traces")
    with pytest.raises(ConfigError, match=r"pip install 'tercet\[otel\]'"):
        check_tracing_installed(config)
    with pytest.raises(ConfigError, match=r"pip install 'tercet\[otel\]'"):
        RequestTracer.create(config, "tiny")


def test_serve_without_the_extra_fails_before_starting_anything(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    monkeypatch.setattr("tercet.launch.launch_server", lambda config: pytest.fail("the server went on starting"))
    code = main(["serve", "--port", "0", "--otlp-traces-endpoint", "http://127.0.0.1:4318/v1/traces"])
    assert code == 1
    assert "pip install 'tercet[otel]'" in capsys.readouterr().err
