"""The rank collector publishes each rank's latest report, and only reports a rank of this server could send."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from tercet.ipc.rank_metrics import HistogramCounts, RankMetricsReport
from tercet.metrics.rank_collector import RankCollector

EMPTY = HistogramCounts([0.1, 1.0], [0, 0, 0], 0.0)


def report(rank=0, **changes) -> RankMetricsReport:
    fields = dict(num_running_requests=2, num_waiting_requests=1, kv_used_tokens=64, kv_evictable_tokens=16,
                  kv_total_tokens=256, page_size=8, prefix_cache=True, kv_dtype="int8", prompt_tokens_admitted=40,
                  prompt_tokens_from_cache=10, num_retractions=3, queue_time=EMPTY,
                  prefill_time=HistogramCounts([0.1, 1.0], [1, 2, 2], 0.3), decode_time=EMPTY)
    return RankMetricsReport(rank=rank, **{**fields, **changes})


class Clock:
    now = 10.0

    def __call__(self):
        return self.now


def collector_in_registry(num_ranks=2):
    clock = Clock()
    collector = RankCollector("m", num_ranks, clock)
    registry = CollectorRegistry()
    registry.register(collector)
    return collector, registry, clock


def sample(registry, name, rank="0", **labels):
    return registry.get_sample_value(name, {"model_name": "m", "dp_rank": rank, **labels})


def test_the_latest_report_of_each_rank_is_published():
    collector, registry, clock = collector_in_registry()
    assert collector.reported(report(0)) and collector.reported(report(1, num_running_requests=5))
    assert collector.reported(report(0, num_running_requests=7))
    clock.now += 1.5
    assert sample(registry, "tercet:num_requests_running") == 7
    assert sample(registry, "tercet:num_requests_running", "1") == 5
    assert sample(registry, "tercet:rank_metrics_age_seconds") == 1.5
    assert sample(registry, "tercet:num_preemptions_total") == 3
    assert sample(registry, "tercet:prefix_cache_hit_rate") == 0.25
    assert sample(registry, "tercet:request_prefill_time_seconds_bucket", le="0.1") == 1
    assert sample(registry, "tercet:request_prefill_time_seconds_count") == 2
    assert sample(registry, "tercet:cache_config_info", page_size="8", num_pages="32", max_total_tokens="256",
                  prefix_cache="true", kv_dtype="int8") == 1


def test_kv_usage_counts_what_requests_hold_and_the_evictable_cache_apart():
    collector, registry, _ = collector_in_registry()
    collector.reported(report())
    assert sample(registry, "tercet:kv_cache_usage_perc") == (64 - 16) / 256
    assert sample(registry, "tercet:kv_cache_evictable_perc") == 16 / 256


def test_a_report_no_rank_could_send_is_dropped():
    collector, registry, _ = collector_in_registry(num_ranks=1)
    assert not collector.reported(report(1))
    assert not collector.reported(report(-1))
    assert not collector.reported(report(0, decode_time=HistogramCounts([0.1], [3, 1], 1.0)))
    assert collector.reports == {}
    assert sample(registry, "tercet:num_requests_running") is None


def test_speculation_figures_are_published_per_proposer_only_while_one_is_set():
    collector, registry, _ = collector_in_registry()
    collector.reported(report(0))
    assert sample(registry, "tercet:spec_decode_num_draft_tokens_total", proposer="ngram") is None
    collector.reported(report(1, speculative_proposer="ngram", speculative_verifications=10,
                              speculative_draft_tokens=40, speculative_accepted_tokens=30))
    assert sample(registry, "tercet:spec_decode_num_draft_tokens_total", "1", proposer="ngram") == 40
    assert sample(registry, "tercet:spec_decode_num_accepted_tokens_total", "1", proposer="ngram") == 30
    assert sample(registry, "tercet:spec_decode_acceptance_rate", "1", proposer="ngram") == 0.75
    assert sample(registry, "tercet:spec_decode_mean_accepted_length", "1", proposer="ngram") == 3.0
    assert sample(registry, "tercet:spec_decode_acceptance_rate", "0", proposer="") is None


def test_lora_adapters_loaded_and_requests_per_adapter_are_published():
    collector, registry, _ = collector_in_registry()
    collector.reported(report(0, lora_requests={"sql": 3, "chat": 1}, lora_adapters_loaded=2))
    collector.reported(report(1))
    assert sample(registry, "tercet:lora_adapters_loaded") == 2
    assert sample(registry, "tercet:lora_adapters_loaded", "1") == 0
    assert sample(registry, "tercet:lora_requests_total", lora_name="sql") == 3
    assert sample(registry, "tercet:lora_requests_total", lora_name="chat") == 1


def test_a_kv_storage_tier_is_published_by_tier_only_while_one_is_configured():
    collector, registry, _ = collector_in_registry()
    collector.reported(report(0))
    assert sample(registry, "tercet:kv_storage_lookups_total", tier="file") is None
    collector.reported(report(
        0, kv_storage_tier="file", kv_storage_lookups=8, kv_storage_hits=6, kv_storage_evictions=40,
        kv_storage_pages_written=38, kv_storage_pages_read=30, kv_storage_bytes_written=3800,
        kv_storage_bytes_read=3000, kv_storage_pages_corrupt=1,
        kv_storage_read_back_time=HistogramCounts([0.01, 0.1], [4, 6, 6], 0.2)))
    assert sample(registry, "tercet:kv_storage_lookups_total", tier="file") == 8
    assert sample(registry, "tercet:kv_storage_hit_rate", tier="file") == 0.75
    assert sample(registry, "tercet:kv_storage_evictions_total", tier="file") == 40
    assert sample(registry, "tercet:kv_storage_written_bytes_total", tier="file") == 3800
    assert sample(registry, "tercet:kv_storage_read_bytes_total", tier="file") == 3000
    assert sample(registry, "tercet:kv_storage_pages_corrupt_total", tier="file") == 1
    assert sample(registry, "tercet:kv_storage_read_back_seconds_bucket", tier="file", le="0.01") == 4
    assert sample(registry, "tercet:kv_storage_read_back_seconds_count", tier="file") == 6


def test_a_report_with_a_malformed_read_back_histogram_is_dropped():
    collector, _, _ = collector_in_registry()
    assert not collector.reported(report(0, kv_storage_tier="host",
                                         kv_storage_read_back_time=HistogramCounts([0.1], [3, 1], 0.0)))
