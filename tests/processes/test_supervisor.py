import os
import signal
import threading
import time

import pytest

from tercet.processes.supervisor import ChildFailed, ChildSupervisor, describe_exit
from tercet.processes.watchdog import StepHeartbeat


def report_ready(writer):
    writer.send(("ready", {"answer": 42}))
    time.sleep(60)


def report_failure(writer):
    writer.send(("failed", "ValueError: no model here"))


def die_silently(writer):
    os._exit(3)


def test_ready_child_reports_its_info_and_is_stopped():
    supervisor = ChildSupervisor()
    try:
        assert supervisor.start("worker", report_ready, (), timeout=60) == {"answer": 42}
        (child,) = supervisor.children
        assert child.process.is_alive()
    finally:
        supervisor.stop_all()
    assert not child.process.is_alive()


@pytest.mark.parametrize("target, reason", [(report_failure, "no model here"), (die_silently, "exited with code 3")])
def test_failures_at_start_up_are_named(target, reason):
    supervisor = ChildSupervisor()
    try:
        with pytest.raises(ChildFailed, match=f"worker process failed: .*{reason}"):
            supervisor.start("worker", target, (), timeout=60)
    finally:
        supervisor.stop_all()


def test_watch_reports_a_death():
    supervisor = ChildSupervisor()
    deaths = []
    try:
        supervisor.start("worker", report_ready, (), timeout=60)
        supervisor.watch(lambda name, reason: deaths.append((name, reason)))
        os.kill(supervisor.pids["worker"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not deaths and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        supervisor.stop_all()
    assert deaths == [("worker", "killed by signal SIGKILL")]


def test_describe_exit():
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(-9) == "killed by signal SIGKILL"


def hang_while_busy(heartbeat, writer):
    writer.send(("ready", {}))
    heartbeat.beat()  # a step starts and never ends
    time.sleep(60)


def beat_steadily(heartbeat, writer):
    writer.send(("ready", {}))
    while True:  # short steps, each a fresh beat, with rests between
        heartbeat.beat()
        time.sleep(0.05)
        heartbeat.rest()
        time.sleep(0.05)


def wait_for(deaths, seconds):
    deadline = time.monotonic() + seconds
    while not deaths and time.monotonic() < deadline:
        time.sleep(0.05)


def test_watchdog_kills_a_child_stuck_in_a_step():
    supervisor = ChildSupervisor()
    deaths = []
    heartbeat = StepHeartbeat()
    try:
        supervisor.start("scheduler", hang_while_busy, (heartbeat,), timeout=60, heartbeat=heartbeat)
        started = time.monotonic()
        supervisor.watch(lambda name, reason: deaths.append((name, reason)), watchdog_timeout=0.5)
        wait_for(deaths, 10)
        elapsed = time.monotonic() - started
        (child,) = supervisor.children
        assert not child.process.is_alive()
    finally:
        supervisor.stop_all()
    [(name, reason)] = deaths
    assert name == "scheduler"
    assert "server.watchdog_timeout = 0.5 s; killed by the watchdog" in reason
    assert 0.5 <= elapsed < 5


def test_watchdog_leaves_a_child_making_progress_alone():
    supervisor = ChildSupervisor()
    deaths = []
    heartbeat = StepHeartbeat()
    try:
        supervisor.start("scheduler", beat_steadily, (heartbeat,), timeout=60, heartbeat=heartbeat)
        supervisor.watch(lambda name, reason: deaths.append((name, reason)), watchdog_timeout=0.5)
        wait_for(deaths, 2)
        assert supervisor.children[0].process.is_alive()
    finally:
        supervisor.stop_all()
    assert deaths == []


def never_ready(writer):
    time.sleep(60)


def test_a_failure_reported_from_elsewhere_ends_a_start_up_wait():
    supervisor = ChildSupervisor()
    threading.Timer(0.5, supervisor.report_failure, ("scheduler-tp1 on node 1", "killed by signal SIGKILL")).start()
    started = time.monotonic()
    try:
        with pytest.raises(ChildFailed, match="scheduler-tp1 on node 1 process failed: killed by signal SIGKILL"):
            supervisor.start("scheduler-tp0", never_ready, (), timeout=60)
    finally:
        supervisor.stop_all()
    assert time.monotonic() - started < 30  # not the start-up timeout


def test_watch_reports_a_failure_from_elsewhere_once():
    supervisor = ChildSupervisor()
    deaths = []
    try:
        supervisor.start("worker", report_ready, (), timeout=60)
        supervisor.watch(lambda name, reason: deaths.append((name, reason)))
        supervisor.report_failure("node 1 launcher", "its link closed")
        supervisor.report_failure("node 2 launcher", "a later report is not the cause")
        deadline = time.monotonic() + 10
        while not deaths and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        supervisor.stop_all()
    assert deaths == [("node 1 launcher", "its link closed")]
    assert supervisor.children[0].process.exitcode is not None  # stop_all stopped the local child


def ignore_sigterm(stacks_path, writer):
    import faulthandler

    stacks = open(stacks_path, "w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    writer.send(("ready", {}))
    while True:
        time.sleep(60)


def test_a_child_that_outstays_sigterm_is_killed_after_the_grace_with_its_stacks_dumped(tmp_path, caplog):
    supervisor = ChildSupervisor()
    stacks = tmp_path / "stacks.txt"
    supervisor.start("stubborn", ignore_sigterm, (str(stacks),), timeout=60)
    supervisor.start("worker", report_ready, (), timeout=60)
    started = time.monotonic()
    supervisor.stop_all(timeout=1.0)
    took = time.monotonic() - started
    assert all(child.process.exitcode is not None for child in supervisor.children)
    assert supervisor.children[0].process.exitcode == -signal.SIGKILL
    assert "stubborn did not stop within 1 s of SIGTERM" in caplog.text
    assert "in ignore_sigterm" in stacks.read_text()
    assert took < 30  # one shared grace (the worker after it still gets a short one), not one per child
