"""What a scheduler rank tells about itself: a read-only snapshot for control handlers.

Plugins' scheduler-side message handlers receive this, not the Scheduler:
the scheduler's queues and KV bookkeeping have one owner, and a handler that
could reach them could break them. ``GET /get_server_info`` reports the same
figures for every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tercet.scheduler.kv_memory import RequestKVMemory
    from tercet.scheduler.request_queues import RequestQueues


@dataclass(frozen=True)
class SchedulerStats:
    rank: int
    num_running_requests: int
    # Completions waiting to be admitted (the n of a request each count).
    num_waiting_requests: int
    page_size: int
    # KV pages not free (held by requests or by the prefix cache), and all pages, in tokens.
    kv_used_tokens: int
    kv_total_tokens: int
    # Tokens of the pages the prefix cache holds (0 with the cache off).
    prefix_cache_tokens: int
    # Prompt tokens of requests at their first admission, and how many came from the prefix cache.
    prompt_tokens_admitted: int
    prompt_tokens_from_cache: int
    num_retractions: int
    is_paused: bool
    # Of the prefix cache's tokens, those of pages no running request uses: evictable,
    # freed on demand, so as good as free (a default: plugins built these before it came).
    kv_evictable_tokens: int = 0
    # Seconds from arrival to first admission, from first admission to the first output
    # token, and from there to the finish: LatencyHistogram.as_dict() each (empty when not given).
    queue_time: dict = field(default_factory=dict)
    prefill_time: dict = field(default_factory=dict)
    decode_time: dict = field(default_factory=dict)
    # Speculative decoding's figures (tercet.scheduler.speculative.speculation.SpeculationStats.as_dict);
    # empty when no proposer is configured.
    speculation: dict = field(default_factory=dict)
    # LoRA adapters: generate requests received per adapter name, and adapters whose weights are held.
    lora_requests: dict = field(default_factory=dict)
    lora_adapters_loaded: int = 0
    # The tier below the pool's figures (tercet.scheduler.kv_tiers.tier_stats.TierStats.as_dict);
    # empty without one. /metrics reads each as the report's ``kv_storage_<figure>``.
    kv_storage: dict = field(default_factory=dict)
    # What the pool stores, as ``cache.kv_dtype`` names it (int8, bfloat16…); "" without a pool.
    kv_dtype: str = ""

    def __getattr__(self, name: str):
        # Only for names no field or property has: the report's kv_storage_* figures.
        if not name.startswith("kv_storage_"):
            raise AttributeError(name)
        figure = name.removeprefix("kv_storage_")
        if figure == "read_back_time":
            return self.kv_storage.get(figure) or {"buckets": [], "cumulative": [0], "sum": 0.0}
        return self.kv_storage.get(figure, "" if figure == "tier" else 0)

    @property
    def kv_usage(self) -> float:
        return self.kv_used_tokens / self.kv_total_tokens if self.kv_total_tokens else 0.0

    # The figures /metrics takes from ``speculation``, by the report's field names.
    @property
    def speculative_proposer(self) -> str:
        return self.speculation.get("proposer", "")

    @property
    def speculative_verifications(self) -> int:
        return self.speculation.get("verifications", 0)

    @property
    def speculative_draft_tokens(self) -> int:
        return self.speculation.get("draft_tokens", 0)

    @property
    def speculative_accepted_tokens(self) -> int:
        return self.speculation.get("accepted_tokens", 0)

    @classmethod
    def of(cls, rank: int, queues: "RequestQueues", kv_memory: "RequestKVMemory",
           speculation: dict | None = None, adapters=None) -> "SchedulerStats":
        """The figures of a rank's RequestQueues and RequestKVMemory now (and of its speculation)."""
        # Here, not at the top: plugins import this module, and the name needs torch.
        from tercet.model.kv_dtypes import kv_dtype_name

        page_size = kv_memory.page_size
        allocator = kv_memory.page_allocator
        cache = kv_memory.prefix_cache
        return cls(
            rank=rank,
            num_running_requests=queues.num_running,
            num_waiting_requests=queues.num_waiting,
            page_size=page_size,
            kv_used_tokens=(allocator.num_total - allocator.num_free) * page_size,
            kv_total_tokens=kv_memory.capacity_tokens,
            prefix_cache_tokens=cache.num_cached_pages * page_size if cache else 0,
            kv_evictable_tokens=cache.num_evictable_pages * page_size if cache else 0,
            prompt_tokens_admitted=queues.num_prompt_tokens_admitted,
            prompt_tokens_from_cache=queues.num_prompt_tokens_from_cache,
            num_retractions=queues.num_retractions,
            is_paused=queues.is_paused,
            queue_time=queues.times.queue.as_dict(),
            prefill_time=queues.times.prefill.as_dict(),
            decode_time=queues.times.decode.as_dict(),
            speculation=speculation or {},
            lora_requests=dict(adapters.num_requests) if adapters is not None else {},
            lora_adapters_loaded=len(adapters.recency) if adapters is not None else 0,
            kv_storage=kv_memory.kv_tiers.stats.as_dict() if getattr(kv_memory, "kv_tiers", None) else {},
            kv_dtype=kv_dtype_name(kv_memory.kv_cache.dtype) if kv_memory.kv_cache is not None else "",
        )
