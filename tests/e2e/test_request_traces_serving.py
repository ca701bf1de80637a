"""[observability] otlp_endpoint on a real server: each request's spans reach a real OTLP/HTTP
receiver (a local HTTP server decoding the protobuf POSTs with opentelemetry-proto), with their
phases, token counts and times in order."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tercet.testing import TINY_SETTINGS

PHASES = ["tercet.api", "tercet.queue", "tercet.prefill", "tercet.decode", "tercet.detokenize"]
# Longer than a page (8 tokens), so that a second request finds part of it in the prefix cache.
PROMPT = "Tell me a long story about a lighthouse keeper and the storm that came one winter night"


class OtlpReceiver:
    """Spans POSTed to http://127.0.0.1:<port>/v1/traces, as OTLP/HTTP protobuf."""

    def __init__(self):
        self.spans: list = []
        self.resources: list = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.lock:
                    for resource_spans in request.resource_spans:
                        receiver.resources.append(resource_spans.resource)
                        for scope_spans in resource_spans.scope_spans:
                            receiver.spans.extend(scope_spans.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def request_spans(self, request_id: str, timeout: float = 60) -> dict:
        """The spans of one request, by name, once its root has arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                roots = [span for span in self.spans if span.name == "tercet.request"
                         and attributes(span).get("tercet.request_id") == request_id]
                if roots:
                    trace_id = roots[0].trace_id
                    return {span.name: span for span in self.spans if span.trace_id == trace_id}
            time.sleep(0.05)  # a poll interval: the exporter sends a batch each second
        raise AssertionError(f"no spans of {request_id} arrived; got {[span.name for span in self.spans]}")

    def close(self):
        self.server.shutdown()


def attributes(span) -> dict:
    values = {}
    for attribute in span.attributes:
        value = attribute.value
        values[attribute.key] = value.int_value if value.HasField("int_value") else value.string_value
    return values


@pytest.fixture(scope="module")
def receiver():
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def server(start_server, tiny_llama_dir, receiver):
    return start_server(tiny_llama_dir, TINY_SETTINGS + ["observability.service_name=tercet-e2e"],
                        extra_args=["--otlp-traces-endpoint", receiver.endpoint])


def generate(server, rid: str, max_new_tokens: int = 8) -> dict:
    body = {"text": PROMPT, "rid": rid,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True}}
    response = httpx.post(server.base_url + "/generate", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["meta_info"]


def test_each_request_is_a_span_with_its_phases_in_order(server, receiver):
    meta = generate(server, "traced-1")
    spans = receiver.request_spans("traced-1")
    root = spans.pop("tercet.request")
    assert sorted(spans, key=PHASES.index) == PHASES
    assert all(span.parent_span_id == root.span_id for span in spans.values())
    assert root.parent_span_id == b""
    phases = [spans[name] for name in PHASES]
    for phase in phases:
        assert root.start_time_unix_nano <= phase.start_time_unix_nano <= phase.end_time_unix_nano <= root.end_time_unix_nano
    for earlier, later in zip(phases, phases[1:]):
        assert earlier.end_time_unix_nano <= later.start_time_unix_nano, (earlier.name, later.name)
    # The request took real time, and its decode made 7 more tokens after the first.
    assert spans["tercet.decode"].end_time_unix_nano > spans["tercet.decode"].start_time_unix_nano
    request = attributes(root)
    assert request["gen_ai.usage.input_tokens"] == meta["prompt_tokens"]
    assert request["gen_ai.usage.output_tokens"] == meta["completion_tokens"] == 8
    assert request["tercet.cached_tokens"] == meta["cached_tokens"]
    assert request["tercet.finish_reason"] == "length" and request["tercet.dp_rank"] == 0
    service_names = {attribute.value.string_value for resource in receiver.resources
                     for attribute in resource.attributes if attribute.key == "service.name"}
    assert service_names == {"tercet-e2e"}


def test_cached_prompt_tokens_are_counted_on_the_prefill(server, receiver):
    generate(server, "warm")
    meta = generate(server, "cached", max_new_tokens=4)
    assert meta["cached_tokens"] > 0
    spans = receiver.request_spans("cached")
    prefill = attributes(spans["tercet.prefill"])
    assert prefill == {"gen_ai.usage.input_tokens": meta["prompt_tokens"], "tercet.cached_tokens": meta["cached_tokens"]}
    assert attributes(spans["tercet.decode"]) == {"gen_ai.usage.output_tokens": 4}
