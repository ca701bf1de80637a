"""Starting, watching and stopping the child processes.

Children are spawned (never forked: torch and ZeroMQ do not survive a fork),
report ready or their failure reason over a pipe, and are watched for the rest
of the server's life: a child that dies stops the whole server.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable

from tercet.errors import TercetError

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

    def start(self, name: str, target: Callable, args: tuple, timeout: float) -> dict:
        """Start a child and wait until it reports ready; return what it reported."""
        reader, writer = _spawn.Pipe(duplex=False)
        process = _spawn.Process(target=target, args=(*args, writer), name=f"tercet-{name}")
        process.start()
        writer.close()
        self.children.append(Child(name, process))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
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

    def watch(self, on_death: Callable[[str, str], None]) -> None:
        """Call ``on_death(name, reason)`` from a thread when any child dies."""

        def wait_for_a_death():
            sentinels = {child.process.sentinel: child for child in self.children}
            ready = multiprocessing.connection.wait(list(sentinels))
            if self.is_stopping:
                return
            child = sentinels[ready[0]]
            child.process.join(1)
            on_death(child.name, describe_exit(child.process.exitcode))

        threading.Thread(target=wait_for_a_death, name="tercet-child-watch", daemon=True).start()

    def stop_all(self, timeout: float = 5.0) -> None:
        """Stop children in reverse start order: terminate, then kill what lingers."""
        self.is_stopping = True
        for child in reversed(self.children):
            if child.process.is_alive():
                child.process.terminate()
                child.process.join(timeout)
            if child.process.is_alive():
                child.process.kill()
                child.process.join(timeout)

    @property
    def pids(self) -> dict[str, int]:
        return {child.name: child.process.pid for child in self.children}
