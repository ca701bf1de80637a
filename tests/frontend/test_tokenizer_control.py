"""The TokenizerManager's control plane, built over a stand-in router, with its failure counts and identity."""

from __future__ import annotations

import asyncio

from tercet.containment import ContainedFailures
from tercet.frontend.tokenizer_control import ControlPlane
from tercet.ipc.control_messages import ControlReply, FlushCacheReq
from tercet.ipc.messages import ContainedFailureReport
from tercet.ipc.result_routes import ApiWorker


class TwoRanks:
    """A router to two ranks that keeps what was sent to them all."""

    num_ranks = 2

    def __init__(self):
        self.sent = []

    def send_to_all_ranks(self, message) -> None:
        self.sent.append(message)


def control_plane(worker: ApiWorker) -> ControlPlane:
    """The control plane of API worker ``worker`` over two ranks (no metrics: nothing reports figures here)."""
    plane = ControlPlane(TwoRanks(), worker, metrics=None, failures=ContainedFailures("server"))
    plane.worker_pids = {1: 101, 2: 102}
    return plane


def test_a_control_request_reaches_every_rank_tagged_and_returns_the_replies_by_rank():
    plane = control_plane(ApiWorker(2, 2))

    async def flush_with_replies_out_of_order() -> list[ControlReply]:
        call = asyncio.ensure_future(plane.control(FlushCacheReq, timeout=30))
        while not plane.router.sent:
            await asyncio.sleep(0)
        for rank in (1, 0):
            plane.handle_control_reply(ControlReply(plane.router.sent[0].request_id, rank, ok=True))
        return await call

    assert [reply.rank for reply in asyncio.run(flush_with_replies_out_of_order())] == [0, 1]
    [request] = plane.router.sent
    assert isinstance(request, FlushCacheReq) and request.request_id.startswith("w2:")
    assert list(plane.communicators) == [FlushCacheReq]


def test_the_detokenizers_failures_are_counted_and_a_stranger_is_an_unhandled_message(caplog):
    plane = control_plane(ApiWorker())
    plane.handle_contained_failure_report(ContainedFailureReport("detokenizer", "strategy", "some_plugin"))
    plane.handle_contained_failure_report(ContainedFailureReport("elsewhere", "strategy"))
    counts = plane.contained_failures()
    assert counts["detokenizer"]["by_plugin"] == {"some_plugin": 1}
    assert counts["server"]["by_kind"] == {"unhandled_message": 1}
    assert "unknown component 'elsewhere'" in caplog.text


def test_the_api_workers_are_listed_in_order_naming_this_one():
    assert control_plane(ApiWorker(2, 2)).api_workers() == [
        {"worker": 1, "pid": 101, "is_this_one": False}, {"worker": 2, "pid": 102, "is_this_one": True}]
