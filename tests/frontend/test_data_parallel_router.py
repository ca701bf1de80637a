"""DataParallelRouter: which rank gets each prompt, and where its aborts go."""

from __future__ import annotations

import pytest

from tercet.frontend.data_parallel_router import DataParallelRouter
from tercet.ipc.messages import AbortReq


class RecordingSender:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


class RefusingSender:
    def send(self, message):
        raise ValueError("cannot be encoded")


def router_of(num_ranks, load_balance="round_robin"):
    senders = [RecordingSender() for _ in range(num_ranks)]
    return DataParallelRouter(senders, load_balance), senders


def test_round_robin_takes_the_ranks_in_turn_and_remembers_each_completion():
    router, senders = router_of(3)
    ranks = [router.send(f"prompt {index}", [f"p{index}#0", f"p{index}#1"]) for index in range(4)]
    assert ranks == [0, 1, 2, 0]
    assert [sender.sent for sender in senders] == [["prompt 0", "prompt 3"], ["prompt 1"], ["prompt 2"]]
    assert router.rank_of_rid["p1#1"] == 1 and router.num_requests_per_rank() == [4, 2, 2]


def test_shortest_queue_sends_to_the_rank_holding_fewest_completions():
    router, senders = router_of(2, "shortest_queue")
    assert router.send("wide", ["w#0", "w#1", "w#2"]) == 0
    assert router.send("a", ["a"]) == 1
    assert router.send("b", ["b"]) == 1  # rank 1 holds 1, rank 0 holds 3
    router.forget("w#0")
    router.forget("w#1")
    assert router.send("c", ["c"]) == 0  # now rank 0 holds 1, rank 1 holds 2


def test_an_abort_reaches_the_rank_that_serves_the_completion_only():
    router, senders = router_of(2)
    router.send("first", ["first"])
    router.send("second", ["second"])
    assert router.abort("second")
    assert senders[1].sent == ["second", AbortReq("second")] and senders[0].sent == ["first"]
    router.forget("second")
    assert not router.abort("second") and not router.abort("never sent")


def test_control_messages_go_to_every_rank():
    router, senders = router_of(3)
    router.send_to_all_ranks("flush")
    assert [sender.sent for sender in senders] == [["flush"]] * 3


def test_a_send_that_raises_leaves_its_completions_for_forget_to_clear():
    router = DataParallelRouter([RefusingSender()], "round_robin")
    with pytest.raises(ValueError):
        router.send("unencodable", ["u#0", "u#1"])
    assert router.rank_of_rid == {"u#0": 0, "u#1": 0}
    router.forget("u#0")
    router.forget("u#1")
    assert router.rank_of_rid == {} and router.num_requests_per_rank() == [0]
