"""The compile pool: a place per worker, and written-off work that holds no place."""

from __future__ import annotations

import threading

import pytest

from tercet.scheduler.compile_pool import CompilePool

WAIT_S = 60


def blocked_until(gate: threading.Event, value):
    def work():
        assert gate.wait(WAIT_S)
        return value

    return work


def test_work_beyond_the_workers_waits_for_a_place():
    pool, gate = CompilePool(1), threading.Event()
    first = pool.submit(blocked_until(gate, "first"))
    second = pool.submit(lambda: "second")
    assert pool.num_running == 1 and not second.running()
    gate.set()
    assert (first.result(WAIT_S), second.result(WAIT_S)) == ("first", "second")


def test_written_off_work_frees_its_place_at_once():
    pool, gate = CompilePool(1), threading.Event()
    slow = pool.submit(blocked_until(gate, "slow"))
    queued = pool.submit(lambda: "behind it")
    pool.write_off(slow)
    # The work behind it starts while the written-off one still runs.
    assert queued.result(WAIT_S) == "behind it"
    assert pool.num_written_off == 1 and not slow.done()
    gate.set()
    assert slow.result(WAIT_S) == "slow"
    assert pool.num_written_off == 0


def test_written_off_work_still_running_is_capped_at_the_workers():
    pool, gate = CompilePool(1), threading.Event()
    slow = pool.submit(blocked_until(gate, 1))
    pool.write_off(slow)
    second = pool.submit(blocked_until(gate, 2))
    pool.write_off(second)
    # One written off already runs besides the one place: the next waits for either to end.
    third = pool.submit(lambda: 3)
    assert not third.running() and pool.num_written_off == 2
    gate.set()
    assert third.result(WAIT_S) == 3


def test_work_written_off_before_it_started_never_runs():
    pool, gate = CompilePool(1), threading.Event()
    started = []
    running = pool.submit(blocked_until(gate, None))
    queued = pool.submit(lambda: started.append(True))
    pool.write_off(queued)
    assert queued.cancelled()
    gate.set()
    running.result(WAIT_S)
    assert started == []


def test_a_failure_reaches_whoever_waits():
    pool = CompilePool(2)
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(WAIT_S)
    assert pool.submit(lambda: "still serving").result(WAIT_S) == "still serving"
