"""Request traces over OpenTelemetry: one span per generated completion, a child span per phase.

Opt-in with ``[observability] otlp_endpoint``; OpenTelemetry's SDK and OTLP/HTTP exporter are the
``otel`` extra (``pip install 'tercet[otel]'``), and a server told to export without them does not
start. The spans are built once, when a completion's last output reaches the API process, from
times the request already carries: when the API received it and sent it on (its ``ReqState``), and
when its scheduler queued, admitted, and sent its first and last token
(:class:`tercet.ipc.request_phase_times.RequestPhaseTimes`, on its finishing row). Nothing is
added per token. A completion whose caller left before its end is not traced.

``tercet.request`` spans the whole request, from its arrival at the API to its last output there,
and holds these children, one after the other:

- ``tercet.api``: arrival -> sent to a scheduler (parsing, templating, tokenizing, routing);
- ``tercet.queue``: reached the scheduler -> first admitted into a batch;
- ``tercet.prefill``: admitted -> its first output token went out;
- ``tercet.decode``: first token -> last token went out;
- ``tercet.detokenize``: last token left the scheduler -> its text reached the API (the detokenizer
  and two IPC hops).

A phase the request never reached (aborted while waiting, say) has no span. The boundaries come
from several processes' clocks; each is kept inside the request and after the one before, so a
clock that differs a little (another node's) cannot turn a phase around.
"""

from __future__ import annotations

import importlib
import time

from tercet.config_sections import ObservabilityConfig
from tercet.errors import ConfigError
from tercet.ipc.messages import FinishReason
from tercet.ipc.request_phase_times import RequestPhaseTimes

OTEL_EXTRA_MISSING = ("[observability] otlp_endpoint needs OpenTelemetry's SDK and its OTLP/HTTP exporter, "
                      "which are not installed: pip install 'tercet[otel]'")
# The modules the traces need, in the otel extra.
OTEL_MODULES = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
# Seconds the exporter waits for the collector; also what stopping the server waits at most for it.
EXPORT_TIMEOUT = 5.0
# How often finished spans are sent to the collector, in a batch (milliseconds).
EXPORT_INTERVAL_MS = 1000
PHASES = ("tercet.api", "tercet.queue", "tercet.prefill", "tercet.decode", "tercet.detokenize")
# The names tercet gives spans and attributes (OpenTelemetry's namespaced style, not modules).
TRACE_NAMES = frozenset({"tercet.request", *PHASES, "tercet.request_id", "tercet.cached_tokens",
                         "tercet.finish_reason", "tercet.dp_rank"})


def check_tracing_installed(config: ObservabilityConfig) -> None:
    """A ConfigError naming the extra when traces are asked for and OpenTelemetry is missing."""
    if not config.otlp_endpoint:
        return
    try:
        for name in OTEL_MODULES:
            importlib.import_module(name)
    except ImportError:
        raise ConfigError(OTEL_EXTRA_MISSING) from None


