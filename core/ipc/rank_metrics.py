"""What a scheduler rank tells ``/metrics`` about itself, sent without being asked.

Each rank sends a :class:`RankMetricsReport` straight to the TokenizerManager
(as it sends control replies) between steps, so a scrape reads the latest one
and never waits for a rank that is in the middle of a long step
(:mod:`tercet.scheduler.metrics_reporter` decides when).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass(frozen=True)
class HistogramCounts:
    """A histogram of seconds: bucket upper bounds, the count at or under each then of all, and the sum."""

    buckets: list[float]
    cumulative: list[int]
    total: float

    @property
    def is_well_formed(self) -> bool:
        """One count per bound plus the +Inf one, never decreasing (a forged report may say anything)."""
        counts = self.cumulative
        return len(counts) == len(self.buckets) + 1 and all(a <= b for a, b in itertools.pairwise(counts))


@dataclass(frozen=True)
class RankMetricsReport:
    rank: int
    num_running_requests: int
    num_waiting_requests: int
    # KV pages that are not free, in tokens; of those, the pages only the prefix cache
    # holds (no request uses them: they are freed on demand); and all pages.
    kv_used_tokens: int
    kv_evictable_tokens: int
    kv_total_tokens: int
    page_size: int
    prefix_cache: bool
    # Prompt tokens of requests at their first admission, and how many came from the prefix cache.
    prompt_tokens_admitted: int
    prompt_tokens_from_cache: int
    # Running requests sent back to the waiting queue to free KV memory (preemptions).
    num_retractions: int
    # Seconds from arrival to first admission, from first admission to the first output
    # token, and from the first output token to the finish.
    queue_time: HistogramCounts
    prefill_time: HistogramCounts
    decode_time: HistogramCounts
    # Speculative decoding: the proposer ("" when off), request-steps that verified drafts,
    # the draft tokens verified, and those accepted.
    speculative_proposer: str = ""
    speculative_verifications: int = 0
    speculative_draft_tokens: int = 0
    speculative_accepted_tokens: int = 0
    # LoRA adapters: generate requests received per adapter, and adapters whose weights are held.
    lora_requests: dict[str, int] = field(default_factory=dict)
    lora_adapters_loaded: int = 0
    # The KV storage tier below the pool ("" without one): requests that looked below the pool
    # and those that found pages there, pages evicted from the pool, pages and bytes written
    # down and read back, pages dropped (writer behind) or failing their check, and the seconds
    # each read-back took.
    kv_storage_tier: str = ""
    kv_storage_lookups: int = 0
    kv_storage_hits: int = 0
    kv_storage_evictions: int = 0
    kv_storage_pages_written: int = 0
    kv_storage_pages_read: int = 0
    kv_storage_bytes_written: int = 0
    kv_storage_bytes_read: int = 0
    kv_storage_pages_dropped: int = 0
    kv_storage_pages_corrupt: int = 0
    kv_storage_read_back_time: HistogramCounts = field(default_factory=lambda: HistogramCounts([], [0], 0.0))
    # What the KV pool stores, as cache.kv_dtype names it ("" from a rank that did not say).
    kv_dtype: str = ""

    @property
    def histograms(self) -> tuple[HistogramCounts, ...]:
        return self.queue_time, self.prefill_time, self.decode_time, self.kv_storage_read_back_time


RANK_METRICS_MESSAGE_TYPES = {
    "tercet.histogram_counts": HistogramCounts,
    "tercet.rank_metrics_report": RankMetricsReport,
}
