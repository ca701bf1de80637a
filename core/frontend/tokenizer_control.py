"""The TokenizerManager's control plane: requests to every rank, and what the children report.

A part that :class:`tercet.frontend.tokenizer_manager.TokenizerManager` owns
(``manager.control_plane``), one concept of its own: a control request (flush
the cache, pause, a plugin's own) goes to every data-parallel rank through a
:class:`tercet.ipc.communicator.Communicator`, whose merged replies come back
to the API worker that asked; the ranks' figures for /metrics and the
detokenizer's contained failures arrive here too, as do the answers about
the server's API workers. It is built from the manager's router, worker
identity, metrics and failure counts.
"""

from __future__ import annotations

import logging
import os

from tercet.containment import ContainedFailures
from tercet.frontend.data_parallel_router import DataParallelRouter
from tercet.ipc.communicator import Communicator
from tercet.ipc.control_messages import ControlReply, ControlRequest
from tercet.ipc.messages import ContainedFailureReport
from tercet.ipc.rank_metrics import RankMetricsReport
from tercet.ipc.result_routes import ApiWorker
from tercet.metrics.serving_metrics import ServingMetrics

# Logged under the manager's name, as before this part moved here: log filters keep working.
logger = logging.getLogger("tercet.frontend.tokenizer_manager")


class ControlPlane:
    """Control requests to ``router``'s ranks, tagged as ``worker``'s; the ranks' figures go to
    ``metrics``, a confused sender is counted in ``failures`` (the server's own)."""

    def __init__(self, router: DataParallelRouter, worker: ApiWorker, metrics: ServingMetrics,
                 failures: ContainedFailures):
        self.router = router
        self.worker = worker
        self.metrics = metrics
        self.failures = failures
        # The detokenizer's contained failures, as it reports them (it logs its own).
        self.detokenizer_failures = ContainedFailures("detokenizer", logger)
        # One communicator per control request type, made when first sent.
        self.communicators: dict[type, Communicator] = {}
        # Every worker's process id, by number (the main process tells them all once they listen).
        self.worker_pids: dict[int, int] = {worker.number: os.getpid()}

    async def control(self, request_type: type[ControlRequest], timeout: float = 30.0, mode: str = "serial",
                      **fields) -> list[ControlReply]:
        """Send one control request to every rank; their replies, sorted by rank."""
        communicator = self.communicators.get(request_type)
        if communicator is None:
            communicator = Communicator(request_type, self.router.send_to_all_ranks, self.router.num_ranks, mode,
                                        tag_request_id=self.worker.tag)
            self.communicators[request_type] = communicator
        return await communicator.call(timeout, **fields)

    def handle_control_reply(self, reply: ControlReply) -> None:
        for communicator in self.communicators.values():
            communicator.handle_reply(reply)

    def handle_rank_metrics_report(self, report: RankMetricsReport) -> None:
        """A rank's figures for /metrics (tercet.scheduler.metrics_reporter): kept until its next report."""
        if not self.metrics.ranks.reported(report):  # no rank of this server sends that: a confused sender
            self.failures.count("unhandled_message")
            logger.error("dropped a metrics report for rank %r with malformed figures or no such rank", report.rank)

    def handle_contained_failure_report(self, report: ContainedFailureReport) -> None:
        if report.component == "detokenizer":
            self.detokenizer_failures.count(report.kind, report.plugin)
        else:  # no other child reports this way: a confused sender
            self.failures.count("unhandled_message")
            logger.error("dropped a failure report from an unknown component %r", report.component)

    def api_workers(self) -> list[dict]:
        """The server's API workers, for /get_server_info."""
        return [{"worker": number, "pid": pid, "is_this_one": number == self.worker.number}
                for number, pid in sorted(self.worker_pids.items())]

    def contained_failures(self) -> dict:
        """This process's and the detokenizer's counts, for /get_server_info (each rank reports its own)."""
        return {"server": self.failures.as_dict(), "detokenizer": self.detokenizer_failures.as_dict()}