class RequestTracer:
    """Makes each finished completion's spans with ``tracer`` (an OpenTelemetry tracer)."""

    def __init__(self, tracer, provider=None, model_name: str = ""):
        self.tracer = tracer
        # Flushed and closed with the TokenizerManager (None: the caller owns it).
        self.provider = provider
        self.model_name = model_name

    @classmethod
    def create(cls, config: ObservabilityConfig, model_name: str) -> "RequestTracer | None":
        """The tracer exporting to ``config.otlp_endpoint``; None when traces are off."""
        if not config.otlp_endpoint:
            return None
        check_tracing_installed(config)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint, timeout=EXPORT_TIMEOUT)
        processor = BatchSpanProcessor(exporter, schedule_delay_millis=EXPORT_INTERVAL_MS,
                                       export_timeout_millis=int(EXPORT_TIMEOUT * 1000))
        return cls.with_processor(processor, config.service_name, model_name)

    @classmethod
    def with_processor(cls, processor, service_name: str = "tercet", model_name: str = "") -> "RequestTracer":
        """A tracer of its own provider (never the process-wide one) sending spans to ``processor``."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(processor)
        return cls(provider.get_tracer("tercet"), provider, model_name)

    def trace(self, rid: str, received: float, sent: float, times: RequestPhaseTimes | None, done: float,
              tokens: dict[str, int], finish_reason: FinishReason | None, rank: int | None) -> None:
        """The spans of completion ``rid``: received by the API at ``received``, sent on at ``sent``,
        its last output back at ``done`` (Unix times in seconds); ``tokens`` are its counts."""
        bounds = _ordered([received, sent, *_scheduler_bounds(times), done])
        root = self.tracer.start_span("tercet.request", start_time=_ns(bounds[0]),
                                      attributes=self._request_attributes(rid, tokens, finish_reason, rank))
        try:
            from opentelemetry import trace

            context = trace.set_span_in_context(root)
            for name, (start, end) in zip(PHASES, _phase_intervals(bounds)):
                if start is None or end is None:
                    continue
                phase = self.tracer.start_span(name, context=context, start_time=_ns(start),
                                               attributes=_phase_attributes(name, tokens))
                phase.end(end_time=_ns(end))
        finally:
            root.end(end_time=_ns(bounds[-1]))

    def trace_finished(self, rid: str, state, batch, position: int, rank: int | None) -> None:
        """Trace the completion whose last output is row ``position`` of ``batch`` (a BatchStrOutput)
        and whose ReqState is ``state``; ``rid`` as its client knows it."""
        tokens = {"prompt": batch.prompt_tokens[position], "output": batch.completion_tokens[position],
                  "cached": batch.cached_tokens[position]}
        times = batch.phase_times[position] if batch.phase_times else None
        self.trace(rid, state.received_at, state.sent_at, times, unix_now(), tokens,
                   batch.finished_reasons[position], rank)

    def _request_attributes(self, rid: str, tokens: dict[str, int], finish_reason: FinishReason | None,
                            rank: int | None) -> dict:
        attributes = {
            "tercet.request_id": rid,
            "gen_ai.request.model": self.model_name,
            "gen_ai.usage.input_tokens": tokens["prompt"],
            "gen_ai.usage.output_tokens": tokens["output"],
            "tercet.cached_tokens": tokens["cached"],
        }
        if finish_reason is not None:
            attributes["tercet.finish_reason"] = finish_reason.kind.value
        if rank is not None:
            attributes["tercet.dp_rank"] = rank
        return attributes

    def shutdown(self) -> None:
        """Send what is left, and stop (at most EXPORT_TIMEOUT for an unreachable collector)."""
        if self.provider is not None:
            self.provider.shutdown()


def _scheduler_bounds(times: RequestPhaseTimes | None) -> list[float | None]:
    """Queue start, prefill start, decode start, detokenize start; a phase not reached is None."""
    if times is None:
        return [None, None, None, None]
    return [times.arrived, times.admitted, times.first_token, times.finished]


def _phase_intervals(bounds: list[float | None]) -> list[tuple[float | None, float | None]]:
    """(start, end) of each of PHASES from the ordered boundaries: received, sent, arrived,
    admitted, first token, finished, done. A phase cut short ends where the request's
    scheduler part did (a request aborted while waiting queued until then)."""
    received, sent, arrived, admitted, first_token, finished, done = bounds
    return [
        (received, sent),
        (arrived, admitted if admitted is not None else finished),
        (admitted, first_token if first_token is not None else finished),
        (first_token, finished),
        (finished, done),
    ]


def _ordered(bounds: list[float | None]) -> list[float | None]:
    """Each known boundary no earlier than the one before and no later than the last (the API's own)."""
    last = bounds[-1]
    ordered, latest = [], bounds[0]
    for bound in bounds:
        if bound is not None:
            latest = min(max(bound, latest), last)
            bound = latest
        ordered.append(bound)
    return ordered


def _phase_attributes(name: str, tokens: dict[str, int]) -> dict:
    if name == "tercet.prefill":
        return {"gen_ai.usage.input_tokens": tokens["prompt"], "tercet.cached_tokens": tokens["cached"]}
    if name in ("tercet.decode", "tercet.detokenize"):
        return {"gen_ai.usage.output_tokens": tokens["output"]}
    return {}


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def unix_now() -> float:
    """The API's stamps, on the same clock as the schedulers' (Unix time)."""
    return time.time()
