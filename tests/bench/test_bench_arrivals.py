import asyncio
import itertools
import statistics
import time

import pytest

from tercet.bench.arrivals import (
    at_fixed_concurrency,
    at_poisson_rate,
    poisson_arrival_times,
)


class InFlight:
    """A stand-in workload (not a server): sleeps, and records how many ran at once."""

    def __init__(self, seconds: float = 0.01):
        self.seconds = seconds
        self.now = 0
        self.most = 0
        self.sent_at: list[float] = []

    async def send(self, item):
        self.sent_at.append(time.perf_counter())
        self.now += 1
        self.most = max(self.most, self.now)
        await asyncio.sleep(self.seconds * (1 + item % 3))
        self.now -= 1
        return item * 10


def test_fixed_concurrency_keeps_exactly_n_in_flight_and_keeps_order():
    work = InFlight()
    results = asyncio.run(at_fixed_concurrency(work.send, list(range(20)), 4))
    assert results == [item * 10 for item in range(20)]
    assert work.most == 4


def test_fixed_concurrency_above_the_item_count():
    work = InFlight()
    assert asyncio.run(at_fixed_concurrency(work.send, [1, 2], 8)) == [10, 20]
    assert work.most == 2


def test_poisson_arrivals_are_seeded_and_have_the_asked_rate():
    times = poisson_arrival_times(rate=4.0, count=4000, seed=3)
    assert times == poisson_arrival_times(rate=4.0, count=4000, seed=3)
    assert times != poisson_arrival_times(rate=4.0, count=4000, seed=4)
    assert times[0] == 0 and times == sorted(times)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.05)
    assert poisson_arrival_times(rate=1.0, count=0, seed=0) == []


def test_poisson_rate_sends_on_schedule_within_the_cap():
    work = InFlight(seconds=0.05)
    started = time.perf_counter()
    results = asyncio.run(at_poisson_rate(work.send, list(range(12)), rate=100.0, seed=0, max_concurrency=3))
    assert results == [item * 10 for item in range(12)]
    assert work.most <= 3
    assert time.perf_counter() - started < 5


def test_poisson_rate_follows_the_arrival_times():
    work = InFlight(seconds=0.0)
    asyncio.run(at_poisson_rate(work.send, list(range(5)), rate=20.0, seed=1))
    due = poisson_arrival_times(20.0, 5, seed=1)
    offsets = [sent - work.sent_at[0] for sent in work.sent_at]
    for offset, expected in zip(offsets, due):
        assert offset == pytest.approx(expected, abs=0.05)
