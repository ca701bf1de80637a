"""The API workers seen from the main process (``server.api_workers > 1``).

The main process then serves no HTTP itself: it starts the workers last (each is
a child like the others, so one that fails to start names itself, and one that
dies later is a child failure), passes SIGTERM/SIGINT on to them (each drains its
own requests), tells them when a child died (each ends its requests in flight
and, with ``on_child_failure = "exit"``, stops), and returns once every worker has
exited.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import signal
import threading
from collections.abc import Callable

from tercet.ipc.result_routes import ApiWorker
from tercet.processes.supervisor import ChildSupervisor

logger = logging.getLogger("tercet.launch")

# After telling the workers to stop on a failure: how long they get before the supervisor kills them.
FAILED_WORKER_EXIT_SECONDS = 3.0


class ApiWorkerGroup:
    def __init__(self, supervisor: ChildSupervisor, num_workers: int, on_child_failure: str):
        self.supervisor = supervisor
        self.workers = [ApiWorker(number, num_workers) for number in range(1, num_workers + 1)]
        self.stays_up = on_child_failure == "unhealthy"
        self.to_workers: list = []
        self.processes: list = []
        self.exit_code = 0
        self.failed = threading.Event()
        self.lock = threading.Lock()

    def start(self, target: Callable, args_of: Callable[[ApiWorker], tuple], timeout: float) -> None:
        """Start every worker (``target(*args_of(worker), from_main, ready_writer)``) and wait until all listen."""
        children = []
        for worker in self.workers:
            from_main, to_worker = multiprocessing.get_context("spawn").Pipe(duplex=False)
            self.to_workers.append(to_worker)
            children.append((worker.title.removeprefix("tercet "), target, (*args_of(worker), from_main), None))
        first = len(self.supervisor.children)
        reports = self.supervisor.start_together(children, timeout)
        self.processes = [child.process for child in self.supervisor.children[first:]]
        pids = {worker.number: report["pid"] for worker, report in zip(self.workers, reports)}
        self._tell_all(("workers", pids))

    def serve(self, watchdog_timeout: float) -> int:
        """Until every worker has exited: 0 after a drain, 1 after a failure."""
        previous = {number: signal.signal(number, self._on_signal) for number in (signal.SIGINT, signal.SIGTERM)}
        self.supervisor.watch(self._on_death, watchdog_timeout=watchdog_timeout)
        try:
            self._wait_for_workers()
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        return self.exit_code

    def _wait_for_workers(self) -> None:
        # By their sentinels alone: is_alive() would reap a dead worker here while the supervisor's
        # watch thread reaps it too, and the thread that loses reads no exit status ("still running").
        alive = {process.sentinel for process in self.processes}
        while alive:
            timeout = FAILED_WORKER_EXIT_SECONDS if self.failed.is_set() and not self.stays_up else None
            ready = multiprocessing.connection.wait(list(alive), timeout=timeout)
            if not ready:  # told to stop after a failure and still there: the supervisor kills them
                return
            alive.difference_update(ready)

    def _on_signal(self, signal_number: int, frame) -> None:
        # A worker stopped on purpose is no failure.
        self.supervisor.is_stopping = True
        for process in self.processes:
            process.terminate()  # one already gone is not signalled (and is left for the supervisor to reap)

    def _on_death(self, name: str, reason: str) -> None:
        """A child died (a worker, a scheduler, the detokenizer): every worker hears of it."""
        self.exit_code = 1
        self.failed.set()
        logger.error("%s process died (%s); %s", name, reason,
                     "the API workers answer 503 (server.on_child_failure = unhealthy)" if self.stays_up
                     else "stopping the server")
        self._tell_all(("child_died", name, reason))

    def _tell_all(self, message: tuple) -> None:
        with self.lock:
            for to_worker, process in zip(self.to_workers, self.processes):
                if process.is_alive():
                    try:
                        to_worker.send(message)
                    except OSError:  # it died meanwhile: its death is reported by itself
                        pass
