"""Starting, watching and stopping the child processes.

Children are spawned (never forked: torch and ZeroMQ do not survive a fork),
report ready or their failure reason over a pipe, and are watched for the rest
of the server's life: a child that dies stops the whole server. A child with a
heartbeat (a scheduler) that stays busy without progress for longer than the
watchdog timeout is killed and reported like one that died. Failures on other
nodes are reported to the supervisor (:meth:`ChildSupervisor.report_failure`)
and count the same.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from tercet.errors import TercetError
from tercet.processes.watchdog import StepHeartbeat

logger = logging.getLogger(__name__)
_spawn = multiprocessing.get_context("spawn")


class ChildFailed(TercetError):
    def __init__(self, name: str, reason: str):
        super().__init__(f"{name} process failed: {reason}")
        self.name = name
        self.reason = reason


@dataclass(frozen=True)
class Child:
    name: str
    process: multiprocessing.Process
    heartbeat: StepHeartbeat | None = None


# Seconds the children get to exit on SIGTERM before they are killed: they exit at once
# unless a plugin's tercet_shutdown hook takes time. Less when stopping on a failure,
# where the server must be gone within seconds.
STOP_GRACE_SECONDS = 5.0
FAILED_STOP_GRACE_SECONDS = 2.0
MIN_STOP_SECONDS = 0.5

# How often the watcher looks at heartbeats when a watchdog is set.
WATCHDOG_POLL_SECONDS = 0.25


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class ChildSupervisor:
    def __init__(self):
        self.children: list[Child] = []
        self.is_stopping = False
        # A failure reported from outside this host's process tree (a worker on another node,
        # or a node lost): it ends a start-up wait and reaches watch() like a child's death.
        self.reported_failure: tuple[str, str] | None = None
        self._failure_reader, self._failure_writer = _spawn.Pipe(duplex=False)
        self._failure_lock = threading.Lock()

    def report_failure(self, name: str, reason: str) -> None:
        """Treat ``name`` as a child that died for ``reason`` (callable from any thread; the first report counts)."""
        with self._failure_lock:
            if self.reported_failure is not None:
                return
            self.reported_failure = (name, reason)
            self._failure_writer.send(self.reported_failure)

    def raise_reported_failure(self) -> None:
        if self.reported_failure is not None:
            raise ChildFailed(*self.reported_failure)

    def start(
        self, name: str, target: Callable, args: tuple, timeout: float, heartbeat: StepHeartbeat | None = None
    ) -> dict:
        """Start a child and wait until it reports ready; return what it reported.

        ``target(*args, ready_writer)`` runs in the child; a ``heartbeat`` the
        child beats is watched by :meth:`watch`.
        """
        return self.start_together([(name, target, args, heartbeat)], timeout)[0]

    def start_together(self, children: list[tuple], timeout: float) -> list[dict]:
        """Start ``(name, target, args, heartbeat)`` children at once, then wait until each is ready
        (a tensor-parallel group only comes up when all its ranks do); what each reported, in order."""
        started = []
        for name, target, args, heartbeat in children:
            reader, writer = _spawn.Pipe(duplex=False)
            process = _spawn.Process(target=target, args=(*args, writer), name=f"tercet-{name}")
            process.start()
            writer.close()
            self.children.append(Child(name, process, heartbeat))
            started.append((name, process, reader))
        deadline = time.monotonic() + timeout
        return [self._wait_until_ready(name, process, reader, deadline, timeout) for name, process, reader in started]

    def _wait_until_ready(self, name, process, reader, deadline: float, timeout: float) -> dict:
        while time.monotonic() < deadline:
            self.raise_reported_failure()
            if reader.poll(0.2):
                try:
                    status, detail = reader.recv()
                except EOFError:
                    process.join(5)
                    raise ChildFailed(name, describe_exit(process.exitcode)) from None
                if status == "ready":
                    logger.info("%s is ready (pid %d)", name, process.pid)
                    return detail
                raise ChildFailed(name, detail)
            if not process.is_alive():
                raise ChildFailed(name, describe_exit(process.exitcode))
        raise ChildFailed(name, f"not ready after {timeout:.0f} s (server.startup_timeout)")

    def watch(self, on_death: Callable[[str, str], None], watchdog_timeout: float | None = None) -> None:
        """Call ``on_death(name, reason)`` from a thread when any child dies, or
        when a child with a heartbeat has been busy for ``watchdog_timeout``
        seconds without progress (it is killed first)."""

        def watch_children():
            sentinels = {child.process.sentinel: child for child in self.children}
            poll = WATCHDOG_POLL_SECONDS if watchdog_timeout is not None else None
            while True:
                ready = multiprocessing.connection.wait([*sentinels, self._failure_reader], timeout=poll)
                if self.is_stopping:
                    return
                if self.reported_failure is not None:
                    on_death(*self.reported_failure)
                    return
                if ready:
                    child = sentinels[ready[0]]
                    child.process.join(1)
                    on_death(child.name, describe_exit(child.process.exitcode))
                    return
                stalled = self._stalled_child(watchdog_timeout)
                if stalled is not None:
                    child, seconds = stalled
                    child.process.kill()
                    child.process.join(5)
                    on_death(
                        child.name,
                        f"busy for {seconds:.1f} s without progress, over server.watchdog_timeout = "
                        f"{watchdog_timeout:g} s; killed by the watchdog",
                    )
                    return

        threading.Thread(target=watch_children, name="tercet-child-watch", daemon=True).start()

    def _stalled_child(self, watchdog_timeout: float | None) -> tuple[Child, float] | None:
        if watchdog_timeout is None:
            return None
        for child in self.children:
            if child.heartbeat is not None:
                seconds = child.heartbeat.stalled_for()
                if seconds > watchdog_timeout:
                    return child, seconds
        return None

    def stop_all(self, timeout: float = STOP_GRACE_SECONDS) -> None:
        """Stop children in reverse start order (each calls its ``tercet_shutdown`` in turn): SIGTERM,
        then a wait, all of them sharing ``timeout`` seconds (each gets at least
        ``MIN_STOP_SECONDS``). One still there has its threads' stacks written to the log (it
        should have exited at once) and is killed."""
        self.is_stopping = True
        deadline = time.monotonic() + timeout
        for child in reversed(self.children):
            if not child.process.is_alive():
                continue
            logger.info("stopping %s (pid %d)", child.name, child.process.pid)
            child.process.terminate()
            child.process.join(max(deadline - time.monotonic(), MIN_STOP_SECONDS))
            if child.process.is_alive():
                logger.warning("%s did not stop within %g s of SIGTERM; killing it, its stacks first", child.name, timeout)
                _dump_stacks(child.process)
                child.process.kill()
                child.process.join(5)

    @property
    def pids(self) -> dict[str, int]:
        return {child.name: child.process.pid for child in self.children}


# What a child answers with its threads' stacks (faulthandler, set up by tercet.processes.child):
# written from C, so it comes even from a main thread stuck in a C call.
STACK_DUMP_SIGNAL = signal.SIGUSR1
STACK_DUMP_WAIT_SECONDS = 0.5


def _dump_stacks(process: multiprocessing.Process) -> None:
    try:
        os.kill(process.pid, STACK_DUMP_SIGNAL)
    except ProcessLookupError:
        return
    process.join(STACK_DUMP_WAIT_SECONDS)
