"""When a rank sends its figures to ``/metrics``: between steps, unasked, so a scrape never waits.

A scrape that asked every rank would wait for the slowest one's step to end: a
long prefill made ``/metrics`` time out and lose the API process's counters with
it. So each rank sends a :class:`~tercet.ipc.rank_metrics.RankMetricsReport`
itself, and the API process publishes the latest one it has:

- while busy, after a step, at most every ``interval`` seconds;
- before resting (nothing to do until a message comes), when the figures changed,
  so an idle server's figures are exact.

During one long step nothing is sent, and the figures stay those of the step
before (``tercet:rank_metrics_age_seconds`` says how old they are).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from tercet.containment import ContainedFailures
from tercet.ipc.rank_metrics import HistogramCounts, RankMetricsReport
from tercet.scheduler.stats import SchedulerStats

# Seconds between reports of a busy rank: what a scraper sees is at most this old
# (plus one step); each report costs the loop some tens of microseconds.
REPORT_INTERVAL = 0.25


HISTOGRAM_FIELDS = ("queue_time", "prefill_time", "decode_time", "kv_storage_read_back_time")


def report_of(stats: SchedulerStats, prefix_cache: bool) -> RankMetricsReport:
    """The report of ``stats``: the fields of the same name, the histograms as HistogramCounts."""
    figures = {
        name: _counts(getattr(stats, name)) if name in HISTOGRAM_FIELDS else getattr(stats, name)
        for name in (f.name for f in dataclasses.fields(RankMetricsReport)) if name != "prefix_cache"
    }
    return RankMetricsReport(prefix_cache=prefix_cache, **figures)


def _counts(histogram: dict) -> HistogramCounts:
    return HistogramCounts(histogram["buckets"], histogram["cumulative"], histogram["sum"])


class RankMetricsReporter:
    """Sends ``report()`` through ``send`` as the module docstring says."""

    def __init__(self, report: Callable[[], RankMetricsReport], send: Callable[[RankMetricsReport], None],
                 failures: ContainedFailures, interval: float = REPORT_INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.report = report
        self.send = send
        self.failures = failures
        self.interval = interval
        self.clock = clock
        self.last_sent: RankMetricsReport | None = None
        self.last_looked_at = float("-inf")

    def between_steps(self, resting: bool) -> None:
        """Called by the loop before it waits (``resting``) or goes on to the next step."""
        now = self.clock()
        if not resting and now - self.last_looked_at < self.interval:
            return
        self.last_looked_at = now
        try:
            report = self.report()
            if report != self.last_sent:
                self.send(report)
                self.last_sent = report
        except Exception:  # figures for a dashboard are not worth a rank
            self.failures.record("metrics_report", "building or sending the rank's metrics report failed")
