"""DataParallelRouter: which rank gets each prompt (its load balancer's answer, contained), and where its aborts go."""

from __future__ import annotations

import logging

import pytest

from tercet.config import TercetConfig
from tercet.containment import ContainedFailures
from tercet.frontend.data_parallel_router import DataParallelRouter
from tercet.frontend.load_balancer import EvictedPrefix, LoadBalancer
from tercet.ipc.eviction_reports import EvictedPrefixesReport
from tercet.ipc.messages import AbortReq, SamplingParams, TokenizedGenerateReq
from tercet.plugin_host.manager import PluginRegistries, create_plugin_manager

REGISTRY = PluginRegistries.from_plugin_manager(create_plugin_manager()).load_balancers


class RecordingSender:
    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


class RefusingSender:
    def send(self, message):
        raise ValueError("cannot be encoded")


def router_of(num_ranks, load_balance="round_robin", config=None):
    senders = [RecordingSender() for _ in range(num_ranks)]
    balancer = REGISTRY.get(load_balance)(config or TercetConfig(), num_ranks)
    return DataParallelRouter(senders, balancer), senders


def prompt(rid: str, input_ids: list[int]) -> TokenizedGenerateReq:
    return TokenizedGenerateReq(rid, input_ids, SamplingParams(max_new_tokens=1))


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


def test_cache_aware_follows_a_prefix_until_its_rank_reports_evicting_it():
    config = TercetConfig(plugins={"cache_aware": {"cache_threshold": 0.3}})
    router, senders = router_of(2, "cache_aware", config)
    shared = list(range(100, 164))
    first = router.send(prompt("a", shared + [1, 2]), ["a"])
    other = 1 - first
    assert router.send(prompt("b", list(range(500, 560))), ["b"]) == other  # a new prefix: the smaller tree
    assert [router.send(prompt(f"s{index}", shared + [index]), [f"s{index}"]) for index in range(3)] == [first] * 3
    # 24 of 84 tokens held is under the threshold: a new prefix, to the smaller tree (60 tokens against 69).
    assert router.send(prompt("c", shared[:24] + list(range(700, 760))), ["c"]) == other
    # The first rank dropped everything past the prefix's first 16 tokens: it holds 16 of the next prompt,
    # the other rank 24, so the prompt follows the other one.
    router.handle_eviction_report(EvictedPrefixesReport(first, [shared[:32]], [16], [None]))
    assert router.balancer.trees[first].match(shared + [7]) == 16
    assert router.send(prompt("after", shared + [7]), ["after"]) == other


def test_a_malformed_eviction_report_is_dropped_and_counted():
    router, _ = router_of(2, "cache_aware")
    router.send(prompt("a", list(range(64))), ["a"])
    for report in (EvictedPrefixesReport(5, [[1]], [0], [None]), EvictedPrefixesReport(0, [[1, 2]], [2], [None]),
                   EvictedPrefixesReport(0, [[1]], [0, 1], [None])):
        router.handle_eviction_report(report)
    assert router.failures.counts[("eviction_report", None)] == 3
    assert sum(tree.num_tokens for tree in router.balancer.trees) == 64


class Telling(LoadBalancer):
    """Answers what it is told to, and notes every call."""

    def __init__(self, answer):
        super().__init__(TercetConfig(), 2)
        self.answer = answer
        self.calls = []

    def choose_rank(self, request, loads):
        self.calls.append(("choose", request.rid, tuple(request.token_ids), request.num_completions, tuple(loads)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def routed(self, request, rank):
        self.calls.append(("routed", request.rid, rank))

    def finished(self, rid, rank):
        self.calls.append(("finished", rid, rank))

    def evicted(self, rank, prefixes):
        self.calls.append(("evicted", rank, list(prefixes)))


def test_the_balancer_is_told_where_each_prompt_went_what_finished_and_what_was_evicted():
    balancer = Telling(1)
    router = DataParallelRouter([RecordingSender(), RecordingSender()], balancer)
    router.send(prompt("p", [5, 6]), ["p#0", "p#1"])
    router.forget("p#0")
    router.forget("p#0")  # once only
    router.handle_eviction_report(EvictedPrefixesReport(1, [[5, 6]], [1], ["adapter"]))
    assert balancer.calls == [("choose", "p", (5, 6), 2, (0, 0)), ("routed", "p", 1), ("finished", "p#0", 1),
                              ("evicted", 1, [EvictedPrefix((5, 6), 1, "adapter")])]


@pytest.mark.parametrize("answer", [RuntimeError("bug"), 2, -1, "0", True, None])
def test_a_failing_balancer_costs_the_prompt_its_choice_only(answer, caplog):
    balancer = Telling(answer)
    failures = ContainedFailures("server", logging.getLogger("test"))
    router = DataParallelRouter([RecordingSender(), RecordingSender()], balancer, failures, "telling_plugin")
    router.loads[0] = 3  # as though rank 0 held three completions
    assert router.send(prompt("x", [1]), ["x"]) == 1  # the least-loaded rank
    assert failures.counts[("load_balancer", "telling_plugin")] == 1


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
    router = DataParallelRouter([RefusingSender()], REGISTRY.get("round_robin")(TercetConfig(), 1))
    with pytest.raises(ValueError):
        router.send("unencodable", ["u#0", "u#1"])
    assert router.rank_of_rid == {"u#0": 0, "u#1": 0}
    router.forget("u#0")
    router.forget("u#1")
    assert router.rank_of_rid == {} and router.num_requests_per_rank() == [0]
