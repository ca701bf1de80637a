"""The compile pool: a place per worker, and written-off work that holds no place."""

from __future__ import annotations

import os
import threading

import pytest

from tercet.scheduler.grammar.compile_pool import WRITTEN_OFF_PER_WORKER, CompilePool

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


def test_written_off_work_frees_its_place_for_the_next_start():
    pool, gate = CompilePool(1), threading.Event()
    slow = pool.submit(blocked_until(gate, "slow"))
    queued = pool.submit(lambda: "behind it")
    pool.write_off(slow)
    pool.start_queued()
    # The work behind it starts while the written-off one still runs.
    assert queued.result(WAIT_S) == "behind it"
    assert pool.num_written_off == 1 and not slow.done()
    gate.set()
    assert slow.result(WAIT_S) == "slow"
    assert pool.num_written_off == 0


def test_a_burst_of_write_offs_starts_nothing_the_next_one_writes_off():
    pool, gate = CompilePool(1), threading.Event()
    first = pool.submit(blocked_until(gate, 1))
    second = pool.submit(blocked_until(gate, 2))
    pool.write_off(first)
    pool.write_off(second)
    assert second.cancelled() and pool.num_written_off == 1
    gate.set()


def test_written_off_work_still_running_is_capped():
    pool, gate = CompilePool(1), threading.Event()
    for value in range(WRITTEN_OFF_PER_WORKER):
        pool.write_off(pool.submit(blocked_until(gate, value)))
        pool.start_queued()
    assert pool.num_written_off == WRITTEN_OFF_PER_WORKER
    # The next waits for one of them to end, though its place is free.
    third = pool.submit(lambda: 3)
    assert not third.running() and pool.num_running == 0
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


def test_compiles_run_at_a_lower_priority_than_the_loop():
    niceness = CompilePool(1).submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    loop = os.getpriority(os.PRIO_PROCESS, 0)
    assert niceness.result(WAIT_S) > loop or loop == 19
