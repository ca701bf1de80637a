"""Telling the API workers what this rank's prefix cache evicted, so routing by prefix stops counting on it.

The radix cache calls :meth:`EvictionReporter.record` for each node it evicts (its
``on_evict``), while the node still hangs in the tree; the reporter notes the tokens from the
root through the node's first page and the adapter whose tree it was, and sends what it noted
as :class:`~tercet.ipc.eviction_reports.EvictedPrefixesReport`\\ s between steps, to every API
worker. A cascade (a leaf, then its parent left childless) reports each node: the parent's
entry covers the leaf's, and a balancer forgetting both does no harm. Only a server with
several data-parallel ranks reports (:func:`eviction_reporter_of`): with one rank nothing
is routed.
"""

from __future__ import annotations

from collections.abc import Callable

from tercet.containment import ContainedFailures
from tercet.ipc.eviction_reports import EvictedPrefixesReport

# Tokens per report, at most: a flush of a large cache is sent as several reports, each far
# below any sane ipc.max_message_bytes (about 5 bytes a token in msgpack).
MAX_TOKENS_PER_REPORT = 256 * 1024


class EvictionReporter:
    def __init__(self, rank: int, prefix_cache, send: Callable[[EvictedPrefixesReport], None],
                 failures: ContainedFailures, max_tokens_per_report: int = MAX_TOKENS_PER_REPORT):
        self.rank = rank
        self.prefix_cache = prefix_cache
        self.send = send
        self.failures = failures
        self.max_tokens_per_report = max_tokens_per_report
        # (tokens through the first evicted page, tokens still held, adapter), in eviction order.
        self.pending: list[tuple[list[int], int, str | None]] = []

    def record(self, node) -> None:
        """The cache is evicting ``node`` (still linked to its parent). Never raises: the cache is mid-eviction."""
        try:
            self.pending.append(self._evicted_entry(node))
        except Exception:
            self.failures.record("eviction_report", "noting an evicted prefix for the API workers failed")

    def _evicted_entry(self, node) -> tuple[list[int], int, str | None]:
        pieces = []
        ancestor = node.parent
        while ancestor.parent is not None:
            pieces.append(ancestor.token_ids)
            ancestor = ancestor.parent
        kept = [token for piece in reversed(pieces) for token in piece]
        num_kept = len(kept)
        kept.extend(node.token_ids[:self.prefix_cache.page_size])
        namespace = next((name for name, root in self.prefix_cache.roots.items() if root is ancestor), None)
        return kept, num_kept, namespace

    def between_steps(self) -> None:
        """Send what was evicted since the last call, if anything; called by the loop between steps."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        try:
            for batch in self._batches(pending):
                self.send(EvictedPrefixesReport(self.rank, [entry[0] for entry in batch],
                                                [entry[1] for entry in batch], [entry[2] for entry in batch]))
        except Exception:  # a stale routing guess is not worth a rank
            self.failures.record("eviction_report", "sending the rank's eviction report failed")

    def _batches(self, pending):
        batch, num_tokens = [], 0
        for entry in pending:
            if batch and num_tokens + len(entry[0]) > self.max_tokens_per_report:
                yield batch
                batch, num_tokens = [], 0
            batch.append(entry)
            num_tokens += len(entry[0])
        yield batch


def eviction_reporter_of(config, rank: int, prefix_cache, send, failures: ContainedFailures) -> EvictionReporter | None:
    """The rank's reporter, hooked to its cache's evictions; None with one data-parallel rank or no prefix cache."""
    if prefix_cache is None or config.scheduler.dp_size < 2:
        return None
    reporter = EvictionReporter(rank, prefix_cache, send, failures)
    prefix_cache.on_evict = reporter.record
    return reporter
