"""A histogram of durations with fixed buckets, cheap enough to fill on the scheduler's loop.

Observing is a bisect and three additions; reading gives the cumulative
bucket counts Prometheus histograms carry, so another process (the API
server, at ``/metrics``) can publish them as they are.
"""

from __future__ import annotations

import bisect

# Seconds; the upper bounds of the buckets (the last, +Inf, is implied).
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class LatencyHistogram:
    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def as_dict(self) -> dict:
        """``{"buckets": [upper bounds], "cumulative": [counts ≤ each bound, then all], "sum", "count"}``."""
        cumulative, running = [], 0
        for count in self.counts:
            running += count
            cumulative.append(running)
        return {"buckets": list(self.buckets), "cumulative": cumulative, "sum": self.total, "count": running}
