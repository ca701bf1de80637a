"""The rank's metrics reporter: it sends between steps, unasked, at most every interval while busy and
whenever the figures changed before resting; a failure to report costs a count, not the rank."""

from __future__ import annotations

import logging

from tercet.containment import ContainedFailures
from tercet.scheduler.metrics_reporter import RankMetricsReporter, report_of
from tercet.scheduler.stats import SchedulerStats


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reporter_of(figures: list, sent: list, clock: Clock, failures=None) -> RankMetricsReporter:
    return RankMetricsReporter(lambda: figures[0], sent.append, failures or ContainedFailures("test"),
                               interval=0.25, clock=clock)


def test_a_busy_rank_reports_at_most_every_interval_and_a_resting_one_when_something_changed():
    figures, sent, clock = ["a"], [], Clock()
    reporter = reporter_of(figures, sent, clock)
    reporter.between_steps(resting=False)
    figures[0] = "b"
    clock.now += 0.1
    reporter.between_steps(resting=False)
    assert sent == ["a"]  # too soon
    clock.now += 0.2
    reporter.between_steps(resting=False)
    assert sent == ["a", "b"]
    reporter.between_steps(resting=True)
    assert sent == ["a", "b"]  # nothing changed since
    figures[0] = "c"
    reporter.between_steps(resting=True)  # however soon: the figures a resting rank leaves must be exact
    assert sent == ["a", "b", "c"]


def test_a_report_that_fails_is_counted_and_the_rank_goes_on(caplog):
    failures, clock = ContainedFailures("test"), Clock()

    def broken():
        raise RuntimeError("a bug in the figures")

    reporter = RankMetricsReporter(broken, [].append, failures, clock=clock)
    with caplog.at_level(logging.ERROR):
        reporter.between_steps(resting=True)
    assert failures.as_dict()["by_kind"] == {"metrics_report": 1}


def test_a_report_carries_the_stats_and_whether_the_prefix_cache_is_on():
    histogram = {"buckets": [0.5], "cumulative": [1, 3], "sum": 2.0, "count": 3}
    stats = SchedulerStats(rank=1, num_running_requests=2, num_waiting_requests=3, page_size=8, kv_used_tokens=80,
                           kv_total_tokens=800, prefix_cache_tokens=24, prompt_tokens_admitted=50,
                           prompt_tokens_from_cache=10, num_retractions=4, is_paused=False, kv_evictable_tokens=16,
                           queue_time=histogram, prefill_time=histogram, decode_time=histogram)
    report = report_of(stats, prefix_cache=True)
    assert (report.rank, report.kv_used_tokens, report.kv_evictable_tokens, report.num_retractions) == (1, 80, 16, 4)
    assert report.prefix_cache and report.page_size == 8
    assert report.decode_time.cumulative == [1, 3] and report.decode_time.total == 2.0
