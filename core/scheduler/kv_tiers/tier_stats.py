"""What a KV storage tier did, for ``/metrics``: lookups and hits, bytes each way, evictions, read-back time.

Background threads add to these while the scheduler reads them, so each change
holds a lock (a handful of additions, never contended for long).
"""

from __future__ import annotations

import threading

from tercet.metrics.latency_histogram import LatencyHistogram

# Seconds: reading a prefix's pages back is milliseconds from memory, more from a disk.
READ_BACK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class TierStats:
    def __init__(self, tier: str):
        self.tier = tier
        self._lock = threading.Lock()
        # Requests whose cached prefix continued past the pool, looked up in the tier; those that found pages.
        self.lookups = 0
        self.hits = 0
        # Pages the radix cache evicted from the pool (each offered to the tier).
        self.evictions = 0
        # Pages written down (evicted from the pool into the tier), and read back into the pool.
        self.pages_written = 0
        self.pages_read = 0
        self.bytes_written = 0
        self.bytes_read = 0
        # Pages not written because the writer was too far behind; pages read back that failed their check.
        self.pages_dropped = 0
        self.pages_corrupt = 0
        self.read_back_time = LatencyHistogram(READ_BACK_BUCKETS)

    def add(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def observe_read_back(self, seconds: float) -> None:
        with self._lock:
            self.read_back_time.observe(seconds)

    def as_dict(self) -> dict:
        with self._lock:
            return {
                "tier": self.tier, "lookups": self.lookups, "hits": self.hits, "evictions": self.evictions,
                "pages_written": self.pages_written, "pages_read": self.pages_read,
                "bytes_written": self.bytes_written, "bytes_read": self.bytes_read,
                "pages_dropped": self.pages_dropped, "pages_corrupt": self.pages_corrupt,
                "read_back_time": self.read_back_time.as_dict(),
            }
