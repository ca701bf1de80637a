"""The TokenizerManager's control plane: requests to every rank, and what the children report.

A part of :class:`tercet.frontend.tokenizer_manager.TokenizerManager` (mixed into it),
kept here because it is one concept of its own: a control request (flush the
cache, pause, a plugin's own) goes to every data-parallel rank through a
:class:`tercet.ipc.communicator.Communicator`, whose merged replies come back
to the API worker that asked; the ranks' figures for /metrics and the
detokenizer's contained failures arrive here too, as do the answers about
the server's API workers. It uses the manager's router, metrics, failure
counts and worker identity.
"""

from __future__ import annotations

import logging

from tercet.ipc.communicator import Communicator
from tercet.ipc.control_messages import ControlReply, ControlRequest
from tercet.ipc.messages import ContainedFailureReport
from tercet.ipc.rank_metrics import RankMetricsReport

# Logged under the manager's name, as before this part moved here: log filters keep working.
logger = logging.getLogger("tercet.frontend.tokenizer_manager")


class ControlPlane:
    @property
    def senders_to_schedulers(self) -> list:
        """One sender per rank, in rank order (plugins' handlers may send with them)."""
        return self.router.senders_to_schedulers

    @property
    def rank_of_rid(self) -> dict[str, int]:
        """The rank serving each completion in flight (read it; the router keeps it)."""
        return self.router.rank_of_rid

    def num_requests_per_rank(self) -> list[int]:
        return self.router.num_requests_per_rank()

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
