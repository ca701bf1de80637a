import random

import numpy
import pytest

from tercet.bench.streaming_client import RequestOutcome
from tercet.bench.summary import LatencyStats, percentile, summarize


def outcome(ttft=0.1, itl=(0.01, 0.03), latency=0.2, output_tokens=3, prompt_len=10, server_prompt_tokens=None, error=""):
    return RequestOutcome(
        is_success=not error,
        error=error,
        prompt_len=prompt_len,
        server_prompt_tokens=server_prompt_tokens,
        output_tokens=output_tokens,
        ttft=ttft,
        itl=tuple(itl),
        latency=latency,
    )


def test_percentile_interpolates_linearly_between_ranks():
    values = [4, 1, 3, 2]  # unsorted on purpose
    assert percentile(values, 0) == 1
    assert percentile(values, 100) == 4
    assert percentile(values, 50) == 2.5
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([5.0], 99) == 5.0


def test_percentile_agrees_with_numpys_default_method():
    rng = random.Random(0)
    values = [rng.expovariate(1.0) for _ in range(101)]
    for p in (0, 1, 25, 50, 90, 99, 99.9, 100):
        assert percentile(values, p) == pytest.approx(numpy.percentile(values, p))


def test_percentile_refuses_no_values_and_out_of_range():
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_latency_stats_are_in_milliseconds():
    stats = LatencyStats.of_seconds([0.1, 0.2, 0.3])
    assert stats.mean == pytest.approx(200)
    assert stats.p50 == pytest.approx(200)
    assert stats.p99 == pytest.approx(298)
    assert LatencyStats.of_seconds([]) is None


def test_summary_counts_completed_requests_only():
    outcomes = [
        outcome(ttft=0.1, itl=(0.01, 0.02), latency=0.5, output_tokens=3, server_prompt_tokens=12),
        outcome(ttft=0.3, itl=(0.03,), latency=1.0, output_tokens=2),
        outcome(ttft=None, itl=(), latency=0.1, output_tokens=0, error="HTTP 500: boom"),
        outcome(ttft=None, itl=(), latency=0.1, output_tokens=0, error="HTTP 500: boom"),
        outcome(ttft=0.2, itl=(9.0,), latency=9.0, output_tokens=1, error="1 of 4 output tokens"),
    ]
    summary = summarize(outcomes, duration_s=2.0)
    assert (summary.completed, summary.failed) == (2, 3)
    assert summary.total_input_tokens == 12 + 10  # the server's count where it gave one
    assert summary.total_output_tokens == 5
    assert summary.requests_per_s == 1.0
    assert summary.output_tokens_per_s == 2.5
    assert summary.input_tokens_per_s == 11.0
    assert summary.ttft.mean == pytest.approx(200)
    assert summary.itl.p50 == pytest.approx(20)  # pooled: 10, 20, 30 ms
    assert summary.e2e_latency.p99 == pytest.approx(995)
    assert summary.itl_basis == "chunk"
    assert summary.errors == (("HTTP 500: boom", 2), ("1 of 4 output tokens", 1))


def test_summary_of_only_failures_has_no_latencies():
    summary = summarize([outcome(ttft=None, itl=(), error="ConnectError: refused")], duration_s=0.5)
    assert (summary.completed, summary.failed, summary.requests_per_s) == (0, 1, 0.0)
    assert summary.ttft is None and summary.itl is None and summary.e2e_latency is None
