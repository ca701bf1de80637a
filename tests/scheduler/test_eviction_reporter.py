"""What a rank's radix cache evicts reaches the API workers: noted as the cache evicts, sent between steps."""

from __future__ import annotations

import dataclasses
import logging

from tercet.config import TercetConfig
from tercet.containment import ContainedFailures
from tercet.ipc.eviction_reports import EvictedPrefixesReport
from tercet.model.kv_cache import PageAllocator
from tercet.scheduler.eviction_reporter import EvictionReporter, eviction_reporter_of
from tercet.scheduler.radix_cache import RadixCache

PAGE = 4


def cache_with_reporter(num_pages=32, **kwargs):
    cache = RadixCache(PageAllocator(num_pages), PAGE)
    sent = []
    reporter = EvictionReporter(1, cache, sent.append, ContainedFailures("test", logging.getLogger("test")), **kwargs)
    cache.on_evict = reporter.record
    return cache, reporter, sent


def cache(cache: RadixCache, tokens, namespace=None):
    cache.insert(tokens, cache.page_allocator.alloc(len(tokens) // PAGE), namespace)


def test_each_evicted_node_is_reported_by_its_path_through_its_first_page_once_between_steps():
    radix, reporter, sent = cache_with_reporter()
    system = list(range(100, 108))
    cache(radix, system + [1, 1, 1, 1, 2, 2, 2, 2])
    cache(radix, system + [3, 3, 3, 3])
    cache(radix, [7] * 4, "adapter")
    assert radix.evict(1) == 2  # the oldest leaf: [1, 1, 1, 1, 2, 2, 2, 2] after the system prompt
    assert sent == []  # nothing before the loop says the step is over
    reporter.between_steps()
    assert sent == [EvictedPrefixesReport(1, [system + [1, 1, 1, 1]], [8], [None])]
    radix.clear()  # the rest: [3...], then the system prompt left childless, and the adapter's
    reporter.between_steps()
    reporter.between_steps()  # nothing new: nothing sent
    assert len(sent) == 2
    assert sorted(zip(sent[1].token_ids, sent[1].num_kept_tokens, sent[1].lora_names), key=str) == sorted([
        (system + [3, 3, 3, 3], 8, None), (system[:4], 0, None), ([7] * 4, 0, "adapter")], key=str)
    assert radix.num_cached_pages == 0


def test_a_large_eviction_is_sent_in_several_reports():
    radix, reporter, sent = cache_with_reporter(max_tokens_per_report=10)
    for first in range(5):
        cache(radix, [first] * 4)
    radix.clear()
    reporter.between_steps()
    assert [len(report.token_ids) for report in sent] == [2, 2, 1]


def test_a_failing_send_loses_the_report_not_the_rank():
    radix, reporter, _ = cache_with_reporter()

    def refuse(report):
        raise ValueError("over the limits")

    reporter.send = refuse
    cache(radix, [1] * 4)
    radix.clear()
    reporter.between_steps()
    assert reporter.failures.counts[("eviction_report", None)] == 1 and reporter.pending == []


def test_only_a_server_of_several_ranks_with_a_prefix_cache_reports():
    failures = ContainedFailures("test", logging.getLogger("test"))
    radix = RadixCache(PageAllocator(8), PAGE)
    one_rank = TercetConfig()
    two_ranks = dataclasses.replace(one_rank, scheduler=dataclasses.replace(one_rank.scheduler, dp_size=2))
    assert eviction_reporter_of(one_rank, 0, radix, print, failures) is None and radix.on_evict is None
    assert eviction_reporter_of(two_ranks, 0, None, print, failures) is None
    reporter = eviction_reporter_of(two_ranks, 0, radix, print, failures)
    assert radix.on_evict == reporter.record
