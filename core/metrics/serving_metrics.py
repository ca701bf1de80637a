"""Prometheus metrics of a server: what the API process sees of each request, and each rank's state.

Names follow what vLLM and SGLang users already scrape, under a ``tercet:``
prefix, every series labelled with ``model_name`` (and ``dp_rank`` where a
rank is meant):

- ``tercet:request_success_total{finished_reason}``: completions that ended, by reason
  (``stop``, ``length``, ``abort``);
- ``tercet:prompt_tokens_total``, ``tercet:generation_tokens_total``;
- histograms ``tercet:time_to_first_token_seconds``, ``tercet:inter_token_latency_seconds``
  (per output token), ``tercet:e2e_request_latency_seconds`` and
  ``tercet:request_queue_time_seconds`` (arrival at the scheduler to first admission);
- gauges ``tercet:num_requests_running``, ``tercet:num_requests_waiting``,
  ``tercet:kv_cache_usage_perc`` (0..1), ``tercet:prefix_cache_hit_rate`` (0..1, of the
  prompt tokens admitted), and counters ``tercet:prefix_cache_queries_total`` /
  ``tercet:prefix_cache_hits_total`` (prompt tokens, and those the cache held).

The request figures are observed here, in the API process, as outputs arrive
(a few additions per output piece; the scheduler's step does not see them).
The rank figures, queue times included, are asked of every rank when
``/metrics`` is scraped, so no metric is shared between processes and
``prometheus_client``'s multi-process mode is not needed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from tercet.metrics.latency_histogram import LATENCY_BUCKETS

PREFIX = "tercet:"
# Inter-token latencies are milliseconds; the latency buckets start at one.
TOKEN_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass
class _InFlight:
    rank: str
    started: float
    last_output: float | None = None
    num_tokens: int = 0


class ServingMetrics:
    def __init__(self, model_name: str):
        self.model_name = model_name
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name", "dp_rank"]
        self.finished = Counter(f"{PREFIX}request_success", "Completions that ended, by finish reason",
                                [*labels, "finished_reason"], registry=self.registry)
        self.prompt_tokens = Counter(f"{PREFIX}prompt_tokens", "Prompt tokens of finished completions", labels,
                                     registry=self.registry)
        self.generation_tokens = Counter(f"{PREFIX}generation_tokens", "Generated tokens", labels,
                                         registry=self.registry)
        self.time_to_first_token = Histogram(f"{PREFIX}time_to_first_token_seconds", "Request to first token",
                                             labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.inter_token_latency = Histogram(f"{PREFIX}inter_token_latency_seconds", "Between output tokens",
                                             labels, buckets=TOKEN_LATENCY_BUCKETS, registry=self.registry)
        self.e2e_latency = Histogram(f"{PREFIX}e2e_request_latency_seconds", "Request to its last token",
                                     labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.embedding_inputs = Counter(f"{PREFIX}embedding_inputs", "Inputs of /v1/embeddings that ended, by outcome",
                                        [*labels, "outcome"], registry=self.registry)
        self.ranks = RankCollector(model_name)
        self.registry.register(self.ranks)
        self.in_flight: dict[str, _InFlight] = {}

    # -- what the TokenizerManager tells ----------------------------------------

    def started(self, rid: str, rank: int) -> None:
        self.in_flight[rid] = _InFlight(str(rank), time.perf_counter())

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



class RankCollector:
    """The ranks' own figures, as their last answer to ``GetInternalStateReq`` gave them."""

    def __init__(self, model_name: str):
        self.model_name = model_name
        self.latest: list[dict] = []

    def describe(self):
        return []  # the series depend on the ranks' answers

    def collect(self):
        labels = ["model_name", "dp_rank"]
        running = GaugeMetricFamily(f"{PREFIX}num_requests_running", "Completions in the running batch", labels=labels)
        waiting = GaugeMetricFamily(f"{PREFIX}num_requests_waiting", "Completions waiting to be admitted", labels=labels)
        kv_usage = GaugeMetricFamily(f"{PREFIX}kv_cache_usage_perc", "KV pages in use, 0 to 1", labels=labels)
        hit_rate = GaugeMetricFamily(f"{PREFIX}prefix_cache_hit_rate", "Prompt tokens from the prefix cache, 0 to 1",
                                     labels=labels)
        queries = CounterMetricFamily(f"{PREFIX}prefix_cache_queries", "Prompt tokens admitted", labels=labels)
        hits = CounterMetricFamily(f"{PREFIX}prefix_cache_hits", "Prompt tokens the prefix cache held", labels=labels)
        queue = HistogramMetricFamily(f"{PREFIX}request_queue_time_seconds", "Arrival to first admission",
                                      labels=labels)
        for rank in self.latest:
            values = [self.model_name, str(rank["rank"])]
            running.add_metric(values, rank["num_running_requests"])
            waiting.add_metric(values, rank["num_waiting_requests"])
            kv_usage.add_metric(values, rank["kv_usage"])
            admitted, cached = rank["prompt_tokens_admitted"], rank["prompt_tokens_from_cache"]
            hit_rate.add_metric(values, cached / admitted if admitted else 0.0)
            queries.add_metric(values, admitted)
            hits.add_metric(values, cached)
            histogram = rank.get("queue_time")
            if histogram:
                bounds = [*map(str, histogram["buckets"]), "+Inf"]
                queue.add_metric(values, list(zip(bounds, histogram["cumulative"])), histogram["sum"])
        yield from (running, waiting, kv_usage, hit_rate, queries, hits, queue)
