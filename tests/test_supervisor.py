import os
import signal
import time

import pytest

from tercet.supervisor import ChildFailed, ChildSupervisor, describe_exit


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
