import asyncio

import pytest

from tercet.errors import RequestError
from tercet.ipc.communicator import Communicator
from tercet.ipc.control_messages import ControlReply, GetInternalStateReq


class FakeRanks:
    """Answers each request from every rank after a delay, counting the requests sent."""

    def __init__(self, num_ranks, delay=0.05, silent_ranks=()):
        self.num_ranks = num_ranks
        self.delay = delay
        self.silent_ranks = set(silent_ranks)
        self.sent = []
        self.communicator = None

    def send(self, message):
        self.sent.append(message)
        loop = asyncio.get_running_loop()
        for rank in range(self.num_ranks):
            if rank not in self.silent_ranks:
                reply = ControlReply(message.request_id, rank, True, data={"rank": rank, "call": len(self.sent)})
                loop.call_later(self.delay * (self.num_ranks - rank), self.communicator.handle_reply, reply)


def make(num_ranks, mode, **options):
    ranks = FakeRanks(num_ranks, **options)
    ranks.communicator = Communicator(GetInternalStateReq, ranks.send, num_ranks, mode)
    return ranks


def test_replies_of_every_rank_are_merged_in_rank_order():
    ranks = make(3, "serial")
    replies = asyncio.run(ranks.communicator.call(timeout=5))
    assert [reply.rank for reply in replies] == [0, 1, 2]
    assert len(ranks.sent) == 1


def test_serial_mode_queues_callers_and_shared_mode_shares_the_call():
    async def three_callers(mode):
        ranks = make(2, mode)
        results = await asyncio.gather(*[ranks.communicator.call(timeout=5) for _ in range(3)])
        return ranks, results

    serial, results = asyncio.run(three_callers("serial"))
    assert len(serial.sent) == 3
    assert sorted(result[0].data["call"] for result in results) == [1, 2, 3]
    shared, results = asyncio.run(three_callers("shared"))
    assert len(shared.sent) == 1
    assert all(result is results[0] for result in results)


def test_a_silent_rank_times_out_with_a_504_naming_who_answered():
    ranks = make(2, "serial", silent_ranks=[1])
    with pytest.raises(RequestError, match=r"1 of 2 ranks answered.*\[0\]") as raised:
        asyncio.run(ranks.communicator.call(timeout=0.3))
    assert raised.value.status_code == 504


def test_a_late_reply_to_a_timed_out_call_is_ignored():
    async def scenario():
        ranks = make(1, "serial", delay=0.4)
        with pytest.raises(RequestError):
            await ranks.communicator.call(timeout=0.1)
        ranks.delay = 0.01
        replies = await ranks.communicator.call(timeout=5)
        await asyncio.sleep(0.5)  # the first call's reply arrives now, and must not disturb anything
        return replies

    (reply,) = asyncio.run(scenario())
    assert reply.data["call"] == 2
