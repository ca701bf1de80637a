"""Prometheus metrics of a server: what the API process sees of each request, and each rank's state.

Names follow what vLLM and SGLang users already scrape, under a ``tercet:``
prefix, every series labelled with ``model_name`` (and ``dp_rank`` where a
rank is meant):

- ``tercet:request_success_total{finished_reason}``: completions that ended, by reason
  (``stop``, ``length``, ``abort``);
- ``tercet:prompt_tokens_total``, ``tercet:generation_tokens_total``, and per completion
  the histograms ``tercet:request_prompt_tokens`` and ``tercet:request_generation_tokens``;
- histograms ``tercet:time_to_first_token_seconds``, ``tercet:inter_token_latency_seconds``
  (per output token) and ``tercet:e2e_request_latency_seconds``;
- each rank's figures (:mod:`tercet.metrics.rank_collector`): requests running and waiting,
  KV usage, the prefix cache, preemptions, queue, prefill and decode times, the cache's
  configuration;
- with LoRA on, each rank's ``tercet:lora_adapters_loaded`` and
  ``tercet:lora_requests_total{lora_name}`` (generate requests received per adapter);
- ``tercet:api_worker_requests_total{api_worker}``: completions and embedding inputs each
  API worker sent to the ranks;
- the API process's own ``process_*`` (CPU, memory, open files), ``python_info`` and
  ``python_gc_*`` (with several API workers: those of the worker scraped).

The request figures are observed here, in the API process, as outputs arrive
(a few additions per output piece; the scheduler's step does not see them).
The rank figures are the latest each rank sent of itself, so a scrape never waits
on a rank. With one API worker no metric is shared between processes; with several,
the request metrics are summed over the workers at each scrape
(:mod:`tercet.metrics.shared_metrics`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, GCCollector, Histogram, PlatformCollector, ProcessCollector

from tercet.metrics.latency_histogram import LATENCY_BUCKETS
from tercet.metrics.rank_collector import LABELS, PREFIX, RankCollector
from tercet.metrics.shared_metrics import keep_metrics_in, summed_registry

# Inter-token latencies are milliseconds; the latency buckets start at one.
TOKEN_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)
DEFAULT_MAX_TOKENS_BUCKET = 1 << 20


def token_count_buckets(largest: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, … up to the first at or past ``largest`` (the context length)."""
    buckets, scale = [], 1
    while True:
        for step in (1, 2, 5):
            buckets.append(step * scale)
            if buckets[-1] >= largest:
                return tuple(buckets)
        scale *= 10


@dataclass
class _InFlight:
    rank: str
    started: float
    last_output: float | None = None
    num_tokens: int = 0


class ServingMetrics:
    """``num_ranks``: data-parallel ranks whose reports are taken; ``context_len`` bounds the token histograms;
    ``api_worker``: the API worker observing; ``shared_dir``: where the API workers' request metrics
    are kept to be summed (None with one worker)."""

    def __init__(self, model_name: str, num_ranks: int = 1, context_len: int = DEFAULT_MAX_TOKENS_BUCKET,
                 api_worker: int = 1, shared_dir: str | None = None):
        self.model_name = model_name
        self.api_worker = str(api_worker)
        if shared_dir is None:
            self.registry = CollectorRegistry(auto_describe=True)
            self._add_request_metrics(token_count_buckets(context_len), self.registry)
        else:
            keep_metrics_in(shared_dir)
            # The metrics write to their files; the scrape reads every worker's.
            self._add_request_metrics(token_count_buckets(context_len), None)
            self.registry = summed_registry(shared_dir)
        self.ranks = RankCollector(model_name, num_ranks)
        self.registry.register(self.ranks)
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        self.in_flight: dict[str, _InFlight] = {}

    def _add_request_metrics(self, token_buckets: tuple[int, ...], registry: CollectorRegistry | None) -> None:
        def counter(name, help_text, labels=LABELS):
            return Counter(PREFIX + name, help_text, labels, registry=registry)

        def histogram(name, help_text, buckets):
            return Histogram(PREFIX + name, help_text, LABELS, buckets=buckets, registry=registry)

        self.finished = counter("request_success", "Completions that ended, by finish reason",
                                [*LABELS, "finished_reason"])
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of finished completions")
        self.generation_tokens = counter("generation_tokens", "Generated tokens")
        self.worker_requests = counter("api_worker_requests", "Completions and embedding inputs each API worker sent",
                                       ["model_name", "api_worker"])
        self.embedding_inputs = counter("embedding_inputs", "Inputs of /v1/embeddings that ended, by outcome",
                                        [*LABELS, "outcome"])
        self.time_to_first_token = histogram("time_to_first_token_seconds", "Request to first token", LATENCY_BUCKETS)
        self.inter_token_latency = histogram("inter_token_latency_seconds", "Between output tokens",
                                             TOKEN_LATENCY_BUCKETS)
        self.e2e_latency = histogram("e2e_request_latency_seconds", "Request to its last token", LATENCY_BUCKETS)
        self.request_prompt_tokens = histogram("request_prompt_tokens", "Prompt tokens of each finished completion",
                                               token_buckets)
        self.request_generation_tokens = histogram("request_generation_tokens",
                                                   "Tokens each finished completion generated", token_buckets)

    # -- what the TokenizerManager tells ----------------------------------------

    def started(self, rid: str, rank: int) -> None:
        self.in_flight[rid] = _InFlight(str(rank), time.perf_counter())
        self.worker_requests.labels(self.model_name, self.api_worker).inc()

    def output(self, rid: str, num_new_tokens: int, prompt_tokens: int, finish_reason) -> None:
        """A piece of completion ``rid`` arrived: ``num_new_tokens`` more, finished when ``finish_reason``."""
        request = self.in_flight.get(rid)
        if request is None:
            return
        now = time.perf_counter()
        labels = (self.model_name, request.rank)
        if num_new_tokens:
            if request.last_output is None:
                self.time_to_first_token.labels(*labels).observe(now - request.started)
                # The first token's own latency is the TTFT; the rest of a first piece came with it.
                extra = num_new_tokens - 1
            else:
                extra = num_new_tokens
            if extra and request.last_output is not None:
                per_token = (now - request.last_output) / extra
                for _ in range(extra):
                    self.inter_token_latency.labels(*labels).observe(per_token)
            request.last_output = now
            request.num_tokens += num_new_tokens
            self.generation_tokens.labels(*labels).inc(num_new_tokens)
        if finish_reason is not None:
            self.e2e_latency.labels(*labels).observe(now - request.started)
            self.finished.labels(*labels, finish_reason.kind.value).inc()
            self.prompt_tokens.labels(*labels).inc(prompt_tokens)
            self.request_prompt_tokens.labels(*labels).observe(prompt_tokens)
            self.request_generation_tokens.labels(*labels).observe(request.num_tokens)
            del self.in_flight[rid]

    def embedded(self, rid: str, prompt_tokens: int, refused: bool) -> None:
        """Embedding input ``rid`` (started as a request is) came back, embedded or refused."""
        request = self.in_flight.pop(rid, None)
        if request is None:
            return
        labels = (self.model_name, request.rank)
        self.embedding_inputs.labels(*labels, "refused" if refused else "embedded").inc()
        if not refused:
            self.prompt_tokens.labels(*labels).inc(prompt_tokens)

    def abandoned(self, rid: str) -> None:
        """An embedding input its caller left before it came back (it was aborted)."""
        request = self.in_flight.pop(rid, None)
        if request is not None:
            self.embedding_inputs.labels(self.model_name, request.rank, "aborted").inc()
