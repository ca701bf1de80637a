"""The ranks' own figures at ``/metrics``: the latest report each rank sent, published as it is.

Each scheduler rank sends a ``RankMetricsReport`` (:mod:`tercet.ipc.rank_metrics`) between
steps without being asked (:mod:`tercet.scheduler.metrics_reporter`); the TokenizerManager hands
it to :meth:`RankCollector.reported`. A scrape only reads what is kept here, so it never
waits on a rank, however long its step. ``tercet:rank_metrics_age_seconds`` tells how old
each rank's figures are: it grows through a long step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

PREFIX = "tercet:"
LABELS = ["model_name", "dp_rank"]


def _ratio(part: float, whole: float) -> float:
    return min(max(part / whole, 0.0), 1.0) if whole > 0 else 0.0


# (name, help, the value of a report)
RANK_GAUGES = [
    ("num_requests_running", "Completions in the running batch", lambda r: r.num_running_requests),
    ("num_requests_waiting", "Completions waiting to be admitted", lambda r: r.num_waiting_requests),
    ("kv_cache_usage_perc", "KV pages requests hold, 0 to 1 (pages only the prefix cache keeps count as free)",
     lambda r: _ratio(r.kv_used_tokens - r.kv_evictable_tokens, r.kv_total_tokens)),
    ("kv_cache_evictable_perc", "KV pages only the prefix cache keeps (freed on demand), 0 to 1",
     lambda r: _ratio(r.kv_evictable_tokens, r.kv_total_tokens)),
    ("prefix_cache_hit_rate", "Prompt tokens from the prefix cache, 0 to 1",
     lambda r: _ratio(r.prompt_tokens_from_cache, r.prompt_tokens_admitted)),
    ("lora_adapters_loaded", "LoRA adapters whose weights the rank holds", lambda r: r.lora_adapters_loaded),
]
RANK_COUNTERS = [
    ("prefix_cache_queries", "Prompt tokens admitted", lambda r: r.prompt_tokens_admitted),
    ("prefix_cache_hits", "Prompt tokens the prefix cache held", lambda r: r.prompt_tokens_from_cache),
    ("num_preemptions", "Running completions sent back to wait (retracted) to free KV memory",
     lambda r: r.num_retractions),
]
RANK_HISTOGRAMS = [
    ("request_queue_time_seconds", "Arrival at the scheduler to first admission", lambda r: r.queue_time),
    ("request_prefill_time_seconds", "First admission to the first output token", lambda r: r.prefill_time),
    ("request_decode_time_seconds", "First output token to the finish", lambda r: r.decode_time),
]
CACHE_CONFIG_LABELS = ["page_size", "num_pages", "max_total_tokens", "prefix_cache", "kv_dtype"]
# Speculative decoding, per proposer (a rank reports them only while one is configured).
SPECULATION_FAMILIES = [
    (CounterMetricFamily, "spec_decode_num_verifications", "Request-steps that verified draft tokens",
     lambda r: r.speculative_verifications),
    (CounterMetricFamily, "spec_decode_num_draft_tokens", "Draft tokens verified", lambda r: r.speculative_draft_tokens),
    (CounterMetricFamily, "spec_decode_num_accepted_tokens", "Draft tokens the target model accepted",
     lambda r: r.speculative_accepted_tokens),
    (GaugeMetricFamily, "spec_decode_acceptance_rate", "Accepted draft tokens per draft token verified, 0 to 1",
     lambda r: _ratio(r.speculative_accepted_tokens, r.speculative_draft_tokens)),
    (GaugeMetricFamily, "spec_decode_mean_accepted_length", "Draft tokens accepted per verification",
     lambda r: r.speculative_accepted_tokens / r.speculative_verifications if r.speculative_verifications else 0.0),
]

# The KV storage tier below the pool, by tier (a rank reports them only while one is configured).
KV_STORAGE_FAMILIES = [
    (CounterMetricFamily, "kv_storage_lookups", "Requests whose cached prefix went on below the pool, looked up "
     "in the tier", lambda r: r.kv_storage_lookups),
    (CounterMetricFamily, "kv_storage_hits", "Lookups in the tier that found pages of the prefix",
     lambda r: r.kv_storage_hits),
    (GaugeMetricFamily, "kv_storage_hit_rate", "Lookups in the tier that found pages, 0 to 1",
     lambda r: _ratio(r.kv_storage_hits, r.kv_storage_lookups)),
    (CounterMetricFamily, "kv_storage_evictions", "KV pages the prefix cache evicted from the pool to the tier",
     lambda r: r.kv_storage_evictions),
    (CounterMetricFamily, "kv_storage_pages_written", "KV pages written down to the tier",
     lambda r: r.kv_storage_pages_written),
    (CounterMetricFamily, "kv_storage_pages_read", "KV pages read back from the tier into the pool",
     lambda r: r.kv_storage_pages_read),
    (CounterMetricFamily, "kv_storage_written_bytes", "Bytes written down to the tier",
     lambda r: r.kv_storage_bytes_written),
    (CounterMetricFamily, "kv_storage_read_bytes", "Bytes read back from the tier", lambda r: r.kv_storage_bytes_read),
    (CounterMetricFamily, "kv_storage_pages_dropped", "Evicted KV pages not written down: the writer was behind",
     lambda r: r.kv_storage_pages_dropped),
    (CounterMetricFamily, "kv_storage_pages_corrupt", "KV pages read back that failed their checksum (dropped)",
     lambda r: r.kv_storage_pages_corrupt),
]


class RankCollector:
    def __init__(self, model_name: str, num_ranks: int, clock: Callable[[], float] = time.monotonic):
        self.model_name = model_name
        self.num_ranks = num_ranks
        self.clock = clock
        # rank -> (its latest report, when it came)
        self.reports: dict[int, tuple[object, float]] = {}

    def reported(self, report) -> bool:
        """Keep ``report`` as its rank's latest; False (dropped) when no rank of this server could have sent it."""
        if not 0 <= report.rank < self.num_ranks or not all(h.is_well_formed for h in report.histograms):
            return False
        self.reports[report.rank] = (report, self.clock())
        return True

    def describe(self):
        return []  # the series depend on the ranks' reports

    def collect(self):
        now = self.clock()
        latest = [(str(rank), report, now - received) for rank, (report, received) in sorted(self.reports.items())]
        for name, help_text, value_of in RANK_GAUGES:
            yield self._family(GaugeMetricFamily, name, help_text, latest, value_of)
        for name, help_text, value_of in RANK_COUNTERS:
            yield self._family(CounterMetricFamily, name, help_text, latest, value_of)
        for name, help_text, counts_of in RANK_HISTOGRAMS:
            histogram = HistogramMetricFamily(PREFIX + name, help_text, labels=LABELS)
            for rank, report, _ in latest:
                counts = counts_of(report)
                bounds = [*map(str, counts.buckets), "+Inf"]
                histogram.add_metric([self.model_name, rank], list(zip(bounds, counts.cumulative)), counts.total)
            yield histogram
        age = GaugeMetricFamily(PREFIX + "rank_metrics_age_seconds",
                                "Seconds since the rank sent these figures (it sends none during a step)", labels=LABELS)
        for rank, _, seconds in latest:
            age.add_metric([self.model_name, rank], seconds)
        yield age
        yield self._cache_config(latest)
        yield from self._speculation(latest)
        yield self._lora_requests(latest)
        yield from self._kv_storage(latest)

    def _kv_storage(self, latest):
        tiered = [(rank, report) for rank, report, _ in latest if report.kv_storage_tier]
        if not tiered:
            return
        labels = [*LABELS, "tier"]
        for family_type, name, help_text, value_of in KV_STORAGE_FAMILIES:
            family = family_type(PREFIX + name, help_text, labels=labels)
            for rank, report in tiered:
                family.add_metric([self.model_name, rank, report.kv_storage_tier], value_of(report))
            yield family
        histogram = HistogramMetricFamily(PREFIX + "kv_storage_read_back_seconds",
                                          "Seconds to read a prefix's pages back from the tier", labels=labels)
        for rank, report in tiered:
            counts = report.kv_storage_read_back_time
            bounds = [*map(str, counts.buckets), "+Inf"]
            histogram.add_metric([self.model_name, rank, report.kv_storage_tier],
                                 list(zip(bounds, counts.cumulative)), counts.total)
        yield histogram

    def _lora_requests(self, latest) -> CounterMetricFamily:
        family = CounterMetricFamily(PREFIX + "lora_requests", "Generate requests the rank received, by LoRA adapter",
                                     labels=[*LABELS, "lora_name"])
        for rank, report, _ in latest:
            for name, count in sorted(report.lora_requests.items()):
                family.add_metric([self.model_name, rank, name], count)
        return family

    def _family(self, family_type, name: str, help_text: str, latest, value_of):
        family = family_type(PREFIX + name, help_text, labels=LABELS)
        for rank, report, _ in latest:
            family.add_metric([self.model_name, rank], value_of(report))
        return family

    def _speculation(self, latest):
        speculating = [(rank, report) for rank, report, _ in latest if report.speculative_proposer]
        if not speculating:
            return
        for family_type, name, help_text, value_of in SPECULATION_FAMILIES:
            family = family_type(PREFIX + name, help_text, labels=[*LABELS, "proposer"])
            for rank, report in speculating:
                family.add_metric([self.model_name, rank, report.speculative_proposer], value_of(report))
            yield family

    def _cache_config(self, latest) -> GaugeMetricFamily:
        info = GaugeMetricFamily(PREFIX + "cache_config_info", "The rank's KV cache configuration (value 1)",
                                 labels=[*LABELS, *CACHE_CONFIG_LABELS])
        for rank, report, _ in latest:
            num_pages = report.kv_total_tokens // report.page_size if report.page_size > 0 else 0
            config = [str(report.page_size), str(num_pages), str(report.kv_total_tokens),
                      str(report.prefix_cache).lower(), report.kv_dtype]
            info.add_metric([self.model_name, rank, *config], 1)
        return info
